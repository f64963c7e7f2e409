"""Target ``sglang``: SGLang's installed kv_b LoRA Triton ops and ``VisionFlashInferAttention``."""

from __future__ import annotations

import pkgutil

from kernel_oracle.harness.opinfo import FAMILY_OPS

from .registry import Target, entries_from, import_module, register_target, third_party, unavailable

# SGLang's kv_b LoRA Triton ops: the module name has moved between versions; the first candidate
# that imports and exports step_a_q_fwd wins, else every submodule of the package is searched
_SGLANG_LORA_CANDIDATES = ("sglang.srt.lora.triton_ops.kv_b_lora", "sglang.srt.lora.triton_ops.mla_kv_b_lora",
                           "sglang.srt.lora.triton_ops.kv_b_proj_lora", "sglang.srt.lora.triton_ops")
_SGLANG_VISION = "sglang.srt.layers.attention.vision"


def _find_sglang_lora():
    errors = []
    for name in _SGLANG_LORA_CANDIDATES:
        mod, why = import_module(name)
        if mod is not None and hasattr(mod, "step_a_q_fwd"):
            return mod, None
        errors.append(why or f"{name} has no step_a_q_fwd")
    pkg, why = import_module("sglang.srt.lora.triton_ops")
    if pkg is not None and hasattr(pkg, "__path__"):
        for info in pkgutil.iter_modules(pkg.__path__):
            mod, _ = import_module(f"sglang.srt.lora.triton_ops.{info.name}")
            if mod is not None and hasattr(mod, "step_a_q_fwd"):
                return mod, None
    return None, "; ".join(errors[-2:])


def _sglang_vision_fn(device):
    mod, why = import_module(_SGLANG_VISION)
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


def _sglang(device) -> Target:
    notes: dict = {}
    entries: dict = {}
    lora, why = _find_sglang_lora()
    if lora is not None:
        entries.update(entries_from(lora, FAMILY_OPS["lora"], notes))
    else:
        notes.update({op: why for op in FAMILY_OPS["lora"]})
    fn, why_v = _sglang_vision_fn(device)
    if fn is not None:
        entries["vision"] = fn
    else:
        notes["vision"] = why_v
    if not entries:
        return unavailable("sglang", "; ".join(sorted(set(notes.values()))), notes=notes)
    return third_party("sglang", entries, notes, triton_code=True, strict=False, precision=None, device=device)




register_target("sglang", lambda spec, device: _sglang(device))
