"""The vision attention op's row of the op database (Note [OpInfos] in :mod:`harness.opinfo`), which the
``vision`` record names (its ``opinfos``): hand-picked samples, realistic shapes, every error input, and the
selfcheck's random problems."""

from __future__ import annotations

import random
from typing import Callable, Iterator

import torch

from kernel_oracle.reference._helpers import describe_layout, describe_tensor
from kernel_oracle.reference.contracts import CONTRACTS
from kernel_oracle.reference.signatures import signature

from kernel_oracle.harness.mutations import Mutation
from kernel_oracle.harness.opinfo_rows import DTYPE_NAME as _DTYPE_NAME, FLOATS, ErrorInput, OpInfo, Sample
from kernel_oracle.harness.problem_vision import VisionProblem

__all__ = ["VISION_EDGE_CASES", "VISION_EXHAUSTIVE_CASES", "VISION_OPINFO", "VISION_OPINFOS", "random_vision_problem"]


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


VISION_OPINFO = OpInfo(
    signature=signature("vision"), dtypes=FLOATS,
    sample_inputs=_vision_samples(VISION_EDGE_CASES),
    exhaustive_inputs=_vision_samples(VISION_EXHAUSTIVE_CASES),
    error_inputs=_vision_errors,
    contracts=tuple(c.id for c in CONTRACTS.values() if c.api == "vision" and c.origin == "upstream"),
    random_inputs=random_vision_problem,
)
VISION_OPINFOS = (VISION_OPINFO,)
