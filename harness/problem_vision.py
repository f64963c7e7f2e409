"""The vision family's plain-data problem (Note [Problems] in :mod:`harness.problems`): :class:`VisionProblem`,
its call (:func:`materialize_vision`: SGLang's bucketing, on either metadata path), its plainer variants
(Note [Minimal examples] in :mod:`harness.simplify`), its words for a failing element (:func:`vision_locator`)
and the declines a case of it uses (:func:`vision_declined`); the ``vision`` record names them."""

from __future__ import annotations

import copy
import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import Iterator, Optional

import torch

from kernel_oracle.reference.signatures import signature
from kernel_oracle.reference.vision_metadata import (VisionAttentionMetadata, prepare_flashinfer_cudnn_metadata,
                                                     prepare_flashinfer_cudnn_vision_attention_metadata)

from kernel_oracle.harness.features import declined_in
from kernel_oracle.harness.problem_variants import length_class, replace_changed, shorter
from kernel_oracle.harness.problems import Call, _generator, _randn, dtype_of

__all__ = ["METADATA_SOURCES", "SINKS", "VISION_PATHS", "VisionProblem", "materialize_vision", "vision_declined",
           "vision_feature_variants", "vision_for_declines", "vision_locator", "vision_simplifications"]


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


def _vision_without_sequence(p, b: int):
    keep = [i for i in range(len(p.lengths)) if i != b]
    gaps = tuple(p.gaps[i] for i in keep) if p.gaps else ()
    return dataclasses.replace(p, lengths=tuple(p.lengths[i] for i in keep), gaps=gaps)


def vision_simplifications(p) -> Iterator:
    """A vision problem's :meth:`~harness.problem_vision.VisionProblem.simplifications`."""
    for b in reversed(range(len(p.lengths))):
        yield _vision_without_sequence(p, b)
    for b, n in enumerate(p.lengths):
        for m in shorter(n):
            yield dataclasses.replace(p, lengths=p.lengths[:b] + (m,) + p.lengths[b + 1:])
    yield replace_changed(p, H=1, H_kv=None)
    yield replace_changed(p, extra_tokens=0)
    yield replace_changed(p, four_d=False, batch=1)
    yield replace_changed(p, layout="contiguous")
    yield replace_changed(p, sequence_lengths_4d=False, max_seqlen_kind="int")
    yield replace_changed(p, full_call=False)
    yield replace_changed(p, logit_scale=1.0)
def vision_feature_variants(p) -> dict:
    """A vision problem's :meth:`~harness.problem_vision.VisionProblem.feature_variants`."""
    return {"offsets": replace_changed(p, v_shift=0, o_shift=0)}


def vision_locator(call):
    """``(locate, None)`` of a vision call: ``locate(index)`` names the token, head and sequence (as ``segment``) of
    an output index; a vision call has no routing."""
    from kernel_oracle.reference.vision_metadata import resolve_flashinfer_cudnn

    c = copy.deepcopy(call)
    try:
        plan = resolve_flashinfer_cudnn(*c.args[:4], c.kwargs.get("softmax_scale"), c.kwargs.get("forward_metadata"),
                                        strict=False, **{k: v for k, v in c.kwargs.items()
                                                         if k not in ("softmax_scale", "forward_metadata")})
    except Exception:  # noqa: BLE001 - malformed metadata: no plan to name
        plan = None
    four_d = call.args[0].dim() == 4

    def locate(index):
        if four_d:
            t = int(index[0]) * call.args[0].shape[1] + int(index[1])
            h = int(index[2])
        else:
            t, h = int(index[0]), int(index[1])
        where = {"token": t, "head": h, "segment": None, "slot": None}
        if plan is not None:
            for b in range(plan.num_sequences):
                o, n = int(plan.o_start[b]), int(plan.lengths[b])
                if n > 0 and o <= t < o + n:
                    where["segment"] = b
                    break
        return where
    return locate, None


def vision_declined(problem, mutation, declines) -> tuple[str, ...]:
    """The features of SGLang's vision call in ``declines`` the problem uses (:func:`harness.features.declined_in`)."""
    return tuple(declined_in(problem, declines))


def vision_for_declines(case_dict: dict, declines) -> dict:
    """A vision case (``Case.to_dict()``) as a target declining ``declines`` can be given it: a valid case whose
    metadata travels in ``forward_metadata`` goes as keywords (with our metadata) to a target declining
    ``forward_metadata``, the same call; any other case as it is."""
    problem = case_dict.get("problem") or {}
    if "forward_metadata" in declines and not case_dict.get("mutation") and problem.get("path", "metadata") != "kwargs":
        return {**case_dict, "problem": {**problem, "path": "kwargs", "metadata_source": "ours"}}
    return case_dict
