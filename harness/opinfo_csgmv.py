"""The csgmv ops' OpInfo inputs (Note [OpInfos] in :mod:`harness.opinfo`): samples and error inputs.

Note [csgmv samples]
--------------------
:func:`csgmv_samples` yields hand-picked :class:`~harness.problem_csgmv.CsgmvProblem` batches, each a
case the contract covers (docs/csgmv.md): one slot and one slice; ragged slices with a rank-0 slot,
a zero-length segment, unrouted rows and a shuffled permutation; a rank above the buffer's ``R``;
CUDA-graph padding with stale host ints; the expand into a column view of a wider projection and
into fresh zeros; the 0.5.22+ keywords.  Sizes stay tiny (S <= 12, K <= 32): the selfcheck runs each
through two float64 oracles in every dtype.

:func:`csgmv_errors` yields one or more :class:`~harness.opinfo.ErrorInput` per csgmv row of the
contract table: the error sample ``x`` (6, 16), ``weights`` (2, 16, 16) or (2, 16, 8), segments of
3 and 2 rows on slots 0 and 1 (ranks 4 and 8), permutation (4, 0, 2, 1, 3), one unrouted row, two
slices at (0, 10, 16), broken by the mutations of :mod:`harness.mutations_csgmv`, with the exact
fields of the message.
"""

from __future__ import annotations

from typing import Iterator

import torch

from kernel_oracle.reference._helpers import describe_tensor
from kernel_oracle.reference.contracts import CONTRACTS
from kernel_oracle.reference.signatures import signature
from kernel_oracle.harness.mutations import Mutation
from kernel_oracle.harness.opinfo_rows import DTYPE_NAME as _DTYPE_NAME, FLOATS, ErrorInput, OpInfo, Sample
from kernel_oracle.harness.problem_csgmv import CsgmvProblem

__all__ = ["CSGMV_EDGE_CASES", "CSGMV_OPINFOS", "csgmv_errors", "csgmv_samples"]

# name -> the problem's fields (op and dtype come from the OpInfo); ``ops`` limits a row to some ops
CSGMV_EDGE_CASES = {
    # one slot, one slice, rows in order
    "one-slot": dict(seg_lens=(3,), weight_indices=(0,), lora_ranks=(8,), scalings=(1.0,), permutation=(0, 1, 2)),
    # three ragged slices; slot 1 has rank 0 (its rows are never written); a zero-length segment; 2 unrouted rows
    "ragged": dict(seg_lens=(4, 0, 3, 2), weight_indices=(0, 1, 1, 2), lora_ranks=(8, 0, 4),
                   scalings=(1.0, 0.5, -1.25), permutation=(7, 0, 3, 8, 1, 5, 2, 6, 4), num_slices=3,
                   slice_offsets=(0, 12, 18, 24), unrouted_rows=2),
    # rank 10 above the buffer's R = 8: the kernels use min(R, rank)
    "rank-above-R": dict(seg_lens=(5,), weight_indices=(0,), lora_ranks=(10,), scalings=(2.0,),
                         permutation=(4, 3, 2, 1, 0), num_slices=2, slice_offsets=(0, 8, 16)),
    # CUDA graph: padded to 5 device segments, capture-time host ints (1, 1) below the batch's 2
    "graph-stale-ints": dict(seg_lens=(2, 3), weight_indices=(1, 0), lora_ranks=(4, 8), scalings=(0.5, 1.0),
                             permutation=(0, 1, 2, 3, 4), use_cuda_graph=True, graph_pad_to=5,
                             stale_host_ints=(1, 1)),
    # the expand into a column view of a wider projection, and into fresh zeros
    "view-base": dict(seg_lens=(3,), weight_indices=(0,), lora_ranks=(8,), scalings=(1.0,), permutation=(2, 0, 1),
                      base="view", unrouted_rows=1, ops=("csgmv_expand",)),
    "no-base": dict(seg_lens=(2, 2), weight_indices=(0, 1), lora_ranks=(8, 4), scalings=(1.0, -1.0),
                    permutation=(3, 1, 0, 2), base="none", ops=("csgmv_expand",)),
    # the 0.5.22+ keywords
    "split-k": dict(seg_lens=(4,), weight_indices=(0,), lora_ranks=(8,), scalings=(1.0,), permutation=(0, 1, 2, 3),
                    K=32, split_k=2, ops=("csgmv_shrink",)),
    "offsets-cpu": dict(seg_lens=(4,), weight_indices=(0,), lora_ranks=(8,), scalings=(1.0,),
                        permutation=(0, 1, 2, 3), num_slices=2, slice_offsets=(0, 10, 16), cpu_offsets=True,
                        ops=("csgmv_expand",)),
}


def csgmv_samples(op: str, table: dict = CSGMV_EDGE_CASES):
    """``(device, dtype) -> Iterator[Sample]``: the rows of ``table`` that apply to ``op``, seeded by position."""
    def gen(device: str, dtype: torch.dtype) -> Iterator:
        for seed, (name, fields) in enumerate(table.items()):
            fields = dict(fields)
            if op not in fields.pop("ops", (op,)):
                continue
            yield Sample(CsgmvProblem(op=op, dtype=_DTYPE_NAME[dtype], seed=seed, **fields), name)
    return gen


def _error_sample(op: str, **extra):
    return Sample(CsgmvProblem(op=op, seg_lens=(3, 2), weight_indices=(0, 1), lora_ranks=(4, 8), scalings=(1.0, 0.5),
                               permutation=(4, 0, 2, 1, 3), num_slices=2, slice_offsets=(0, 10, 16), K=16, R=8,
                               unrouted_rows=1, seed=3, **extra), "error")


