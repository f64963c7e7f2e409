"""One entry of data per operator (PyTorch OpInfo style).

Note [OpInfos]
--------------
Every operator the suite checks is an :class:`OpInfo`: its name, family, the entry-point name a
target module must export, the reference oracle, the dtypes, the index of the argument it updates
in place, and two generators with one signature, ``(device, dtype) -> Iterator[Sample]``:

* ``sample_inputs``: small, fast, hand-picked edge cases (commented literal tables below) that
  every run uses, CPU interpreter included;
* ``exhaustive_inputs``: realistic shapes, for the GPU or when time allows.

``error_inputs(device)`` yields :class:`ErrorInput` rows: an input, the contract id and fields of
the exact error it must raise, and whether the error belongs to upstream or to strict validation.
One generic test runs them all against every target.

An OpInfo checks itself on construction and says why when it is inconsistent.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

import torch

from kernel_oracle.reference import lora as ref_lora
from kernel_oracle.reference import vision as ref_vision
from kernel_oracle.reference._helpers import describe_tensor
from kernel_oracle.reference.contracts import CONTRACTS, contract

from kernel_oracle.harness.problems import LORA_ENTRY, Call, LoRAProblem, VisionProblem, materialize

__all__ = ["ErrorInput", "FAMILY_OPS", "OpInfo", "Sample", "OP_DB", "LORA_OPINFOS", "VISION_OPINFO", "entry_names",
           "op_info"]


@dataclass
class Sample:
    """A problem (plain data) and a short name for test ids."""

    problem: object
    name: str

    def call(self, device) -> Call:
        return materialize(self.problem, device)


@dataclass
class ErrorInput:
    """An input that must raise ``contract_id`` with ``fields``; ``mutate(call)`` breaks one thing
    of a valid call (in place) after materialisation."""

    sample: Sample
    contract_id: str
    fields: dict | Callable[[Call], dict]
    mutate: Callable[[Call], None] = lambda call: None

    def build(self, device) -> tuple[Call, str]:
        """The broken call and the exact message it must raise."""
        call = self.sample.call(device)
        self.mutate(call)
        fields = self.fields(call) if callable(self.fields) else self.fields
        return call, contract(self.contract_id).message(**fields)

    @property
    def origin(self) -> str:
        return contract(self.contract_id).origin


@dataclass(frozen=True)
class OpInfo:
    name: str
    family: str
    entry: str
    oracle: Callable
    dtypes: tuple[torch.dtype, ...]
    inplace_arg: Optional[int]
    sample_inputs: Callable[[str, torch.dtype], Iterator[Sample]]
    exhaustive_inputs: Callable[[str, torch.dtype], Iterator[Sample]]
    error_inputs: Callable[[str], Iterator[ErrorInput]]
    contracts: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.family not in ("lora", "vision"):
            raise ValueError(f"OpInfo {self.name!r}: family={self.family!r}; the only valid values are lora, vision")
        unknown = [c for c in self.contracts if c not in CONTRACTS]
        if unknown:
            raise ValueError(f"OpInfo {self.name!r} names contracts {unknown} that the contract table lacks")
        wrong = [c for c in self.contracts if CONTRACTS[c].api != self.family]
        if wrong:
            raise ValueError(f"OpInfo {self.name!r} ({self.family}) names contracts of another family: {wrong}")
        if not self.dtypes:
            raise ValueError(f"OpInfo {self.name!r} lists no dtypes")


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

_DTYPE_NAME = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32",
               torch.float64: "float64"}


def _lora_samples(op: str, table) -> Callable[[str, torch.dtype], Iterator[Sample]]:
    def gen(device: str, dtype: torch.dtype) -> Iterator[Sample]:
        for i, (name, lens, slots, ranks, scal, extra) in enumerate(table):
            p = LoRAProblem(op=op, seg_lens=lens, weight_indices=slots, lora_ranks=ranks, scalings=scal,
                            dtype=_DTYPE_NAME[dtype], seed=1000 + i, **extra)
            yield Sample(p, name)
        if dtype in (torch.float16, torch.bfloat16) and op in ("step_b_q", "step_b_v", "q_side_fused", "v_side_fused"):
            # base_output in fp32 while activations are half precision
            p = LoRAProblem(op=op, seg_lens=(6, 5), weight_indices=(0, 1), lora_ranks=(16, 4), scalings=(1.0, -3.0),
                            dtype=_DTYPE_NAME[dtype], base_dtype="float32", seed=77)
            yield Sample(p, "base_fp32")
    return gen


def _lora_errors(op: str) -> Callable[[str], Iterator[ErrorInput]]:
    """One broken invariant per row; fields give the exact expected text."""

    def base(**kw) -> Sample:
        fields = dict(op=op, seg_lens=(3, 4), weight_indices=(0, 1), lora_ranks=(16, 8), scalings=(1.0, 0.5), seed=5)
        fields.update(kw)
        return Sample(LoRAProblem(**fields), "err")

    def setattr_bi(name, value):
        def mutate(call: Call) -> None:
            bi = next(a for a in call.args if hasattr(a, "seg_indptr"))
            setattr(bi, name, value(bi) if callable(value) else value)
        return mutate

    def set_tensor(name, index, value):
        def mutate(call: Call) -> None:
            bi = next(a for a in call.args if hasattr(a, "seg_indptr"))
            getattr(bi, name)[index] = value
        return mutate

    def gen(device: str) -> Iterator[ErrorInput]:
        # upstream: neither max_len nor seg_lens
        yield ErrorInput(base(with_max_len=False, with_seg_lens=False), "lora.missing_max_len", {})
        # upstream beats strict: missing max_len AND a bad slot -> the upstream error
        yield ErrorInput(base(with_max_len=False, with_seg_lens=False), "lora.missing_max_len", {},
                         set_tensor("weight_indices", 1, 7))
        # strict: slot outside [0, L)
        yield ErrorInput(base(), "lora.strict.slot_out_of_range",
                         dict(index=1, value=2, num_slots=2, last=1), set_tensor("weight_indices", 1, 2))
        # strict: max_len smaller than the longest segment
        yield ErrorInput(base(), "lora.strict.max_len_too_small", dict(value=3, index=1, longest=4),
                         setattr_bi("max_len", 3))
        # strict: seg_indptr decreasing
        yield ErrorInput(base(), "lora.strict.seg_indptr_decreasing",
                         dict(index=2, value=4, prev_index=1, prev=5, length=-1), _decreasing())
        # strict: seg_lens inconsistent with seg_indptr
        yield ErrorInput(base(), "lora.strict.seg_lens_mismatch",
                         dict(index=0, value=2, next_index=1, expected=3), set_tensor("seg_lens", 0, 2))
        # strict: segment end beyond the rows
        yield ErrorInput(base(), "lora.strict.seg_indptr_range",
                         dict(index=2, value=9, rows=7, what="token rows of the input"), set_tensor("seg_indptr", 2, 9))
        # strict: permutation with a repeated row
        yield ErrorInput(base(permute=True), "lora.strict.permutation_duplicate",
                         lambda c: dict(index=1, value=int(_bi(c).permutation[0]), first=0), _dup_perm())
        # strict: permutation entry out of range
        yield ErrorInput(base(permute=True), "lora.strict.permutation_range",
                         dict(index=0, value=7, rows=7), set_tensor("permutation", 0, 7))
        # strict: negative rank
        yield ErrorInput(base(), "lora.strict.negative_rank", dict(index=1, value=-1),
                         set_tensor("lora_ranks", 1, -1))
        # strict: weight_indices of the wrong dtype
        yield ErrorInput(base(), "lora.strict.metadata_tensor",
                         lambda c: dict(field="weight_indices", expected="int32", got=describe_tensor(_bi(c).weight_indices),
                                        fix="pass weight_indices.to(torch.int32)"),
                         setattr_bi("weight_indices", lambda bi: bi.weight_indices.to(torch.int64)))
    return gen


def _bi(call: Call):
    return next(a for a in call.args if hasattr(a, "seg_indptr"))


def _decreasing():
    def mutate(call: Call) -> None:
        bi = next(a for a in call.args if hasattr(a, "seg_indptr"))
        bi.seg_indptr[1] = 5  # (0, 5, 7): fine; then make segment 1 negative
        bi.seg_indptr[2] = 4
        bi.seg_lens = None
        bi.max_len = 7
    return mutate


def _dup_perm():
    def mutate(call: Call) -> None:
        bi = next(a for a in call.args if hasattr(a, "seg_indptr"))
        bi.permutation[1] = bi.permutation[0]
    return mutate


# ---- vision edge cases ---------------------------------------------------------------------------
# (name, lengths, extra problem fields)
VISION_EDGE_CASES = [
    # one sequence
    ("single", (9,), {}),
    # ragged with a zero-length entry; bucket padding adds 4 more
    ("ragged_with_zero", (5, 0, 17, 3), {}),
    # v a strided view into an interleaved qkv buffer, v and o at their own offsets
    ("v_strided_shifted", (6, 11), {"layout": "v_strided", "v_shift": 2, "o_shift": 3}),
    # kwargs path with max_seqlen as a CPU tensor, non-default softmax scale
    ("kwargs_cpu_tensor_scale", (7, 4), {"path": "kwargs", "max_seqlen_kind": "cpu_tensor", "softmax_scale": 0.3}),
    # 4-D input, max_seqlen as a device tensor, head dim not a power of two
    ("four_d_device_tensor_d24", (8, 5), {"four_d": True, "max_seqlen_kind": "device_tensor", "D": 24}),
    # large-magnitude logits
    ("large_logits", (12, 7), {"logit_scale": 30.0}),
    # uncovered tokens at the end of the buffer
    ("uncovered_tail", (4, 6), {"extra_tokens": 5}),
]

VISION_EXHAUSTIVE_CASES = [
    # realistic image mix, 16 heads, dim 80
    ("images_d80", (1024, 576, 64, 1300), {"H": 16, "D": 80}),
    # long sequence, dim 128
    ("long_16k_d128", (16384,), {"H": 4, "D": 128}),
    ("d72_ragged", (4096, 17, 1000), {"H": 16, "D": 72, "layout": "v_strided"}),
]


def _vision_samples(table) -> Callable[[str, torch.dtype], Iterator[Sample]]:
    def gen(device: str, dtype: torch.dtype) -> Iterator[Sample]:
        for i, (name, lens, extra) in enumerate(table):
            yield Sample(VisionProblem(lengths=lens, dtype=_DTYPE_NAME[dtype], seed=2000 + i, **extra), name)
    return gen


def _vision_errors(device: str) -> Iterator[ErrorInput]:
    def base(**kw) -> Sample:
        fields = dict(lengths=(3, 5), seed=9, path="kwargs")
        fields.update(kw)
        return Sample(VisionProblem(**fields), "err")

    def drop_kw(name):
        def mutate(call: Call) -> None:
            call.kwargs.pop(name)
        return mutate

    def set_kw(name, value):
        def mutate(call: Call) -> None:
            call.kwargs[name] = value(call) if callable(value) else value
        return mutate

    def set_indptrs(value):
        def mutate(call: Call) -> None:
            call.args = call.args[:3] + (value(call),) + call.args[4:]
        return mutate

    # upstream, in SGLang's order (a later row breaks two things: the earlier check must win)
    yield ErrorInput(base(), "vision.missing_sequence_lengths", {}, drop_kw("sequence_lengths"))
    yield ErrorInput(base(), "vision.missing_sequence_lengths", {},
                     lambda c: (c.kwargs.pop("sequence_lengths"), c.kwargs.pop("max_seqlen")))
    yield ErrorInput(base(), "vision.missing_max_seqlen", {}, drop_kw("max_seqlen"))
    yield ErrorInput(base(), "vision.indptrs_not_tensor", {}, set_indptrs(lambda c: c.args[3].tolist()))
    yield ErrorInput(base(), "vision.indptrs_not_tensor", {},
                     lambda c: (set_indptrs(lambda c: None)(c), set_kw("sequence_lengths", [3, 5])(c)))
    yield ErrorInput(base(), "vision.sequence_lengths_not_tensor", {},
                     set_kw("sequence_lengths", lambda c: c.kwargs["sequence_lengths"].tolist()))
    yield ErrorInput(base(), "vision.indptr_numel_mismatch", dict(got=26, expected=27),
                     set_indptrs(lambda c: c.args[3][:-1]))
    yield ErrorInput(base(), "vision.offset_out_of_bounds", {}, _push_qk_offset(1))
    # strict: max_seqlen smaller than the longest sequence
    yield ErrorInput(base(), "vision.strict.max_seqlen_too_small", dict(value=4, index=1, longest=5),
                     set_kw("max_seqlen", 4))
    # strict: negative length (upstream accepts it silently)
    yield ErrorInput(base(), "vision.strict.negative_length", dict(index=2, value=-1),
                     lambda c: c.kwargs["sequence_lengths"].__setitem__(2, -1))
    # strict: an offset that is not a multiple of the token stride
    yield ErrorInput(base(), "vision.strict.misaligned_offset",
                     dict(field="v_indptr", index=1, value=3 * 32 + 1, tensor="v", stride=32), _bump_v_offset())


def _push_qk_offset(extra_tokens: int):
    def mutate(call: Call) -> None:
        ind = call.args[3].clone()
        T, H, D = call.args[0].shape
        ind[1] = (T - 5 + extra_tokens) * H * D  # sequence 1 (5 tokens) now runs past the end
        call.args = call.args[:3] + (ind,) + call.args[4:]
    return mutate


def _bump_v_offset():
    def mutate(call: Call) -> None:
        ind = call.args[3].clone()
        B = (ind.numel() // 3) - 1
        ind[B + 1 + 1] += 1
        call.args = call.args[:3] + (ind,) + call.args[4:]
    return mutate


_LORA_ORACLES = {
    "step_a_q": ref_lora.step_a_q_oracle,
    "step_b_q": ref_lora.step_b_q_oracle,
    "step_a_v": ref_lora.step_a_v_oracle,
    "step_b_v": ref_lora.step_b_v_oracle,
    "q_side_fused": ref_lora.q_side_fused_oracle,
    "v_side_fused": ref_lora.v_side_fused_oracle,
}
_INPLACE = {"step_a_q": None, "step_b_q": 3, "step_a_v": None, "step_b_v": 3, "q_side_fused": 4, "v_side_fused": 4}
_FLOATS = (torch.float16, torch.bfloat16, torch.float32)

LORA_OPINFOS = tuple(
    OpInfo(
        name=op, family="lora", entry=LORA_ENTRY[op], oracle=_LORA_ORACLES[op], dtypes=_FLOATS,
        inplace_arg=_INPLACE[op],
        sample_inputs=_lora_samples(op, LORA_EDGE_CASES),
        exhaustive_inputs=_lora_samples(op, LORA_EXHAUSTIVE_CASES),
        error_inputs=_lora_errors(op),
        contracts=("lora.missing_max_len",),
    )
    for op in _LORA_ORACLES
)

VISION_OPINFO = OpInfo(
    name="vision", family="vision", entry="flashinfer_cudnn_attention", oracle=ref_vision.flashinfer_cudnn_oracle,
    dtypes=_FLOATS, inplace_arg=None,
    sample_inputs=_vision_samples(VISION_EDGE_CASES),
    exhaustive_inputs=_vision_samples(VISION_EXHAUSTIVE_CASES),
    error_inputs=_vision_errors,
    contracts=tuple(c.id for c in CONTRACTS.values() if c.api == "vision" and c.origin == "upstream"),
)

OP_DB = {info.name: info for info in (*LORA_OPINFOS, VISION_OPINFO)}


# family -> its ops in a stable order; op -> the entry-point name a target module exports
FAMILY_OPS = {family: tuple(i.name for i in OP_DB.values() if i.family == family) for family in ("lora", "vision")}


def entry_names() -> dict[str, str]:
    """op -> the entry-point name a target module must export (SGLang's names)."""
    return {info.name: info.entry for info in OP_DB.values()}


def op_info(name: str) -> OpInfo:
    try:
        return OP_DB[name]
    except KeyError:
        raise ValueError(f"op={name!r} is unknown; the only valid values are {sorted(OP_DB)}") from None


def replace_problem(sample: Sample, **changes) -> Sample:
    return Sample(dataclasses.replace(sample.problem, **changes), sample.name)
