"""The targets registry: anything with SGLang's signatures can be fuzzed.

Note [Targets]
--------------
A :class:`Target` maps op names (``step_a_q`` ... ``v_side_fused``, ``vision``) to callables with
the signatures of :mod:`reference.lora` / :func:`reference.vision.flashinfer_cudnn_attention`, and
declares what the comparison needs to be fair:

* ``precision``: ``"ieee"`` or ``"tf32"`` -- how it runs fp32 matmuls, so that the tolerance
  baseline is the faithful oracle in that precision (``faithful="tf32"`` for TF32 targets);
* ``strict``: whether it implements our strict validation (third-party code does not: malformed
  metadata cases are then validation gaps by construction; ``--upstream-contracts-only`` skips them);
* ``excluded_dtypes``: dtype -> reason; a third-party Triton target run under the interpreter is not
  tested in bfloat16, because the interpreter computes bf16 arithmetic on raw bit patterns
  (SPEC.md "Where it runs") and we cannot neutralise that inside code we do not own;
* ``poison``: an optional ``family -> context manager`` that makes the target allocate its fresh
  outputs full of NaN (our vision kernel's ``poisoned_output`` hook).

Built-in specs: ``reference``, ``triton`` (ours: :mod:`kernels.lora`, :mod:`kernels.vision`),
``sglang`` (SGLang's installed modules), ``torch-varlen`` (vision peer), ``flashinfer-cudnn`` (the
real engine behind SGLang's ``flashinfer_cudnn`` backend: :mod:`fuzz.flashinfer_cudnn`), ``mutant:NAME``
(:mod:`fuzz.mutants`), and ``package.module[:attr]`` for anything else.  A target with only some
entry points is tested on those; an unavailable one carries the reason, and callers report it.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import pkgutil
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from .problems import LORA_ENTRY

__all__ = ["BUILTIN_TARGETS", "Target", "TargetError", "interpreting", "resolve_target", "FAMILY_OPS"]

FAMILY_OPS = {"lora": tuple(LORA_ENTRY), "vision": ("vision",)}
BUILTIN_TARGETS = ("reference", "triton", "sglang", "torch-varlen", "flashinfer-cudnn")
_BF16_REASON = ("third-party Triton code under the Triton interpreter: the interpreter computes bf16 "
                "arithmetic on raw bit patterns (SPEC.md), which is not the target's fault")


class TargetError(ValueError):
    """An unknown or malformed target spec."""


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "yes", "on")


@dataclass
class Target:
    name: str
    entries: dict = field(default_factory=dict)  # op -> callable
    available: bool = True
    reason: str = ""
    precision: str = "ieee"
    strict: bool = True
    excluded_dtypes: dict = field(default_factory=dict)  # dtype name -> reason
    poison: Optional[Callable] = None  # family -> context manager
    notes: dict = field(default_factory=dict)  # op -> why it is missing
    status: Optional[Callable[[], str]] = None  # a live ``reason`` (e.g. an engine's fallback note)

    def __post_init__(self) -> None:
        if self.precision not in ("ieee", "tf32"):
            raise TargetError(f"target {self.name!r}: precision={self.precision!r}; the only valid values are "
                              "'ieee', 'tf32'")

    def has(self, op: str) -> bool:
        return op in self.entries

    def entry(self, op: str) -> Callable:
        try:
            return self.entries[op]
        except KeyError:
            raise TargetError(f"target {self.name!r} has no entry point for op {op!r}; it has "
                              f"{sorted(self.entries)}") from None

    def ops(self, family: str) -> tuple[str, ...]:
        return tuple(op for op in FAMILY_OPS[family] if op in self.entries)

    def dtypes(self, candidates) -> tuple[str, ...]:
        return tuple(d for d in candidates if d not in self.excluded_dtypes)

    def to_record(self) -> dict:
        reason = self.status() if self.status is not None else self.reason
        return {"name": self.name, "available": self.available, "reason": reason,
                "entry_points": sorted(self.entries), "precision": self.precision, "strict": self.strict,
                "excluded_dtypes": dict(self.excluded_dtypes), "missing": dict(self.notes)}


def _unavailable(name: str, reason: str, **kw) -> Target:
    return Target(name, {}, available=False, reason=reason, **kw)


def _entries_from(obj, ops=None, notes=None) -> dict:
    out = {}
    for op in ops or (*LORA_ENTRY, "vision"):
        attr = LORA_ENTRY.get(op, "flashinfer_cudnn_attention")
        fn = getattr(obj, attr, None)
        if callable(fn):
            out[op] = fn
        elif notes is not None:
            notes[op] = f"{getattr(obj, '__name__', obj)!s} has no {attr}"
    return out


def _import(name: str):
    try:
        return importlib.import_module(name), None
    except Exception as exc:  # noqa: BLE001 - the reason is reported, not swallowed
        return None, f"import {name} failed: {type(exc).__name__}: {exc}"


def _reference(device) -> Target:
    from reference import lora, vision

    entries = _entries_from(lora, LORA_ENTRY)
    entries["vision"] = vision.flashinfer_cudnn_attention
    return Target("reference", entries, precision="ieee", strict=True)


def _kernels_lora_precision() -> str:
    return "ieee"  # kernels.lora runs fp32 tl.dot with input_precision="ieee" (its PRECISION table)


def _triton(device, package: str = "kernels", name: str = "triton") -> Target:
    notes: dict = {}
    entries: dict = {}
    poison = None
    lora, why_l = _import(f"{package}.lora")
    if lora is not None:
        entries.update(_entries_from(lora, LORA_ENTRY, notes))
    else:
        notes.update({op: why_l for op in LORA_ENTRY})
    vision, why_v = _import(f"{package}.vision")
    if vision is not None:
        entries.update(_entries_from(vision, ("vision",), notes))
        hook = getattr(vision, "poisoned_output", None)
        if hook is not None:
            poison = (lambda family: hook() if family == "vision" else contextlib.nullcontext())
    else:
        notes["vision"] = why_v
    if not entries:
        return _unavailable(name, "; ".join(sorted(set(notes.values()))), notes=notes)
    return Target(name, entries, precision="ieee", strict=True, poison=poison, notes=notes)


# SGLang's kv_b LoRA Triton ops: the module name has moved between versions; the first candidate
# that imports and exports step_a_q_fwd wins, else every submodule of the package is searched
_SGLANG_LORA_CANDIDATES = ("sglang.srt.lora.triton_ops.kv_b_lora", "sglang.srt.lora.triton_ops.mla_kv_b_lora",
                           "sglang.srt.lora.triton_ops.kv_b_proj_lora", "sglang.srt.lora.triton_ops")
_SGLANG_VISION = "sglang.srt.layers.attention.vision"


def _find_sglang_lora():
    errors = []
    for name in _SGLANG_LORA_CANDIDATES:
        mod, why = _import(name)
        if mod is not None and hasattr(mod, "step_a_q_fwd"):
            return mod, None
        errors.append(why or f"{name} has no step_a_q_fwd")
    pkg, why = _import("sglang.srt.lora.triton_ops")
    if pkg is not None and hasattr(pkg, "__path__"):
        for info in pkgutil.iter_modules(pkg.__path__):
            mod, _ = _import(f"sglang.srt.lora.triton_ops.{info.name}")
            if mod is not None and hasattr(mod, "step_a_q_fwd"):
                return mod, None
    return None, "; ".join(errors[-2:])


def _sglang_vision_fn(device):
    mod, why = _import(_SGLANG_VISION)
    if mod is None:
        return None, why
    cls = getattr(mod, "VisionFlashInferAttention", None)
    if cls is None:
        return None, f"{_SGLANG_VISION} has no VisionFlashInferAttention"
    try:
        module = cls()
    except Exception as exc:  # noqa: BLE001 - e.g. "only available for cuda"
        return None, f"VisionFlashInferAttention() failed: {type(exc).__name__}: {exc}"

    def flashinfer_cudnn_attention(q, k, v, cu_seqlens, bsz, seq_len, softmax_scale=None, forward_metadata=None,
                                   **kwargs):
        return module.forward(q, k, v, cu_seqlens=cu_seqlens, bsz=bsz, seq_len=seq_len,
                              softmax_scale=softmax_scale, forward_metadata=forward_metadata, **kwargs)

    return flashinfer_cudnn_attention, None


def _third_party(name: str, entries: dict, notes: dict, *, triton_code: bool, strict: bool,
                 precision: Optional[str], device) -> Target:
    excluded = {}
    if triton_code and interpreting():
        excluded["bfloat16"] = _BF16_REASON
    if precision is None:  # tl.dot runs fp32 in TF32 on NVIDIA GPUs by default; exact in the interpreter
        precision = "tf32" if (triton_code and str(device).startswith("cuda") and not interpreting()) else "ieee"
    return Target(name, entries, precision=precision, strict=strict, excluded_dtypes=excluded, notes=notes)


def _sglang(device) -> Target:
    notes: dict = {}
    entries: dict = {}
    lora, why = _find_sglang_lora()
    if lora is not None:
        entries.update(_entries_from(lora, LORA_ENTRY, notes))
    else:
        notes.update({op: why for op in LORA_ENTRY})
    fn, why_v = _sglang_vision_fn(device)
    if fn is not None:
        entries["vision"] = fn
    else:
        notes["vision"] = why_v
    if not entries:
        return _unavailable("sglang", "; ".join(sorted(set(notes.values()))), notes=notes)
    return _third_party("sglang", entries, notes, triton_code=True, strict=False, precision=None, device=device)


def _torch_varlen(device) -> Target:
    try:
        from torch.nn.attention.varlen import varlen_attn
    except Exception as exc:  # noqa: BLE001
        return _unavailable("torch-varlen", f"torch {torch.__version__} has no torch.nn.attention.varlen "
                                            f"({type(exc).__name__})")
    if not str(device).startswith("cuda"):
        return _unavailable("torch-varlen", "varlen_attn has no CPU kernel (aten::_flash_attention_forward is "
                                            "CUDA-only); run with --device cuda")
    from reference.vision_metadata import resolve_flashinfer_cudnn

    def flashinfer_cudnn_attention(q, k, v, cu_seqlens, bsz, seq_len, softmax_scale=None, forward_metadata=None,
                                   **kwargs):
        """Our contract resolution (reference.vision_metadata), then torch's varlen_attn."""
        kwargs.pop("strict", None)
        plan = resolve_flashinfer_cudnn(q, k, v, cu_seqlens, softmax_scale, forward_metadata, strict=True, **kwargs)
        T, H, DV = plan.q.shape[0], plan.q.shape[1], plan.v.shape[2]
        out = torch.zeros(T, H, DV, dtype=plan.q.dtype, device=plan.q.device)
        real = [b for b in range(plan.num_sequences) if int(plan.lengths[b]) > 0]
        if real:
            def gather(t, starts):
                return torch.cat([t[int(starts[b]):int(starts[b]) + int(plan.lengths[b])] for b in real])
            qq, kk, vv = gather(plan.q, plan.qk_start), gather(plan.k, plan.qk_start), gather(plan.v, plan.v_start)
            lens = torch.tensor([int(plan.lengths[b]) for b in real], dtype=torch.int32)
            cu = torch.cat([torch.zeros(1, dtype=torch.int32), torch.cumsum(lens, 0, dtype=torch.int32)]).to(qq.device)
            mx = int(lens.max())
            res = varlen_attn(qq, kk, vv, cu, cu, mx, mx, scale=plan.scale)
            pos = 0
            for b in real:
                n = int(plan.lengths[b])
                out[int(plan.o_start[b]):int(plan.o_start[b]) + n] = res[pos:pos + n]
                pos += n
        if plan.reshape_batch is not None:
            out = out.unflatten(0, (plan.reshape_batch, -1))
        return out

    return Target("torch-varlen", {"vision": flashinfer_cudnn_attention}, precision="ieee", strict=True,
                  excluded_dtypes={"float32": "varlen_attn (flash attention) supports float16 and bfloat16 only"},
                  notes={op: "torch-varlen is a vision peer only" for op in LORA_ENTRY})