def _m(kind: str, index: int = 0, amount: int = 1) -> Mutation:
    return Mutation("csgmv", kind, index, amount)


_INT_FIX = "build it with torch.tensor(values, dtype=torch.int32, device=x.device)"
_FLOAT_FIX = "build it with torch.tensor(values, dtype=torch.float32, device=x.device)"


def _tensor_fields(field: str, floating: bool = False):
    kind = "floating-point" if floating else "int32 or int64"
    return lambda c: dict(field=f"batch_info.{field}", expected=f"a 1-D {kind} tensor on {c.args[0].device}",
                          got=describe_tensor(getattr(c.args[2], field)), fix=_FLOAT_FIX if floating else _INT_FIX)


def _metadata_errors(op: str) -> Iterator:
    """The rows every op shares: the upstream asserts and the batch info's strict rows."""
    s = _error_sample
    yield ErrorInput(s(op), _m("x_not_contiguous"), "csgmv.assert")
    yield ErrorInput(s(op), _m("weights_not_contiguous"), "csgmv.assert")
    # seg_indptr as float32; no permutation; scalings on another device
    yield ErrorInput(s(op), _m("metadata_dtype", 0), "csgmv.strict.metadata_tensor", _tensor_fields("seg_indptr"))
    yield ErrorInput(s(op), _m("drop_permutation"), "csgmv.strict.metadata_tensor", _tensor_fields("permutation"),
                     runs_without_strict=False)
    yield ErrorInput(s(op), _m("metadata_device", 3), "csgmv.strict.metadata_tensor",
                     _tensor_fields("scalings", floating=True), runs_without_strict=False)
    yield ErrorInput(s(op), _m("bad_max_len", 0), "csgmv.strict.bad_count",
                     dict(field="max_len", value="0", why="pass the chunk size, a positive int (the kernels' row tile)"))
    yield ErrorInput(s(op), _m("bad_num_segments"), "csgmv.strict.bad_count",
                     dict(field="num_segments", value="3", why="weight_indices holds 2 segments; pass num_segments <= 2"),
                     runs_without_strict=False)
    yield ErrorInput(s(op), _m("seg_indptr_negative_start"), "csgmv.strict.seg_indptr_start", dict(value=-1),
                     runs_without_strict=False)
    # seg_indptr (0, 3, 5) -> (0, 3, 2)
    yield ErrorInput(s(op), _m("seg_indptr_decreasing"), "csgmv.strict.seg_indptr_decreasing",
                     dict(index=2, value=2, prev_index=1, prev=3, length=-1))
    yield ErrorInput(s(op), _m("max_len_too_small"), "csgmv.strict.max_len_too_small", dict(longest=3, value=2))
    yield ErrorInput(s(op), _m("slot_out_of_range"), "csgmv.strict.slot_out_of_range",
                     dict(index=0, value=2, slots=2), runs_without_strict=False)
    yield ErrorInput(s(op), _m("negative_rank"), "csgmv.strict.negative_rank", dict(index=0, value=-1))
    # 5 covered logical rows, 4 permutation entries
    yield ErrorInput(s(op), _m("permutation_short"), "csgmv.strict.permutation_length", dict(got=4, last=4))
    # logical row 0 -> physical row 6 of x's 6 rows: the out-of-bounds write upstream does not check
    yield ErrorInput(s(op), _m("permutation_out_of_range"), "csgmv.strict.permutation_range",
                     dict(index=0, value=6, rows=6), runs_without_strict=False)


def csgmv_errors(op: str):
    """``device -> Iterator[ErrorInput]`` of ``op``: the shared rows, then the shrink's split_k or the
    expand's slice rows."""
    def gen(device: str) -> Iterator:
        yield from _metadata_errors(op)
        s = _error_sample
        if op == "csgmv_shrink":
            yield ErrorInput(s(op), _m("split_k_below_one"), "csgmv.split_k")
            return
        # slice_offsets (0, 10, 16) -> (0, 10, 9); -> (0, 10, 17) past the 16 output columns
        yield ErrorInput(s(op), _m("slice_offsets_decreasing"), "csgmv.strict.slice_offsets_decreasing",
                         dict(index=2, value=9, prev_index=1, prev=10, width=-1))
        yield ErrorInput(s(op), _m("slice_offsets_past_output"), "csgmv.strict.slice_offsets_range",
                         dict(index=2, value=17, columns=16))
        yield ErrorInput(s(op), _m("max_slice_size_too_small"), "csgmv.strict.max_slice_size",
                         dict(widest=10, value=9))
        yield ErrorInput(s(op, cpu_offsets=True), _m("slice_offsets_cpu_mismatch"), "csgmv.strict.offsets_cpu",
                         dict(cpu=[0, 10, 15], offsets=[0, 10, 16]))
    return gen


# csgmv: hand-picked samples and one error input per contract row; the fuzzer draws
# its problems through its strategy (kernel_oracle.fuzz.strategies_csgmv)
CSGMV_OPINFOS = tuple(
    OpInfo(signature=signature(op), dtypes=FLOATS, sample_inputs=csgmv_samples(op),
           exhaustive_inputs=csgmv_samples(op), error_inputs=csgmv_errors(op),
           contracts=tuple(c.id for c in CONTRACTS.values() if c.api == "csgmv" and c.origin == "upstream"))
    for op in ("csgmv_shrink", "csgmv_expand")
)
