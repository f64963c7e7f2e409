"""The kv_b LoRA ops' rows of the op database (Note [OpInfos] in :mod:`harness.opinfo`), which the ``lora``
record names (its ``opinfos``): hand-picked samples, realistic shapes, one error input per broken invariant,
and the selfcheck's random problems."""

from __future__ import annotations

import dataclasses
import functools
import random
from typing import Callable, Iterator

import torch

from kernel_oracle.reference import lora as ref_lora
from kernel_oracle.reference._helpers import describe_layout, describe_tensor
from kernel_oracle.reference.signatures import signature

from kernel_oracle.harness.mutations import Mutation
from kernel_oracle.harness.opinfo_rows import DTYPE_NAME as _DTYPE_NAME, FLOATS, ErrorInput, OpInfo, Sample
from kernel_oracle.harness.problems import batch_info_of
from kernel_oracle.harness.problem_lora import LoRAProblem

__all__ = ["LORA_EDGE_CASES", "LORA_EXHAUSTIVE_CASES", "LORA_OPINFOS", "random_lora_problem"]


# ---- LoRA edge cases -----------------------------------------------------------------------------
# (name, segment lengths, slot per segment, rank per slot, scaling per slot, extra problem fields)
LORA_EDGE_CASES = [
    # one segment, full rank, unit scaling
    ("single", (5,), (0,), (16,), (1.0,), {}),
    # ragged, mixed ranks incl. 0 (slot 2 off) and below R, negative and non-unit scalings
    ("ragged_mixed_ranks", (7, 0, 19, 3), (0, 1, 2, 1), (16, 5, 0), (0.5, -2.0, 1.0), {}),
    # rows routed through a permutation, plus unrouted rows that must stay untouched
    ("permuted_extra_rows", (4, 9, 2), (1, 0, 1), (8, 16), (1.5, -0.25), {"permute": True, "extra_rows": 5}),
    # CUDA-graph replay: 2 real segments padded with zero-length tail segments to 6
    ("cuda_graph_padded", (6, 11), (1, 0), (16, 12), (1.0, 0.75), {"cuda_graph_pad_to": 6}),
    # decode shape: many one-token segments (token-major path in our kernels)
    ("decode_one_token_segments", (1,) * 24, tuple(i % 3 for i in range(24)), (16, 3, 9), (1.0, 2.0, -1.0), {}),
    # head dims not multiples of block sizes, only seg_lens given (no max_len), zero scaling
    ("odd_dims_seg_lens_only", (13, 4), (0, 1), (7, 16), (0.0, 1.0), {"qk": 72, "vd": 24, "C": 80, "R": 16,
                                                                      "with_max_len": False}),
    # strided (non-contiguous) activations and base_output
    ("strided_views", (9, 3), (1, 0), (16, 11), (1.0, -0.5), {"strided": True}),
    # no segments at all
    ("empty_batch", (), (), (16,), (1.0,), {"extra_rows": 3}),
]