def _module_target(spec: str, device) -> Target:
    module_name, _, attr = spec.partition(":")
    mod, why = _import(module_name)
    if mod is None:
        return _unavailable(spec, why)
    obj = mod
    if attr:
        obj = getattr(mod, attr, None)
        if obj is None:
            return _unavailable(spec, f"{module_name} has no attribute {attr!r}; pass package.module:attr "
                                      f"with an attr it defines")
        if inspect.isclass(obj):
            try:
                obj = obj()
            except Exception as exc:  # noqa: BLE001
                return _unavailable(spec, f"{spec}() failed: {type(exc).__name__}: {exc}")
    notes: dict = {}
    entries = _entries_from(obj, None, notes)
    if not entries and callable(obj) and attr:
        entries = {"vision": obj}  # a bare function: the vision forward
        notes.pop("vision", None)
    if not entries:
        return _unavailable(spec, f"{spec} exports none of {sorted(set(LORA_ENTRY.values()))} or "
                                  "flashinfer_cudnn_attention")
    try:
        source = inspect.getsource(mod)
    except (OSError, TypeError):
        source = ""
    triton_code = "triton" in source
    strict = bool(getattr(obj, "KERNEL_ORACLE_STRICT", getattr(mod, "KERNEL_ORACLE_STRICT", False)))
    precision = getattr(obj, "KERNEL_ORACLE_PRECISION", getattr(mod, "KERNEL_ORACLE_PRECISION", None))
    return _third_party(spec, entries, notes, triton_code=triton_code, strict=strict, precision=precision,
                        device=device)


