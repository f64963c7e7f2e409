"""Targets ``sglang``, ``sglang-trt``, ``sglang==X.Y.Z`` and ``sglang-trt==X.Y.Z``: SGLang's own kv_b
LoRA Triton kernels (default and TRT-LLM-style variant) and its ``VisionFlashInferAttention``.

Note [SGLang targets]
---------------------
* ``sglang`` / ``sglang-trt``: the installed release.  Its files are found through the
  distribution's metadata (never by importing it: :mod:`.sglang_wheel`), the kv_b kernel file by
  SPEC.md's module table, then by a search for the entry points.  The file is imported the normal
  way when SGLang's heavy imports work here; when they fail (torch and triton alone), it is loaded
  standalone by the same loader as a wheel, and the record says which.  ``sglang`` adds the vision
  backend when it imports and builds (it needs CUDA and FlashInfer; the note says why not).
* ``sglang==X.Y.Z`` / ``sglang-trt==X.Y.Z``: a published release without installing it; the wheel
  comes from ``--sglang-wheel PATH|DIR`` (``TargetSources.sglang_wheel``), the cache, or
  ``pip download --no-deps``.  kv_b kernels only: the vision backend needs SGLang's runtime.

The kv_b kernel files define the four split steps only (no fused q/v-side entry points): the target
reports the fused ops as missing, with the reason.  The record's ``reason`` names the release, the
module and how it was loaded.  A release without such kernels is an unavailable target whose
reason is one line.
"""

from __future__ import annotations

import re

from kernel_oracle.harness.opinfo import FAMILY_OPS
from kernel_oracle.harness.targets import Target, TargetSources, TargetSpec, unavailable

from .adapter import entries_from, import_module, third_party
from .registry import register_target
from .sglang_wheel import (LoaderError, ReleaseFiles, find_wheel, installed_release, load_kernel_module,
                           locate_kernels, module_name, wheel_release)

__all__ = ["release_target", "sglang_target"]

_SGLANG_VISION = "sglang.srt.layers.attention.vision"
_VERSION = re.compile(r"\d+(\.\d+)*([.-]?(a|b|rc|post|dev)\d*)*")


def _sglang_vision_fn():
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
        if forward_metadata is not None:  # the forward_metadata keyword exists from 0.5.17
            kwargs["forward_metadata"] = forward_metadata
        return module.forward(q, k, v, cu_seqlens=cu_seqlens, bsz=bsz, seq_len=seq_len,
                              softmax_scale=softmax_scale, **kwargs)

    return flashinfer_cudnn_attention, None


def _kernel_module(release: ReleaseFiles, variant: str, *, try_import: bool):
    """``(module, how)`` of ``release``'s kv_b kernel file of ``variant``; raises LoaderError."""
    found = locate_kernels(release)
    if variant not in found:
        have = f"only the {sorted(found)} variant" if found else "no kv_b LoRA kernels"
        raise LoaderError(f"sglang {release.version} has {have} (no {variant} kv_b_lora_absorbed.py; the kernels "
                          f"exist from 0.5.12, the TRT-LLM-style variant from 0.5.15)")
    path = found[variant]
    name = module_name(path)
    why_import = ""
    if try_import:
        mod, why_import = import_module(name)
        if mod is not None and hasattr(mod, "step_a_q_fwd"):
            return mod, f"sglang {release.version}: {name} (imported)"
    mod = load_kernel_module(release, path, variant)
    how = f"sglang {release.version}: {name}, loaded standalone from the {release.origin}"
    if why_import:
        how += f" (importing it failed: {why_import.splitlines()[0][:160]})"
    return mod, how


def release_target(name: str, release: ReleaseFiles, variant: str, device, *, try_import: bool = False,
                   vision: bool = False) -> Target:
    """The :class:`Target` of ``release``'s kv_b kernels of ``variant`` (and the installed vision backend)."""
    notes: dict = {}
    entries: dict = {}
    try:
        mod, how = _kernel_module(release, variant, try_import=try_import)
    except LoaderError as exc:
        return unavailable(name, str(exc))
    entries.update(entries_from(mod, FAMILY_OPS["lora"], notes))
    for op, why in list(notes.items()):
        notes[op] = f"{why} (SGLang defines the four split steps only)"
    if vision:
        fn, why_v = _sglang_vision_fn()
        if fn is not None:
            entries["vision"] = fn
        else:
            notes["vision"] = why_v
    else:
        notes["vision"] = ("the vision backend needs SGLang's runtime and FlashInfer: install SGLang on a GPU "
                           "machine and use --targets sglang")
    t = third_party(name, entries, notes, triton_code=True, strict=False, precision=None, device=device)
    t.reason = how
    t.release = str(release.version)  # the known issues of this release apply (harness.known_issues)
    return t


def sglang_target(spec: TargetSpec, device: str, sources: TargetSources) -> Target:
    """``sglang`` / ``sglang-trt``: the installed release; ``...==X.Y.Z``: the release's wheel (Note
    [SGLang targets])."""
    name = str(spec)
    if spec.release is None:
        try:
            release = installed_release()
        except LoaderError as exc:
            return unavailable(name, str(exc))
        return release_target(name, release, spec.variant, device, try_import=True, vision=(spec.name == "sglang"))
    if not _VERSION.fullmatch(spec.release):
        return unavailable(name, f"{name!r}: version {spec.release!r} is not a release number; pass e.g. "
                                 f"{spec.name}==0.5.23")
    try:
        release = wheel_release(find_wheel(spec.release, sources.sglang_wheel))
    except LoaderError as exc:
        return unavailable(name, str(exc))
    return release_target(name, release, spec.variant, device)


register_target("sglang", sglang_target)
register_target("sglang-trt", sglang_target)