LORA_EXHAUSTIVE_CASES = [
    # realistic: H=64, qk=vd=128, C=512, R=32, 4 slots, prefill
    ("prefill_4x256", (256,) * 4, (0, 1, 2, 3), (32, 16, 0, 8), (1.0, 0.5, 2.0, -1.0),
     {"H": 64, "qk": 128, "vd": 128, "C": 512, "R": 32}),
    # realistic decode: 64 one-token segments
    ("decode_bs64", (1,) * 64, tuple(i % 4 for i in range(64)), (32, 32, 16, 64 // 2), (1.0, 0.5, 2.0, 1.0),
     {"H": 64, "qk": 128, "vd": 128, "C": 512, "R": 32, "permute": True}),
    # R=64 with ranks below it
    ("ragged_r64", (100, 1, 37, 0, 260), (3, 0, 1, 2, 0), (64, 48, 17, 0), (1.0, -1.0, 0.25, 1.0),
     {"H": 64, "qk": 128, "vd": 128, "C": 512, "R": 64}),
]

def _lora_samples(op: str, table) -> Callable[[str, torch.dtype], Iterator[Sample]]:
    def gen(device: str, dtype: torch.dtype) -> Iterator[Sample]:
        for i, (name, lens, slots, ranks, scal, extra) in enumerate(table):
            p = LoRAProblem(op=op, seg_lens=lens, weight_indices=slots, lora_ranks=ranks, scalings=scal,
                            dtype=_DTYPE_NAME[dtype], seed=1000 + i, **extra)
            yield Sample(p, name)
        if dtype in (torch.float16, torch.bfloat16) and signature(op).inplace is not None:
            # base_output in fp32 while activations are half precision
            p = LoRAProblem(op=op, seg_lens=(6, 5), weight_indices=(0, 1), lora_ranks=(16, 4), scalings=(1.0, -3.0),
                            dtype=_DTYPE_NAME[dtype], base_dtype="float32", seed=77)
            yield Sample(p, "base_fp32")
    return gen


def _error_sample(op: str, **kw) -> Sample:
    """The sample the LoRA error rows break: segments (3, 4) on slots (0, 1) of ranks (16, 8): S=7 rows,
    L=2 slots, H=2 heads, qk=48, vd=40, kv_lora_rank C=64, R=16."""
    fields = dict(op=op, seg_lens=(3, 4), weight_indices=(0, 1), lora_ranks=(16, 8), scalings=(1.0, 0.5), seed=5)
    fields.update(kw)
    return Sample(LoRAProblem(**fields), "err")


def _lora_mutation(kind: str, index: int = 0, amount: int = 1) -> Mutation:
    return Mutation("lora", kind, index, amount)


def _lora_metadata_errors(op: str) -> Iterator[ErrorInput]:
    """The rows that break the batch info (upstream's contract first, then our strict checks)."""
    base, m = functools.partial(_error_sample, op), _lora_mutation
    # upstream: neither max_len nor seg_lens
    yield ErrorInput(base(), m("drop_max_len_and_seg_lens"), "lora.missing_max_len")
    # upstream beats strict: missing max_len AND a bad slot (weight_indices[1] = 2) -> the upstream error
    yield ErrorInput(base(), m("drop_lengths_and_bad_slot", 1), "lora.missing_max_len")
    # strict: slot outside [0, L): weight_indices[1] = 2
    yield ErrorInput(base(), m("slot_out_of_range", 1), "lora.strict.slot_out_of_range",
                     dict(index=1, value=2, num_slots=2, last=1))
    # strict: max_len 3, smaller than the longest segment (4)
    yield ErrorInput(base(), m("max_len_too_small"), "lora.strict.max_len_too_small",
                     dict(value=3, index=1, longest=4))
    # strict: seg_indptr decreasing: (0, 3, 7) -> (0, 3, 2)
    yield ErrorInput(base(), m("seg_indptr_decreasing", 1), "lora.strict.seg_indptr_decreasing",
                     dict(index=2, value=2, prev_index=1, prev=3, length=-1))
    # strict: max_len None and seg_lens (3, 3), whose maximum misses segment 1's 4 rows (seg_indptr (0, 3, 7))
    yield ErrorInput(base(), m("seg_lens_mismatch"), "lora.strict.seg_lens_mismatch",
                     dict(index=1, value=3, next_index=2, expected=4, longest=3))
    # strict: segment end 9 beyond the 7 rows
    yield ErrorInput(base(), m("seg_indptr_past_rows", 0, 2), "lora.strict.seg_indptr_range",
                     dict(index=2, value=9, rows=7, what="token rows of the input"))
    # strict: seg_indptr starting below 0
    yield ErrorInput(base(), m("seg_indptr_negative_start"), "lora.strict.seg_indptr_start", dict(value=-1))
    # strict: permutation with a repeated row: permutation[1] = permutation[0]
    yield ErrorInput(base(permute=True), m("permutation_duplicate"), "lora.strict.permutation_duplicate",
                     lambda c: dict(index=1, value=int(batch_info_of(c).permutation[0]), first=0))
    # strict: permutation[0] = 7, out of range
    yield ErrorInput(base(permute=True), m("permutation_out_of_range"), "lora.strict.permutation_range",
                     dict(index=0, value=7, rows=7))
    # strict: lora_ranks[1] = -1
    yield ErrorInput(base(), m("negative_rank", 1), "lora.strict.negative_rank", dict(index=1, value=-1))
    # strict: batch_info.num_segments not an int
    yield ErrorInput(base(), m("bad_num_segments"), "lora.strict.bad_count",
                     dict(field="num_segments", value="2.0", why="pass a non-negative Python int"))
    # strict: weight_indices of the wrong dtype
    yield ErrorInput(base(), m("metadata_dtype"), "lora.strict.metadata_tensor",
                     lambda c: dict(field="weight_indices", expected="int32",
                                    got=describe_tensor(batch_info_of(c).weight_indices),
                                    fix="pass weight_indices.to(torch.int32)"))
    # strict: seg_indptr on another device than the data ("meta" stands in for a second GPU)
    yield ErrorInput(base(), m("metadata_device", 1), "lora.strict.metadata_tensor",
                     lambda c: dict(field="seg_indptr", expected=f"on {c.args[0].device} (the data's device)",
                                    got=describe_tensor(batch_info_of(c).seg_indptr),
                                    fix=f"pass seg_indptr.to('{c.args[0].device}')"),
                     runs_without_strict=False)
    # strict: seg_indptr of the wrong rank, (1, 3)
    yield ErrorInput(base(), m("metadata_rank", 1), "lora.strict.metadata_tensor",
                     lambda c: dict(field="seg_indptr", expected="1-D",
                                    got=describe_tensor(batch_info_of(c).seg_indptr),
                                    fix="pass seg_indptr.view(-1)"),
                     runs_without_strict=False)


def _lora_data_errors(op: str) -> Iterator[ErrorInput]:
    """The rows that break the data tensors of ``op`` (upstream crashes on these in its own way)."""
    sig, base, m = signature(op), functools.partial(_error_sample, op), _lora_mutation
    if sig.inplace is not None:  # base_output with 3 heads, the activations with 2
        yield ErrorInput(base(), m("data_heads", sig.data.index(sig.inplace)), "lora.strict.shape_mismatch",
                         lambda c: dict(field=sig.inplace, got=tuple(c.arg(sig.inplace).shape),
                                        expected=(7, 2, c.arg(sig.inplace).shape[2]),
                                        why="base_output is (S, H, output dim) of the step"),
                         runs_without_strict=False)
        # base_output whose rows alias one row (stride 0): in-place updates would collide
        yield ErrorInput(base(), m("data_stride0", sig.data.index(sig.inplace)), "lora.strict.tensor_attr",
                         lambda c: dict(field=sig.inplace,
                                        expected="a tensor whose elements do not share memory (it is updated "
                                                 "in place)", got=describe_layout(c.arg(sig.inplace)),
                                        fix=f"dimension 0 (size 7) has stride 0, so its 7 entries share memory; "
                                            f"pass a tensor that owns its memory, e.g. {sig.inplace}.clone(), "
                                            "and use the returned one"),
                         runs_without_strict=False)
    if sig.params[0] == "attn_output":  # attn_output 65 wide, kv_lora_rank 64
        yield ErrorInput(base(), m("data_last_dim", 0), "lora.strict.shape_mismatch",
                         dict(field="attn_output", got=(7, 2, 65), expected=(7, 2, 64),
                              why="attn_output's last dim is kv_lora_rank"),
                         runs_without_strict=False)
    if "A_buf" in sig.params:  # an integer LoRA buffer
        yield ErrorInput(base(), m("data_int", sig.data.index("A_buf")), "lora.strict.tensor_attr",
                         lambda c: dict(field="A_buf", expected="a floating-point torch.Tensor",
                                        got=describe_tensor(c.arg("A_buf")), fix="pass fp16, bf16, fp32 or fp64 data"),
                         runs_without_strict=False)


def _lora_errors(op: str) -> Callable[[str], Iterator[ErrorInput]]:
    """One broken invariant per row (:func:`_error_sample` broken by one mutation); fields give the
    exact expected text."""

    def gen(device: str) -> Iterator[ErrorInput]:
        yield from _lora_metadata_errors(op)
        yield from _lora_data_errors(op)
    return gen


def random_lora_problem(op: str, rng: random.Random, dtype: str) -> LoRAProblem:
    """A random well-formed LoRA problem of the selfcheck (Note [Selfcheck] in kernel_oracle/jobs/selfcheck.py)."""
    R = rng.choice((8, 16, 32))
    L = rng.randint(1, 3)
    n = rng.randint(1, 6)
    lens = tuple(rng.choice((0, 1, 1, 2, 3, 5, 8, 13)) for _ in range(n))
    p = LoRAProblem(
        op=op, seg_lens=lens, weight_indices=tuple(rng.randrange(L) for _ in range(n)),
        lora_ranks=tuple(rng.choice((0, 1, R // 2, R, R + 8)) for _ in range(L)),
        scalings=tuple(round(rng.uniform(-2.0, 2.0), 3) for _ in range(L)),
        H=rng.randint(1, 3), qk=rng.choice((16, 24, 48)), vd=rng.choice((16, 40)), C=rng.choice((32, 48, 64)),
        R=R, extra_rows=rng.randint(0, 3), permute=rng.random() < 0.5,
        cuda_graph_pad_to=(n + rng.randint(0, 4) if rng.random() < 0.3 else None),
        with_max_len=rng.random() < 0.7, strided=rng.random() < 0.25,
        dtype=dtype, seed=rng.randrange(2**31),
    )
    return p if p.with_max_len or p.with_seg_lens else dataclasses.replace(p, with_max_len=True)


LORA_OPINFOS = tuple(
    OpInfo(
        signature=signature(op), dtypes=FLOATS,
        sample_inputs=_lora_samples(op, LORA_EDGE_CASES),
        exhaustive_inputs=_lora_samples(op, LORA_EXHAUSTIVE_CASES),
        error_inputs=_lora_errors(op),
        contracts=("lora.missing_max_len",),
        random_inputs=random_lora_problem,
    )
    for op in ref_lora.LORA_OPS
)
