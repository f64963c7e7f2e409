"""Plain-data problem descriptions and their materialisation into tensors.

Note [Problems]
---------------
A *problem* is a small frozen dataclass of ints, tuples and strings: everything needed to rebuild
one call bit-for-bit (the tensors come from ``seed``).  Keeping cases as data (not tensors) is what
lets Hypothesis shrink them, lets a finding be saved as one JSON line, and lets a repro command
rebuild it anywhere.  :func:`materialize_lora` / :func:`materialize_vision` build the call's values
by parameter name; the op's :class:`~reference.signatures.Signature` orders them into a
:class:`Call` (positional args, kwargs, and the index of the argument updated in place, or ``None``
for ops returning a fresh output).  :func:`batch_info_of` and :meth:`Call.arg` find an argument by
its part or name, so nothing downstream counts positions.

Data is random normal scaled so that outputs stay O(1) (never zeros: zeros hide unwritten outputs).

Note [Where data is generated]
------------------------------
The tensors are drawn by a ``torch.Generator`` *on the device they are built for* (a GPU case never
generates on the host and copies).  On the CPU this is one host generator seeded with the problem's
seed, in a documented order (saved findings replay bit-identically); on a GPU it is the device's own
Philox generator, so the same seed gives other values there.  :func:`generation_scheme` names the
scheme of a device (records and saved cases carry it); a finding is replayed from its saved tensors
(``kernel-oracle repro``), or rebuilt from its seed on the kind of device it was found on.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import torch

from kernel_oracle.reference.batch_info import make_lora_batch_info
from kernel_oracle.reference.signatures import Signature, signature, signature_of_entry
from kernel_oracle.reference.vision_metadata import (VisionAttentionMetadata, prepare_flashinfer_cudnn_metadata,
                                                     prepare_flashinfer_cudnn_vision_attention_metadata)

from kernel_oracle.harness.family import family_names
from kernel_oracle.harness.problem_dict import problem_from_dict, problem_to_dict  # noqa: F401 (re-exported)
from kernel_oracle.harness.problem_variants import (length_class, lora_feature_variants, lora_simplifications,
                                                    vision_feature_variants, vision_simplifications)

__all__ = [
    "Call",
    "DTYPES",
    "METADATA_SOURCES",
    "SINKS",
    "VISION_PATHS",
    "LoRAProblem",
    "VisionProblem",
    "batch_info_of",
    "dtype_of",
    "generation_scheme",
    "materialize",
    "materialize_lora",
    "materialize_vision",
    "problem_from_dict",
    "problem_to_dict",
]

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
          "float64": torch.float64}


def dtype_of(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"dtype={name!r} is unknown; the only valid values are {sorted(DTYPES)}") from None


@dataclass(frozen=True)
class LoRAProblem:
    """One kv_b LoRA call as data.  Shapes: S tokens, H heads, qk/vd head dims, C kv_lora_rank,
    R buffer rank, L slots; ``seg_lens``/``weight_indices`` per segment, ``lora_ranks``/``scalings``
    per slot.  ``extra_rows``: unrouted token rows after the routed ones (must stay untouched)."""

    op: str
    seg_lens: tuple[int, ...]
    weight_indices: tuple[int, ...]
    lora_ranks: tuple[int, ...]
    scalings: tuple[float, ...]
    H: int = 2
    qk: int = 48
    vd: int = 40
    C: int = 64
    R: int = 16
    extra_rows: int = 0
    permute: bool = False
    cuda_graph_pad_to: Optional[int] = None
    with_max_len: bool = True
    with_seg_lens: bool = True
    dtype: str = "float32"
    base_dtype: Optional[str] = None  # None: same as dtype
    strided: bool = False  # activations / base_output as non-contiguous views
    seed: int = 0
    # added for the fuzzer (defaults keep every existing problem bit-identical):
    # step B only: fill columns >= r (the routed slot's rank) of the input with "huge" values or "nan";
    # a kernel that reads past the rank then produces garbage even where the scaling is 0
    poison_beyond_rank: Optional[str] = None
    # activations / base_output start one token row into a larger buffer (non-zero storage offset)
    offset_views: bool = False
    # CUDA-graph replay with stale capture-time host ints (bs, num_segments, max_len): see
    # reference.batch_info.make_lora_batch_info (None: the real counts, as before)
    stale_host_ints: Optional[tuple[int, int, int]] = None
    # eager batches whose redundant fields disagree within the contract (docs/semantics.md#fields-that-may-disagree;
    # reference.batch_info.make_lora_batch_info): (bs, num_segments), max_len above the longest segment,
    # seg_lens that disagree with seg_indptr (None, 0, None: as before)
    eager_counts: Optional[tuple[int, int]] = None
    max_len_slack: int = 0
    seg_lens_drift: Optional[str] = None
    # the forward is a prefill (LoRABatchInfo.is_prefill; the triton_v2 path plans decode and prefill apart)
    is_prefill: bool = False
    # CUDA graph: the padded tail holds an earlier, larger batch's segments over padding rows (make_lora_batch_info)
    graph_tail: bool = False
    family: str = field(default="lora", init=False)

    @property
    def tail_rows(self) -> range:
        """The padding rows the stale graph tail covers (``graph_tail``): after the live rows, one per
        padded segment; empty otherwise."""
        if not self.graph_tail or self.cuda_graph_pad_to is None:
            return range(0)
        start = sum(self.seg_lens)
        return range(start, start + self.cuda_graph_pad_to - len(self.seg_lens))

    @property
    def L(self) -> int:
        return len(self.lora_ranks)

    @property
    def S(self) -> int:
        return sum(self.seg_lens) + self.extra_rows

    # the hooks every family's problem has (docs/architecture.md, "Adding a kernel family")
    def materialize(self, device: str | torch.device = "cpu", metadata_helper=None) -> "Call":
        """Its call on ``device``: :func:`materialize_lora` (no metadata helper: LoRA targets take the batch info)."""
        return materialize_lora(self, device)

    def sizes(self) -> tuple[dict, int, dict]:
        """(size name -> its smallest value, how many elements its tensors hold, count name -> the count):
        the bounds of a problem read from a file (:func:`problem_from_dict`)."""
        sizes = {"seg_lens": min(self.seg_lens, default=0), "extra_rows": self.extra_rows,
                 **{k: getattr(self, k) for k in ("H", "qk", "vd", "C", "R")}}
        longest = max(self.seg_lens, default=0)
        counts = {"segments (len(seg_lens))": len(self.seg_lens), "cuda_graph_pad_to": self.cuda_graph_pad_to or 0,
                  "eager_counts": max(self.eager_counts or (0,)), "max_len_slack": self.max_len_slack,
                  "stale_host_ints max_len past the longest segment":
                      (self.stale_host_ints[-1] - longest) if self.stale_host_ints else 0}
        return sizes, (self.L * self.H * (self.qk + self.vd) * self.R + self.L * self.R * self.C
                       + self.S * self.H * (self.qk + self.vd + self.C + self.R)), counts

    def example_size(self) -> int:
        """Its size when the smallest example of a finding is picked: rows times heads times the widest head or
        rank dimension."""
        return self.S * self.H * max(self.qk, self.vd, self.C, self.R)

    def shape_class(self) -> str:
        """A coarse class for grouping results: ``empty``, ``decode`` (one-row segments), ``prefill``,
        ``prefill-large`` (a segment of 256 rows or more)."""
        lens = [n for n in self.seg_lens if n]
        if not lens:
            return "empty"
        if max(lens) <= 1:
            return "decode"
        return "prefill-large" if max(lens) >= 256 else "prefill"

    def simplifications(self):
        """Plainer variants, the most worth keeping first (Note [Minimal examples] in harness/simplify.py)."""
        return lora_simplifications(self)

    def feature_variants(self) -> dict:
        """feature of ``harness.simplify.FEATURES`` -> this problem without it (None where it has none)."""
        return lora_feature_variants(self)


@dataclass(frozen=True)
class VisionProblem:
    """One vision attention call as data.

    ``lengths``: real sequences (zero allowed); the batch is padded to SGLang's buckets.
    ``layout``: ``"contiguous"`` or ``"v_strided"`` (v is a view into an interleaved (T,3,H_kv,D)
    buffer).  ``v_shift``/``o_shift``: extra token offsets of v and o (distinct v/o offsets).
    ``path`` (:data:`VISION_PATHS`): where the metadata travels.  ``max_seqlen_kind``: ``"int"``,
    ``"cpu_tensor"`` or ``"device_tensor"``.  ``four_d``: pass (batch, T/batch, H, D) inputs.
    ``H_kv``: key/value heads (None: ``H``; GQA/MQA when fewer, ``H % H_kv == 0``).  ``gaps``: uncovered
    tokens after each sequence (its indptr gap exceeds its length: docs/semantics.md#fields-that-may-disagree).
    ``metadata_source``: ``"ours"`` (:func:`prepare_flashinfer_cudnn_metadata`) or ``"helper"`` (the
    release's metadata helper, SGLang's signature; our stand-in when the target offers none).
    ``window``: the ``window_size`` passed (None: not passed); ``sinks``: ``s_aux`` drawn ``"normal"`` or
    ``"large"`` (a sink that dominates the row) or none; ``full_call``: pass every keyword SGLang's
    ``VisionAttention.forward`` passes (``attention_mask=None``, ``output_ws=None``, ...).
    """

    lengths: tuple[int, ...]
    H: int = 2
    D: int = 16
    dtype: str = "float32"
    layout: str = "contiguous"
    v_shift: int = 0
    o_shift: int = 0
    extra_tokens: int = 0
    path: str = "metadata"
    max_seqlen_kind: str = "int"
    four_d: bool = False
    softmax_scale: Optional[float] = None
    logit_scale: float = 1.0  # multiplies q: large-magnitude logits
    seed: int = 0
    # added for the fuzzer: sequence_lengths as (B,1,1,1) instead of (B,)
    sequence_lengths_4d: bool = False
    # SGLang's whole call (defaults keep every earlier problem bit-identical)
    H_kv: Optional[int] = None
    batch: int = 1
    gaps: tuple[int, ...] = ()
    metadata_source: str = "ours"
    window: Optional[tuple[int, int]] = None
    sinks: Optional[str] = None
    full_call: bool = False
    op: str = field(default="vision", init=False)
    family: str = field(default="vision", init=False)

    @property
    def T(self) -> int:
        t = sum(self.lengths) + sum(self.gaps) + max(self.v_shift, self.o_shift) + self.extra_tokens
        b = self.batch if self.four_d else 1
        return -(-t // b) * b  # (b, s, H, D) inputs: whole rows of s tokens (the tail uncovered)

    @property
    def kv_heads(self) -> int:
        return self.H if self.H_kv is None else self.H_kv

    # the hooks every family's problem has (docs/architecture.md, "Adding a kernel family")
    def materialize(self, device: str | torch.device = "cpu", metadata_helper=None) -> "Call":
        """Its call on ``device``: :func:`materialize_vision` (``metadata_helper``: a target's own)."""
        return materialize_vision(self, device, metadata_helper)

    def sizes(self) -> tuple[dict, int, dict]:
        """(size name -> its smallest value, how many elements its tensors hold, count name -> the count):
        the bounds of a problem read from a file (:func:`problem_from_dict`)."""
        return ({"lengths": min(self.lengths, default=0), "gaps": min(self.gaps, default=0), "H": self.H, "D": self.D,
                 "v_shift": self.v_shift, "o_shift": self.o_shift, "extra_tokens": self.extra_tokens,
                 "batch": self.batch}, 6 * max(self.T, 0) * self.H * self.D,
                {"sequences (len(lengths))": len(self.lengths), "gaps (len(gaps))": len(self.gaps),
                 "batch": self.batch})

    def example_size(self) -> int:
        """Its size when the smallest example of a finding is picked: tokens times heads times head dimension."""
        return sum(self.lengths) * self.H * self.D

    def poison_unread(self, call) -> None:
        """NaN into the q/k/v tokens no sequence of a valid call reads, so a leak shows as NaN."""
        _poison_unread_vision(call)

    def shape_class(self) -> str:
        """A coarse class for grouping results: ``empty``, ``ragged``, ``long`` (a sequence of 1024 tokens or more)."""
        return length_class(self.lengths)

    def simplifications(self):
        """Plainer variants, the most worth keeping first (Note [Minimal examples] in harness/simplify.py)."""
        return vision_simplifications(self)

    def feature_variants(self) -> dict:
        """feature of ``harness.simplify.FEATURES`` -> this problem without it (None where it has none)."""
        return vision_feature_variants(self)


@dataclass
class Call:
    """Arguments in the entry point's order; ``inplace`` is the index of the updated argument.

    Build one with :meth:`bind` (from values by parameter name); the entry name identifies the
    op's :class:`~reference.signatures.Signature` (:attr:`signature`)."""

    entry: str
    args: tuple
    kwargs: dict
    inplace: Optional[int] = None

    @classmethod
    def bind(cls, sig: Signature, values: Mapping[str, object], kwargs: Optional[dict] = None) -> "Call":
        """The call of ``sig`` with positional ``values`` (name -> value) and keyword ``kwargs``."""
        unknown = [k for k in (kwargs or {}) if k not in sig.keywords]
        if unknown:
            raise ValueError(f"{sig.op} takes no keyword {unknown}; its keywords are {list(sig.keywords)}")
        return cls(sig.entry, sig.bind(values), dict(kwargs or {}), sig.inplace_index)

    @property
    def signature(self) -> Signature:
        return signature_of_entry(self.entry)

    def arg(self, name: str):
        """The positional argument ``name``, or the keyword ``name`` (None when not passed)."""
        sig = self.signature
        if name in sig.params:
            return self.args[sig.index(name)]
        if name in sig.keywords:
            return self.kwargs.get(name)
        raise ValueError(f"{sig.op} has no parameter {name!r}; it has {list(sig.params + sig.keywords)}")

    def set_arg(self, name: str, value) -> None:
        """Replace the positional argument ``name`` (the tuple is rebuilt), or set the keyword ``name``."""
        sig = self.signature
        if name in sig.params:
            i = sig.index(name)
            self.args = self.args[:i] + (value,) + self.args[i + 1:]
        elif name in sig.keywords:
            self.kwargs[name] = value
        else:
            raise ValueError(f"{sig.op} has no parameter {name!r}; it has {list(sig.params + sig.keywords)}")


def batch_info_of(call: Call):
    """The LoRA batch info of ``call`` (its signature's ``batch_info`` argument)."""
    sig = call.signature
    if sig.batch_info is None:
        raise ValueError(f"{sig.op} ({sig.family}) takes no LoRA batch info")
    return call.args[sig.index(sig.batch_info)]


# Note [Where data is generated]: the scheme of each device type (a new scheme gets a new name)
GENERATION_SCHEMES = {"cpu": "torch.Generator(cpu)/v1", "cuda": "torch.Generator(cuda)/v1"}


def generation_scheme(device: str | torch.device = "cpu") -> str:
    """The name of the scheme that draws a problem's tensors on ``device`` (Note [Where data is generated])."""
    kind = torch.device(device).type
    try:
        return GENERATION_SCHEMES[kind]
    except KeyError:
        raise ValueError(f"device={str(device)!r} is unsupported; the only valid device types are "
                         f"{sorted(GENERATION_SCHEMES)}") from None


def _generator(seed: int, device: str | torch.device) -> torch.Generator:
    """A generator on ``device`` seeded with ``seed`` (the CPU one for the CPU: bit-identical to before)."""
    generation_scheme(device)  # refuses a device type without a scheme
    dev = torch.device(device)
    gen = torch.Generator() if dev.type == "cpu" else torch.Generator(device=dev)
    return gen.manual_seed(seed)


def _randn(gen: torch.Generator, shape, dtype, device, scale=1.0) -> torch.Tensor:
    """Normal values drawn in fp32 on the generator's device, scaled, then cast to ``dtype``."""
    t = torch.randn(*shape, generator=gen, dtype=torch.float32, device=gen.device) * scale
    return t.to(dtype)


def _maybe_strided(t: torch.Tensor, strided: bool, offset: bool = False) -> torch.Tensor:
    """A non-contiguous view with the same values: every other element of a wider last dim;
    with ``offset``, the view starts one (NaN-filled) leading row into its buffer."""
    if not strided and not offset:
        return t
    lead = 1 if offset else 0
    width = 2 * t.shape[-1] if strided else t.shape[-1]
    wide = torch.empty(t.shape[0] + lead, *t.shape[1:-1], width, dtype=t.dtype, device=t.device)
    wide.fill_(float("nan"))
    view = wide[lead:, ..., ::2] if strided else wide[lead:]
    view.copy_(t)
    return view


_POISON_VALUES = {"huge": 3.0e4, "nan": float("nan")}


def _poison_beyond_rank(x: torch.Tensor, bi, num_slots: int, R: int, how: Optional[str]) -> None:
    """Fill ``x[row, :, r:]`` with a poison value for every routed row of a slot of rank r < R."""
    if how is None:
        return
    if how not in _POISON_VALUES:
        raise ValueError(f"poison_beyond_rank={how!r} is unknown; the only valid values are None, 'huge', 'nan'")
    from kernel_oracle.reference.lora_routing import route_lora_batch

    route = route_lora_batch(bi, num_rows=x.shape[0], num_slots=num_slots, max_rank=R, device=x.device,
                             strict=False)
    value = _POISON_VALUES[how]
    for g in route.groups():
        if 0 < g.rank < R:
            rows = route.rows[g.index].to(x.device)
            x[rows, :, g.rank:] = value


# the input of each LoRA step, by parameter name: (its last dim, whether it is scaled by that dim**-0.5,
# base_output's last dim: kv_lora_rank on the q side, v_head_dim on the v side)
_LORA_INPUTS = {
    "q_nope": ("qk", False, "C"),
    "q_lora_a": ("R", False, "C"),
    "attn_output": ("C", True, "vd"),
    "attn_lora_a": ("R", False, "vd"),
}


def materialize_lora(p: LoRAProblem, device: str | torch.device = "cpu") -> Call:
    """Build tensors and batch info for ``p``; weights are scaled so deltas are O(1).

    Draw order (fixed, so a seed always gives the same tensors on one kind of device: Note [Where
    data is generated]): permutation, B_buf, A_buf, the input, base_output."""
    sig = signature(p.op)
    if sig.family != "lora":
        raise ValueError(f"op={p.op!r} is not a LoRA step; LoRAProblem takes one of the LoRA ops")
    gen = _generator(p.seed, device)
    dt = dtype_of(p.dtype)
    bdt = dtype_of(p.base_dtype or p.dtype)
    S, H, qk, vd, C, R, L = p.S, p.H, p.qk, p.vd, p.C, p.R, p.L
    perm = torch.randperm(S, generator=gen, device=gen.device) if p.permute else None
    bi = make_lora_batch_info(p.seg_lens, p.weight_indices, p.lora_ranks, p.scalings,
                              permutation=perm, cuda_graph_pad_to=p.cuda_graph_pad_to,
                              with_max_len=p.with_max_len, with_seg_lens=p.with_seg_lens,
                              stale_host_ints=p.stale_host_ints, eager_counts=p.eager_counts,
                              max_len_slack=p.max_len_slack, seg_lens_drift=p.seg_lens_drift,
                              is_prefill=p.is_prefill, graph_tail=p.graph_tail, device=device)
    dims = {"qk": qk, "vd": vd, "C": C, "R": R}
    values: dict[str, Any] = {
        "B_buf": _randn(gen, (L, H * (qk + vd), R), dt, device, scale=qk ** -0.5),
        "A_buf": _randn(gen, (L, R, C), dt, device, scale=R ** -0.5),
        sig.batch_info: bi,
        "full_K_per_head": qk + vd,
        "qk_nope_head_dim": qk,
        "v_head_dim": vd,
    }
    name = sig.params[0]
    dim, fan_in_scaled, out_dim = _LORA_INPUTS[name]
    x = _randn(gen, (S, H, dims[dim]), dt, device, scale=dims[dim] ** -0.5 if fan_in_scaled else 1.0)
    if sig.inplace is not None:
        base = _randn(gen, (S, H, dims[out_dim]), bdt, device)
        values[sig.inplace] = _maybe_strided(base, p.strided, p.offset_views)
    if dim == "R":  # step B reads R columns: poison the ones at or beyond the routed slot's rank
        _poison_beyond_rank(x, bi, L, R, p.poison_beyond_rank)
    values[name] = _maybe_strided(x, p.strided, p.offset_views)
    return Call.bind(sig, {k: v for k, v in values.items() if k in sig.params})


# where the vision metadata travels (VisionProblem.path): forward_metadata with packed indptrs, the kwargs
# path, forward_metadata without packed indptrs (the kwargs then carry them), and forward_metadata with
# packed indptrs beside kwargs that disagree with it (stale values, or the Nones SGLang's VisionAttention
# passes when its caller gives none): upstream reads forward_metadata then (docs/semantics.md#fields-that-may-disagree)
VISION_PATHS = ("metadata", "kwargs", "metadata_without_packed", "metadata_and_kwargs", "metadata_and_none")
METADATA_SOURCES = ("ours", "helper")
SINKS = {"normal": 0.0, "large": 6.0}  # s_aux ~ N(offset, 1): "large" dominates every row's denominator


def _vision_operands(gen, p: VisionProblem, dt, device) -> tuple:
    """q (T,H,D), k (T,H_kv,D), v (T,H_kv,D) (v a view into an interleaved (T,3,H_kv,D) buffer for
    ``layout="v_strided"``), drawn in the order q, k, v (the order of every earlier problem)."""
    T, H, Hk, D = p.T, p.H, p.kv_heads, p.D
    if Hk < 1 or H % Hk:
        raise ValueError(f"H_kv={p.H_kv!r} must be a positive divisor of H={H} (query head h attends key/value "
                         f"head h // (H // H_kv)); pass one of {[d for d in range(1, H + 1) if H % d == 0]}")
    q = _randn(gen, (T, H, D), dt, device, scale=p.logit_scale)
    k = _randn(gen, (T, Hk, D), dt, device)
    if p.layout == "v_strided":
        v = _randn(gen, (T, 3, Hk, D), dt, device)[:, 2]
    elif p.layout == "contiguous":
        v = _randn(gen, (T, Hk, D), dt, device)
    else:
        raise ValueError(f"layout={p.layout!r} is unknown; the only valid values are ['contiguous', 'v_strided']")
    return q, k, v


def _vision_metadata(p: VisionProblem, q, v, device, helper):
    """The metadata of ``p``: our builder (with ``gaps`` between sequences), or the release's helper."""
    H, D = p.H, p.D
    if p.metadata_source == "helper":
        bad = {"layout": p.layout != "contiguous", "v_shift": p.v_shift, "o_shift": p.o_shift, "gaps": any(p.gaps),
               "H_kv": p.kv_heads != H}
        wrong = [name for name, b in bad.items() if b]
        if wrong:
            raise ValueError(f"metadata_source='helper' builds one element offset for q, v and o (SGLang's helper): "
                             f"it needs contiguous MHA inputs without shifts or gaps, but {wrong} differ; pass "
                             f"metadata_source='ours'")
        cu = torch.tensor([0, *itertools.accumulate(p.lengths)], dtype=torch.int32)
        return (helper or prepare_flashinfer_cudnn_vision_attention_metadata)(cu, device, elem_per_token=H * D)
    if p.metadata_source != "ours":
        raise ValueError(f"metadata_source={p.metadata_source!r} is unknown; the only valid values are "
                         f"{list(METADATA_SOURCES)}")
    if p.gaps and len(p.gaps) != len(p.lengths):
        raise ValueError(f"Expected one gap per sequence but got gaps={p.gaps} for lengths={p.lengths}")
    gaps = p.gaps or (0,) * len(p.lengths)
    starts = [0, *itertools.accumulate(n + g for n, g in zip(p.lengths, gaps))]
    md = prepare_flashinfer_cudnn_metadata(
        starts, device, elem_per_token=H * D, v_elem_per_token=v.stride(0), o_elem_per_token=H * D,
        v_elem_offset=p.v_shift * v.stride(0), o_elem_offset=p.o_shift * H * D,
        sequence_lengths_4d=p.sequence_lengths_4d,
    )
    if any(gaps):  # the real lengths, shorter than the gaps between the starts
        lens = torch.zeros(md.sequence_lengths.numel(), dtype=torch.int32)
        lens[:len(p.lengths)] = torch.tensor(p.lengths, dtype=torch.int32)
        md.sequence_lengths = lens.view(md.sequence_lengths.shape).to(device)
        md.seq_lens = lens[:len(p.lengths)].to(device)
        md.max_seqlen = max(p.lengths, default=0)
    return md


def _max_seqlen(p: VisionProblem, value: int, device):
    if p.max_seqlen_kind == "cpu_tensor":
        return torch.tensor(value)
    if p.max_seqlen_kind == "device_tensor":
        return torch.tensor([value], device=device)
    if p.max_seqlen_kind != "int":
        raise ValueError(f"max_seqlen_kind={p.max_seqlen_kind!r} is unknown; valid: int, cpu_tensor, device_tensor")
    return value


def _vision_keywords(gen, p: VisionProblem, md, device) -> tuple[object, dict]:
    """(the positional cu_seqlens, the keywords) of ``p``'s path, window, sinks and full call."""
    max_seqlen = _max_seqlen(p, md.flashinfer_max_seqlen, device)
    kwargs: dict = {"softmax_scale": p.softmax_scale}
    if p.path in ("metadata", "metadata_and_kwargs", "metadata_and_none"):
        md.flashinfer_max_seqlen = max_seqlen
        kwargs["forward_metadata"] = md
        cu = md.cu_seqlens
        if p.path == "metadata_and_kwargs":  # stale copies, which upstream ignores here
            lens = md.sequence_lengths.reshape(-1)
            kwargs["sequence_lengths"] = (lens.roll(1) + 1).to(lens.dtype)
            kwargs["max_seqlen"] = 1
        elif p.path == "metadata_and_none":
            kwargs.update(sequence_lengths=None, max_seqlen=None)
    elif p.path in ("kwargs", "metadata_without_packed"):
        kwargs.update(sequence_lengths=md.sequence_lengths, max_seqlen=max_seqlen)
        cu = md.packed_indptrs  # the kwargs path passes the packed indptrs as cu_seqlens
        if p.path == "metadata_without_packed":
            kwargs["forward_metadata"] = VisionAttentionMetadata(cu_seqlens=md.cu_seqlens, seq_lens=md.seq_lens,
                                                                 max_seqlen=md.max_seqlen)
    else:
        raise ValueError(f"path={p.path!r} is unknown; the only valid values are {list(VISION_PATHS)}")
    if p.window is not None:
        kwargs["window_size"] = tuple(p.window)
    if p.sinks is not None:
        if p.sinks not in SINKS:
            raise ValueError(f"sinks={p.sinks!r} is unknown; the only valid values are None, {sorted(SINKS)}")
        kwargs["s_aux"] = _randn(gen, (p.H,), torch.float32, device, scale=1.0).add(SINKS[p.sinks]).to(torch.bfloat16)
    if p.full_call:  # everything VisionAttention.forward hands its backend
        kwargs = {"forward_metadata": None, "window_size": (-1, -1), "s_aux": None, "attention_mask": None,
                  "output_ws": None, "sequence_lengths": None, "max_seqlen": None, **kwargs}
    return cu, kwargs


def materialize_vision(p: VisionProblem, device: str | torch.device = "cpu", metadata_helper=None) -> Call:
    """Build q, k, v and the metadata of ``p`` (SGLang's bucketing) on ``device``.

    ``metadata_helper``: the target's own metadata helper for ``metadata_source="helper"`` (SGLang's
    ``prepare_flashinfer_cudnn_vision_attention_metadata(cu_seqlens, device, *, elem_per_token)``); None:
    our stand-in with that signature.  Draw order: q, k, v, then ``s_aux``."""
    gen = _generator(p.seed, device)
    q, k, v = _vision_operands(gen, p, dtype_of(p.dtype), device)
    md = _vision_metadata(p, q, v, device, metadata_helper)
    cu, kwargs = _vision_keywords(gen, p, md, device)
    batch = p.batch if p.four_d else 1
    if p.four_d:
        q, k, v = (x.unflatten(0, (batch, -1)) for x in (q, k, v))
    sig = signature(p.op)
    values = {"q": q, "k": k, "v": v, "bsz": batch, "seq_len": p.T // batch, sig.indptrs: cu}
    return Call.bind(sig, values, kwargs)


def materialize(problem, device: str | torch.device = "cpu", metadata_helper=None) -> Call:
    """The call of ``problem`` on ``device``; ``metadata_helper``: a vision target's own metadata helper
    (:func:`materialize_vision`)."""
    if not callable(getattr(problem, "materialize", None)):
        raise TypeError(f"Expected a problem of a registered family ({', '.join(family_names())}) but got "
                        f"{type(problem).__name__}")
    return problem.materialize(device, metadata_helper)


def _poison_unread_vision(call) -> None:
    """NaN into q/k/v tokens that no sequence reads (valid calls only): a leak shows up as NaN."""
    from kernel_oracle.reference.vision_metadata import resolve_flashinfer_cudnn

    c = copy.deepcopy(call)
    try:
        plan = resolve_flashinfer_cudnn(*c.args[:4], c.kwargs.get("softmax_scale"), c.kwargs.get("forward_metadata"),
                                        strict=True, **{k: v for k, v in c.kwargs.items()
                                                        if k not in ("softmax_scale", "forward_metadata")})
    except Exception:
        return
    q, k, v = call.args[:3]
    q3, k3, v3 = (x.flatten(0, 1) if x.dim() == 4 else x for x in (q, k, v))
    read_qk = torch.zeros(q3.shape[0], dtype=torch.bool)
    read_v = torch.zeros(v3.shape[0], dtype=torch.bool)
    for b in range(plan.num_sequences):
        n = int(plan.lengths[b])
        if n > 0:
            read_qk[int(plan.qk_start[b]):int(plan.qk_start[b]) + n] = True
            read_v[int(plan.v_start[b]):int(plan.v_start[b]) + n] = True
    with torch.no_grad():
        q3[~read_qk.to(q3.device)] = float("nan")
        k3[~read_qk.to(k3.device)] = float("nan")
        v3[~read_v.to(v3.device)] = float("nan")
