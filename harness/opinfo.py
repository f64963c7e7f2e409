"""One entry of data per operator (PyTorch OpInfo style).

Note [OpInfos]
--------------
Every operator the suite checks is an :class:`OpInfo`: its :class:`~reference.signatures.Signature`
(name, family, SGLang's entry-point name, argument names in order, the in-place argument, where
the batch info or the metadata sits), the reference oracle and drop-in entry point (looked up by
the signature's names), the dtypes, and two generators with one signature,
``(device, dtype) -> Iterator[Sample]``:

* ``sample_inputs``: small, fast, hand-picked edge cases (commented literal tables below) that
  every run uses, CPU interpreter included;
* ``exhaustive_inputs``: realistic shapes, for the GPU or when time allows.

``error_inputs(device)`` yields :class:`ErrorInput` rows: a valid sample, the
:class:`~harness.mutations.Mutation` (or mutations, applied in order) that break it, and the
contract id and fields of the exact error it must raise.  Error inputs are the one way the suite
states an error contract: ``oracle_tests/reference/test_contracts.py``'s ``test_error_inputs`` runs every
row against every selected target that implements strict validation (the reference and our Triton
kernels by default), and the upstream rows against the other targets too; ``kernel-oracle
selfcheck`` runs them against the reference.

Everything else derives from this database: the targets' entry points (:func:`entry_names`,
:data:`FAMILY_OPS`), the campaigns' op names (:data:`FAMILY_OF`; both live views of the families
registry, :mod:`harness.family`), the strategies' LoRA ops and the
selfcheck.  Adding an op is one row of :data:`reference.signatures.SIGNATURES`, its oracle and
kernel, and its entry here.

An OpInfo checks itself on construction and says why when it is inconsistent.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

import torch

from kernel_oracle.reference import lora as ref_lora
from kernel_oracle.reference._helpers import describe_layout, describe_tensor
from kernel_oracle.reference.contracts import CONTRACTS, contract
from kernel_oracle.reference.signatures import Signature, signature

from kernel_oracle.harness.family import FAMILY_OF, FAMILY_OPS, get_family
from kernel_oracle.harness.mutations import Mutation
from kernel_oracle.harness.opinfo_csgmv import csgmv_errors, csgmv_samples
from kernel_oracle.harness.opinfo_rows import ErrorInput, Sample
from kernel_oracle.harness.problems import LoRAProblem, VisionProblem, batch_info_of

__all__ = ["CSGMV_OPINFOS", "ErrorInput", "FAMILY_OF", "FAMILY_OPS", "OpInfo", "Sample", "OP_DB", "LORA_OPINFOS",
           "VISION_OPINFO", "entry_names", "op_info"]


@dataclass(frozen=True)
class OpInfo:
    """One op: its signature, its oracle and reference entry point, dtypes, inputs and error inputs."""

    signature: Signature
    dtypes: tuple[torch.dtype, ...]
    sample_inputs: Callable[[str, torch.dtype], Iterator[Sample]]
    exhaustive_inputs: Callable[[str, torch.dtype], Iterator[Sample]]
    error_inputs: Callable[[str], Iterator[ErrorInput]]
    contracts: tuple[str, ...] = field(default=())
    # a random well-formed problem for the selfcheck, ``f(op, rng, dtype name)`` (None: the family's record
    # names its own selfcheck rows)
    random_inputs: Optional[Callable[[str, random.Random, str], object]] = None

    def __post_init__(self) -> None:
        for what in ("oracle", "reference"):
            if not callable(getattr(self, what)):
                raise ValueError(f"OpInfo {self.name!r}: the reference module has no callable {what} "
                                 f"{getattr(self.signature, 'oracle' if what == 'oracle' else 'entry')!r}")
        unknown = [c for c in self.contracts if c not in CONTRACTS]
        if unknown:
            raise ValueError(f"OpInfo {self.name!r} names contracts {unknown} that the contract table lacks")
        wrong = [c for c in self.contracts if CONTRACTS[c].api != self.family]
        if wrong:
            raise ValueError(f"OpInfo {self.name!r} ({self.family}) names contracts of another family: {wrong}")
        if not self.dtypes:
            raise ValueError(f"OpInfo {self.name!r} lists no dtypes")

    @property
    def name(self) -> str:
        return self.signature.op

    @property
    def family(self) -> str:
        return self.signature.family

    @property
    def entry(self) -> str:
        """The entry-point name a target module exports (SGLang's name)."""
        return self.signature.entry

    @property
    def inplace_arg(self) -> Optional[int]:
        """Index of the argument updated in place and returned; None for a fresh output."""
        return self.signature.inplace_index

    @property
    def oracle(self) -> Callable:
        return getattr(get_family(self.family).resolve("reference"), self.signature.oracle, None)

    @property
    def reference(self) -> Callable:
        """The reference's drop-in entry point (SGLang's signature)."""
        return getattr(get_family(self.family).resolve("reference"), self.signature.entry, None)


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
    # GQA: 4 query heads on 2 key/value heads (query heads 0,1 -> kv head 0; 2,3 -> kv head 1)
    ("gqa_4_on_2", (6, 0, 11), {"H": 4, "H_kv": 2}),
    # MQA: 4 query heads on one key/value head, v a strided view
    ("mqa_v_strided", (7, 5), {"H": 4, "H_kv": 1, "layout": "v_strided"}),
    # (b, s, H, D) inputs of 2 rows: T = 12 tokens as (2, 6, H, D)
    ("four_d_two_rows", (5, 6), {"four_d": True, "batch": 2}),
    # uncovered tokens between sequences: indptr gaps of 2, 0 and 3 tokens beyond the lengths
    ("gaps_between_sequences", (4, 7, 3), {"gaps": (2, 0, 3)}),
    # forward_metadata with packed indptrs beside stale kwargs (upstream reads forward_metadata)
    ("metadata_beside_stale_kwargs", (6, 5), {"path": "metadata_and_kwargs"}),
    # forward_metadata without packed indptrs: the kwargs carry them
    ("metadata_without_packed", (5, 8), {"path": "metadata_without_packed"}),
    # the release's metadata helper (our stand-in), with every keyword VisionAttention.forward passes
    ("helper_metadata_full_call", (8, 3), {"metadata_source": "helper", "full_call": True,
                                           "path": "metadata_and_none"}),
    # a local window: query i attends keys i-3 .. i+2 of its sequence
    ("window_3_2", (13, 6), {"window": (3, 2)}),
    # attention sinks (one logit per head) on a one-sided window (keys i-4 .. i)
    ("sinks_window_4_0", (10, 17), {"sinks": "normal", "window": (4, 0), "H": 2}),
    # a sink that dominates every row, GQA
    ("large_sinks_gqa", (9,), {"sinks": "large", "H": 4, "H_kv": 2}),
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


def _vision_error_sample(**kw) -> Sample:
    """The sample the vision error rows break: sequences (3, 5) on the kwargs path, padded to a batch of 8
    (27 packed indptrs); q/k/v (8, 2, 16): 32 elements per token."""
    fields = dict(lengths=(3, 5), seed=9, path="kwargs")
    fields.update(kw)
    return Sample(VisionProblem(**fields), "err")


def _vision_mutation(kind: str, index: int = 0, amount: int = 1) -> Mutation:
    return Mutation("vision", kind, index, amount)


def _vision_errors(device: str) -> Iterator[ErrorInput]:
    """Every vision error row: the metadata's (upstream's, then strict), then the data's and the extra
    arguments'."""
    yield from _vision_metadata_errors()
    yield from _vision_data_errors()


def _vision_metadata_errors() -> Iterator[ErrorInput]:
    """The rows that break the metadata (upstream's contract in SGLang's order, then our strict checks)."""
    base, m = _vision_error_sample, _vision_mutation
    # upstream, in SGLang's order (a row that breaks two things: the earlier check must win)
    yield ErrorInput(base(), m("drop_sequence_lengths"), "vision.missing_sequence_lengths")
    yield ErrorInput(base(), m("drop_sequence_lengths_and_max_seqlen"), "vision.missing_sequence_lengths")
    # forward_metadata without packed_indptrs falls back to the kwargs, which lack sequence_lengths
    yield ErrorInput(base(path="metadata"), m("drop_sequence_lengths"), "vision.missing_sequence_lengths")
    yield ErrorInput(base(), m("drop_max_seqlen"), "vision.missing_max_seqlen")
    yield ErrorInput(base(), (m("indptrs_as_list"), m("drop_max_seqlen")), "vision.missing_max_seqlen")
    yield ErrorInput(base(), m("indptrs_as_list"), "vision.indptrs_not_tensor")
    yield ErrorInput(base(), (m("indptrs_none"), m("sequence_lengths_as_list")), "vision.indptrs_not_tensor")
    yield ErrorInput(base(), m("sequence_lengths_as_list"), "vision.sequence_lengths_not_tensor")
    yield ErrorInput(base(), m("indptr_numel_mismatch"), "vision.indptr_numel_mismatch", dict(got=26, expected=27))
    # sequence 1 (5 tokens) starts at token 4: one past q's 8 tokens
    yield ErrorInput(base(), m("qk_offset_out_of_bounds", 1), "vision.offset_out_of_bounds")
    # strict: max_seqlen 4, smaller than the longest sequence (5)
    yield ErrorInput(base(), m("max_seqlen_too_small"), "vision.strict.max_seqlen_too_small",
                     dict(value=4, index=1, longest=5))
    # strict: negative length in the first padding entry (upstream accepts it silently)
    yield ErrorInput(base(), m("negative_length"), "vision.strict.negative_length", dict(index=2, value=-1))
    # strict: v offset of sequence 1 one element past token 3: not a multiple of the token stride
    yield ErrorInput(base(), m("misaligned_offset", 1), "vision.strict.misaligned_offset",
                     dict(field="v_indptr", index=1, value=3 * 32 + 1, tensor="v", stride=32))
    # strict: float packed indptrs (upstream converts them silently)
    yield ErrorInput(base(), m("metadata_dtype"), "vision.strict.metadata_tensor",
                     lambda c: dict(field="packed_indptrs", expected="int32 or int64",
                                    got=describe_tensor(c.arg("cu_seqlens")), fix="pass packed_indptrs.to(torch.int32)"))
    # strict: the output of sequence 1 (5 tokens) moved from token 3 to token 3 + 9 = 12, past the 8 output tokens
    yield ErrorInput(base(), m("o_offset_past_end", 1), "vision.strict.offset_range",
                     dict(field="o_indptr", index=1, value=12 * 32, length=5, start=12, tokens=8, tensor="the output"))
    # strict: the output of sequence 1 (tokens 0..4) moved onto sequence 0's (tokens 0..2)
    yield ErrorInput(base(), m("output_overlap"), "vision.strict.output_overlap",
                     dict(index=1, start=0, end=4, other=0, other_start=0, other_end=2))


def _vision_data_errors() -> Iterator[ErrorInput]:
    """The rows that break the data tensors and the extra arguments (window, sinks, mask)."""
    base, m = _vision_error_sample, _vision_mutation
    # strict: k with another head dim than q
    yield ErrorInput(base(), m("data_last_dim", 1), "vision.strict.shape_mismatch",
                     dict(field="k", got=(8, 2, 17), expected=(8, 2, 16),
                          why="k is (tokens, key/value heads, head_dim) with q's tokens and head_dim"),
                     runs_without_strict=False)
    # strict: k with 3 heads, which do not divide q's 2 (no head mapping exists: upstream fails its own way)
    yield ErrorInput(base(), m("data_heads", 1), "vision.strict.kv_heads", dict(got=3, heads=2),
                     runs_without_strict=False)
    # v with 3 heads beside k's 2
    yield ErrorInput(base(), m("data_heads", 2), "vision.strict.kv_heads_match", dict(got=3, kv=2),
                     runs_without_strict=False)
    # the extra arguments, which upstream ignores (Note [Window and sinks] in reference.vision_arguments)
    yield ErrorInput(base(), m("window_not_pair"), "vision.strict.window_size",
                     dict(got="(3,)", why="it is not a pair"))
    yield ErrorInput(base(), m("window_not_ints"), "vision.strict.window_size",
                     dict(got="(1.5, 2)", why="both entries must be Python ints"))
    # s_aux with 3 entries for q's 2 heads
    yield ErrorInput(base(), m("sinks_wrong_heads"), "vision.strict.metadata_tensor",
                     lambda c: dict(field="s_aux", got=describe_tensor(c.kwargs["s_aux"]),
                                    expected="a floating-point tensor of shape (2,) on cpu (one sink logit per query "
                                             "head)".replace("cpu", str(c.args[0].device)),
                                    fix="pass the layer's sinks for this rank's query heads, e.g. sinks[h0:h0 + H]"))
    yield ErrorInput(base(), m("attention_mask_given"), "vision.strict.unsupported_argument",
                     lambda c: dict(field="attention_mask", got=describe_tensor(c.kwargs["attention_mask"]),
                                    why="the flashinfer_cudnn contract has no mask (the sequences are the mask; only "
                                        "SGLang's SDPA backends read one); pass attention_mask=None"))
    # strict: integer q (and k, v): attention over integers is not defined
    yield ErrorInput(base(), (m("data_int", 0), m("data_int", 1), m("data_int", 2)), "vision.strict.metadata_tensor",
                     lambda c: dict(field="q",
                                    expected="a floating-point tensor (float16, bfloat16, float32 or float64)",
                                    got=describe_tensor(c.arg("q")),
                                    fix="pass q, k and v as floating-point tensors, e.g. q.to(torch.float16)"))
    # strict: q's 8 tokens all alias token 0 (stride 0)
    yield ErrorInput(base(), m("data_stride0", 0), "vision.strict.operand_layout",
                     lambda c: dict(field="q", got=describe_layout(c.arg("q")),
                                    why="dimension 0 (size 8) has stride 0, so its 8 entries share memory"))
    # strict: k transposed (a head-major buffer): token stride 16, but a token spans 1 + 128 + 15 elements
    yield ErrorInput(base(), m("data_transposed", 1), "vision.strict.operand_layout",
                     lambda c: dict(field="k", got=describe_layout(c.arg("k")),
                                    why="one token spans 144 elements but the token stride is 16, so tokens are not "
                                        "the outermost dimension (a transposed view?) and element offsets of tokens "
                                        "are meaningless"))



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


def random_vision_problem(op: str, rng: random.Random, dtype: str) -> VisionProblem:
    """A random well-formed vision problem of the selfcheck (Note [Selfcheck] in kernel_oracle/jobs/selfcheck.py)."""
    return VisionProblem(
        lengths=tuple(rng.choice((0, 1, 3, 7, 16, 24)) for _ in range(rng.randint(1, 4))),
        H=rng.randint(1, 3), D=rng.choice((8, 16, 24, 32)), dtype=dtype,
        layout=rng.choice(("contiguous", "v_strided")), v_shift=rng.randint(0, 2), o_shift=rng.randint(0, 2),
        extra_tokens=rng.randint(0, 3), path=rng.choice(("metadata", "kwargs")),
        max_seqlen_kind=rng.choice(("int", "cpu_tensor", "device_tensor")), four_d=rng.random() < 0.3,
        softmax_scale=(None if rng.random() < 0.6 else round(rng.uniform(0.05, 0.5), 3)),
        seed=rng.randrange(2**31),
    )


_FLOATS = (torch.float16, torch.bfloat16, torch.float32)

LORA_OPINFOS = tuple(
    OpInfo(
        signature=signature(op), dtypes=_FLOATS,
        sample_inputs=_lora_samples(op, LORA_EDGE_CASES),
        exhaustive_inputs=_lora_samples(op, LORA_EXHAUSTIVE_CASES),
        error_inputs=_lora_errors(op),
        contracts=("lora.missing_max_len",),
        random_inputs=random_lora_problem,
    )
    for op in ref_lora.LORA_OPS
)

VISION_OPINFO = OpInfo(
    signature=signature("vision"), dtypes=_FLOATS,
    sample_inputs=_vision_samples(VISION_EDGE_CASES),
    exhaustive_inputs=_vision_samples(VISION_EXHAUSTIVE_CASES),
    error_inputs=_vision_errors,
    contracts=tuple(c.id for c in CONTRACTS.values() if c.api == "vision" and c.origin == "upstream"),
    random_inputs=random_vision_problem,
)


# csgmv: hand-picked samples and one error input per contract row (harness/opinfo_csgmv.py); the fuzzer draws
# its problems through its strategy (kernel_oracle.fuzz.strategies_csgmv)
CSGMV_OPINFOS = tuple(
    OpInfo(signature=signature(op), dtypes=_FLOATS, sample_inputs=csgmv_samples(op),
           exhaustive_inputs=csgmv_samples(op), error_inputs=csgmv_errors(op),
           contracts=tuple(c.id for c in CONTRACTS.values() if c.api == "csgmv" and c.origin == "upstream"))
    for op in ("csgmv_shrink", "csgmv_expand")
)

OP_DB = {info.name: info for info in (*LORA_OPINFOS, VISION_OPINFO, *CSGMV_OPINFOS)}


def _check_families() -> None:
    """Every op of the database belongs to a registered family that lists it, in the database's order."""
    for fam in {info.family for info in OP_DB.values()}:
        ours = tuple(i.name for i in OP_DB.values() if i.family == fam)
        if fam not in FAMILY_OPS or FAMILY_OPS[fam] != ours:
            raise ValueError(f"the op database's {fam!r} ops {list(ours)} differ from the registered family's "
                             f"{list(FAMILY_OPS.get(fam, ()))}; register_family({fam!r}) with ops={ours!r}")


_check_families()


def entry_names() -> dict[str, str]:
    """op -> the entry-point name a target module must export (SGLang's names)."""
    return {info.name: info.entry for info in OP_DB.values()}


def op_info(name: str) -> OpInfo:
    try:
        return OP_DB[name]
    except KeyError:
        raise ValueError(f"op={name!r} is unknown; the only valid values are {sorted(OP_DB)}") from None