_CACHE: dict = {}


def resolve_target(spec: str, device="cpu") -> Target:
    """The :class:`Target` for ``spec`` (cached per spec and device); never raises for an
    unavailable target -- check ``.available`` and report ``.reason``."""
    if not isinstance(spec, str) or not spec:
        raise TargetError(f"Expected a target spec such as 'reference', 'triton', 'sglang', 'torch-varlen', "
                          "'flashinfer-cudnn', "
                          f"'mutant:NAME' or 'package.module[:attr]' but got spec={spec!r}")
    key = (spec, str(device))
    if key in _CACHE:
        return _CACHE[key]
    if spec == "reference":
        t = _reference(device)
    elif spec == "triton":
        t = _triton(device)
    elif spec == "sglang":
        t = _sglang(device)
    elif spec == "torch-varlen":
        t = _torch_varlen(device)
    elif spec == "flashinfer-cudnn":
        from .flashinfer_cudnn import flashinfer_cudnn_target

        t = flashinfer_cudnn_target(device)
    elif spec.startswith("mutant:"):
        from .mutants import mutant_target

        t = mutant_target(spec.split(":", 1)[1], device)
    elif "." in spec.partition(":")[0] or ":" in spec:
        t = _module_target(spec, device)
    else:
        raise TargetError(f"target={spec!r} is unknown; the only built-in targets are {list(BUILTIN_TARGETS)} "
                          "(or pass mutant:NAME or package.module[:attr])")
    _CACHE[key] = t
    return t
