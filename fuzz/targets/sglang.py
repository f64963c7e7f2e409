"""Targets ``sglang``, ``sglang-trt``, ``sglang==X.Y.Z`` and ``sglang-trt==X.Y.Z``: SGLang's own kv_b
LoRA Triton kernels (default and TRT-LLM-style variant) and its ``VisionFlashInferAttention``.

Note [SGLang targets]
---------------------
* ``sglang`` / ``sglang-trt``: the installed release.  Its files are found through the
  distribution's metadata (never by importing it: :mod:`.sglang_wheel`), the kv_b kernel file by
  the module table of docs/semantics.md#where-sglang-keeps-the-kernels, then by a search for the entry points.  The file is imported the normal
  way when SGLang's heavy imports work here; when they fail (torch and triton alone), it is loaded
  standalone by the same loader as a wheel, and the record says which.  ``sglang`` adds the vision
  backend when it imports and builds (it needs CUDA and FlashInfer; the note says why not).
* ``sglang==X.Y.Z``: a published release without installing it (the wheel comes from
  ``--sglang-wheel PATH|DIR`` (``TargetSources.sglang_wheel``), the cache, or
  ``pip download --no-deps``): its default kv_b kernels (from 0.5.12) and its own vision wrapper
  (from 0.5.10: :mod:`.sglang_vision`), loaded standalone.  0.5.10 and 0.5.11 have no kv_b kernels:
  vision-only targets.  ``sglang-trt==X.Y.Z``: the TRT-LLM-style kv_b kernels (from 0.5.13), with
  the configuration of Note [SGLang switches] (``@lora_opti=on,cublas_kv_b=on,pdl=off``); the vision
  wrapper is the same file for both, so it is ``sglang==X.Y.Z``'s.

The vision wrapper runs on an engine (the ``cudnn_batch_prefill_with_kv_cache`` it calls): on a CUDA
device FlashInfer's real one (:func:`~.flashinfer_cudnn.shared_engine`, with its graph-cache guard
and ``return_lse`` fallback), else unavailable with the reason; on the CPU the pure-torch engine of
:mod:`.cudnn_prefill_torch`, and the record says that there the wrapper is tested, not cuDNN.
``sglang==X.Y.Z@engine=V`` runs the wrapper on FlashInfer release ``V`` (Note [Engine versions] in
:mod:`.flashinfer_engines`: its own folder first on ``sys.path``, or unavailable saying why), and the
engine's release is part of the vision identity, so the matrix keeps one column per release.  The
target declines the arguments that release's own ``VisionAttention`` never passes the wrapper
(``Target.declines``, :func:`caller_declines`), and
its vision entry carries the release's ``VisionAttentionMetadata`` (``entry.metadata_type``, from
0.5.16) and metadata helper ``prepare_flashinfer_cudnn_vision_attention_metadata``
(``entry.metadata_helper``, from 0.5.17; None where the release has none).

The kv_b kernel files define the four split steps only (no fused q/v-side entry points): the target
reports the fused ops as missing, with the reason.  The record's ``reason`` names the release, the
modules and how they were loaded.  A release without either is an unavailable target whose reason
is one line.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from kernel_oracle.harness.family import FAMILY_OPS
from kernel_oracle.harness.targets import RELEASE_NAMES, Target, TargetSources, TargetSpec, unavailable
from kernel_oracle.harness.tiles import unknown_model

from .adapter import entries_from, import_module, third_party
from .flashinfer_cudnn import CUDNN_TILES, ENGINE_DTYPES_REASON, FlashInferCudnn, shared_engine
from .flashinfer_engines import ENGINE_RELEASES, select_engine
from .registry import register_target
from .sglang_switches import CONFIGURATION, ReleaseConfiguration, hardware_pdl, switches_read, unknown_switch_note
from .sglang_switches import PDL_READ, declared_switches
from .sglang_csgmv import locate_csgmv
from .sglang_csgmv_identity import csgmv_configuration, csgmv_configuration_applies, csgmv_run_identity
from .sglang_tiles import kv_b_model, v2_model
from .sglang_two_stream import TWO_STREAM_FILE, TwoStreamCorrections, load_two_stream
from .sglang_v2 import ALIGNER_NOTE, CPU_NOTE, V2_DECLINES, V2Corrections, load_v2, locate_v2, v2_identity
from .sglang_vision import VISION_FILE, load_vision_wrapper, read_vision_code
from .sglang_wheel import (LoaderError, ReleaseFiles, code_identity, find_wheel, installed_release, kernel_files,
                           kernel_identity, load_kernel_module, locate_kernels, module_name, switch_module,
                           wheel_release)

__all__ = ["CPU_ENGINE_NOTE", "configuration_applies", "release_has_code", "release_identity", "release_target", "sglang_target",
           "v2_target", "vision_entry"]

_SGLANG_VISION = "sglang.srt.layers.attention.vision"
_VERSION = re.compile(r"\d+(\.\d+)*([.-]?(a|b|rc|post|dev)\d*)*")
CPU_ENGINE_NOTE = ("the engine is a pure-torch cudnn_batch_prefill_with_kv_cache "
                   "(fuzz/targets/cudnn_prefill_torch.py): on the CPU the wrapper is tested, not cuDNN")
VARIANT_SINCE = {"default": "0.5.12", "trt": "0.5.13"}


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
        if forward_metadata is not None:  # the forward_metadata keyword exists from 0.5.16
            kwargs["forward_metadata"] = forward_metadata
        return module.forward(q, k, v, cu_seqlens=cu_seqlens, bsz=bsz, seq_len=seq_len,
                              softmax_scale=softmax_scale, **kwargs)

    return flashinfer_cudnn_attention, None


def _engine(device: str):
    """``(binding, how, None)`` of the engine under a release's wrapper on ``device``, or
    ``(None, None, why)``: a :class:`~.flashinfer_cudnn.FlashInferCudnn` binding either way."""
    import torch

    from .cudnn_prefill_torch import cudnn_batch_prefill_with_kv_cache

    if torch.device(device).type == "cpu":
        return FlashInferCudnn(torch.device("cpu"), cudnn_batch_prefill_with_kv_cache, guard=False), \
            CPU_ENGINE_NOTE, None
    engine, why = shared_engine(device)
    if engine is None:
        return None, None, f"the wrapper's engine is unavailable: {why}"
    return engine, f"the engine is FlashInfer's cudnn_batch_prefill_with_kv_cache ({engine.describe()})", None


# the keywords of SGLang's vision call that are features a target may decline (harness.features_vision.VISION_FEATURES)
CALL_FEATURES = ("softmax_scale", "window_size", "s_aux", "forward_metadata")


def caller_declines(version, accepts: frozenset, kv_heads: bool = True) -> dict:
    """feature -> reason for every keyword of SGLang's call that ``version``'s own ``VisionAttention`` never
    passes its ``flashinfer_cudnn`` wrapper (``accepts``: the keywords it does pass), and GQA where its
    ``VisionAttention`` has no ``num_kv_heads`` (``kv_heads`` False: k and v always have q's heads): a
    wrapper that mishandles what its callers never give has no defect, so the harness gives it no such case."""
    out = {kw: f"sglang {version}'s VisionAttention never passes {kw} to this backend"
           for kw in CALL_FEATURES if kw not in accepts}
    if not kv_heads:
        out["gqa"] = f"sglang {version}'s VisionAttention has no num_kv_heads: k and v always have q's heads"
    return out


def vision_entry(release: ReleaseFiles, device: str):
    """``(entry, accepts, poison, how)`` of ``release``'s own vision wrapper on ``device``; raises
    :class:`LoaderError` (one line) when it cannot run here.  ``entry`` has the op's signature and
    passes the wrapper exactly the keywords of the call (a None that the release's callers never
    pass is left out, as they leave it out)."""
    import torch

    binding, how, why = _engine(device)
    if binding is None:
        raise LoaderError(f"sglang {release.version}: {why}")
    wrapper = load_vision_wrapper(release, binding.engine, str(binding.device))  # one module per engine
    workspace = torch.empty(0, dtype=torch.uint8) if binding.device.type == "cpu" else binding.workspace()
    module = wrapper.cls(workspace_buffer=workspace)
    accepts = wrapper.code.accepts

    def flashinfer_cudnn_attention(q, k, v, cu_seqlens, bsz, seq_len, softmax_scale=None, forward_metadata=None,
                                   **kwargs):
        given = {"softmax_scale": softmax_scale, "forward_metadata": forward_metadata, **kwargs}
        passed = {k: v for k, v in given.items() if k in accepts or v is not None}
        return module.forward(q=q, k=k, v=v, bsz=bsz, seq_len=seq_len, cu_seqlens=cu_seqlens, **passed)

    flashinfer_cudnn_attention.__qualname__ = f"sglang {release.version} VisionFlashInferAttention.forward"
    # the release's own metadata type and builder, for callers that build forward_metadata as SGLang does
    flashinfer_cudnn_attention.metadata_type = wrapper.metadata_cls
    flashinfer_cudnn_attention.metadata_helper = wrapper.metadata_helper
    flashinfer_cudnn_attention.kv_heads = wrapper.code.kv_heads  # its layer may pass k/v of fewer heads
    extra = f"metadata helper {wrapper.metadata_helper.__name__}" if wrapper.metadata_helper else "no metadata helper"
    described = (f"vision: {wrapper.cls.__name__} of {VISION_FILE} (class source, {extra}), loaded standalone; "
                 f"{how}")
    return flashinfer_cudnn_attention, accepts, binding.poisoned_output, described


def _kernel_module(release: ReleaseFiles, variant: str, config: ReleaseConfiguration, *, try_import: bool):
    """``(module, how)`` of ``release``'s kv_b kernel file of ``variant``; raises LoaderError."""
    found = locate_kernels(release)
    if variant not in found:
        have = f"only the {sorted(found)} variant" if found else "no kv_b LoRA kernels"
        raise LoaderError(f"sglang {release.version} has {have} (no {variant} kv_b_lora_absorbed.py; the kernels "
                          f"exist from {VARIANT_SINCE['default']}, the TRT-LLM-style variant from "
                          f"{VARIANT_SINCE['trt']})")
    path = found[variant]
    name = module_name(path)
    why_import = ""
    if try_import and config == ReleaseConfiguration():
        mod, why_import = import_module(name)
        if mod is not None and hasattr(mod, "step_a_q_fwd"):
            return mod, f"sglang {release.version}: {name} (imported)"
    mod = load_kernel_module(release, path, variant, config)
    how = f"sglang {release.version}: {name}, loaded standalone from the {release.origin}"
    if why_import:
        how += f" (importing it failed: {why_import.splitlines()[0][:160]})"
    note = unknown_switch_note(name, set().union(*(switches_read(release.read(f))
                                                 for f in kernel_files(release, path))))
    return mod, how + (f"; {note}" if note else "")


def _two_stream_entries(release: ReleaseFiles, config: ReleaseConfiguration, device: str) -> tuple:
    """``({op: callable}, how)`` of the TRT-LLM-style fused sides from the release's two-stream MLA correction
    (Note [The two-stream kv_b correction]); ``({}, None)`` where the release has none."""
    if TWO_STREAM_FILE not in release.names or not config.master:  # the MLA forward calls it under lora_opti only
        return {}, None
    path = locate_kernels(release)["trt"]
    try:
        corrections = TwoStreamCorrections(load_two_stream(release, path, config))
    except LoaderError as exc:
        return {}, f"no fused sides: {exc}"
    gate = ("open for decode batches: prepare on a side stream, apply on the current one, allocator pressure "
            "between and after" if device.startswith("cuda") else "closed (no CUDA streams here): its serial path")
    return ({"q_side_fused": corrections.q_side_fused_fwd, "v_side_fused": corrections.v_side_fused_fwd},
            f"fused sides: {module_name(TWO_STREAM_FILE)} (the DeepSeek MLA forward's kv_b correction), two-stream "
            f"gate {gate}")


def _pdl_refusal(config: ReleaseConfiguration, device: str) -> Optional[str]:
    """Why ``pdl=on`` cannot run here (None when it can, or when PDL is not forced on)."""
    if config.pdl and not hardware_pdl():
        return (f"pdl=on: programmatic dependent launch needs compiled Triton on an SM90+ CUDA GPU; here "
                f"(device {device}) the kernels cannot launch with it (the Triton interpreter cannot run gdc_wait)")
    return None


def release_target(name: str, release: ReleaseFiles, variant: str, device, *, try_import: bool = False,
                   vision: str = "none", config: ReleaseConfiguration = ReleaseConfiguration()) -> Target:
    """The :class:`Target` of ``release``'s kv_b kernels of ``variant`` under ``config``, and its vision
    wrapper: ``vision`` is ``"none"``, ``"installed"`` (the installed package's, imported) or
    ``"release"`` (the release's own file, loaded standalone)."""
    notes: dict = {}
    entries: dict = {}
    reasons: list[str] = []
    tiles = {"vision": unknown_model(f"the wrapper hands each batch to cuDNN (the CPU stand-in: torch's attention "
                                     f"per sequence); {CUDNN_TILES}")}
    refusal = _pdl_refusal(config, str(device))
    if refusal is not None:
        return unavailable(name, refusal)
    try:
        mod, how = _kernel_module(release, variant, config, try_import=try_import)
        entries.update(entries_from(mod, FAMILY_OPS["lora"], notes))
        reasons.append(how)
        fused = {}
        if variant == "trt":
            fused, how_fused = _two_stream_entries(release, config, str(device))
            entries.update(fused)
            for op in fused:
                notes.pop(op, None)
            reasons.append(how_fused) if how_fused else None
        for op, why in list(notes.items()):
            notes[op] = f"{why} (SGLang defines the four split steps only)"
        tiles["lora"] = kv_b_model(release.read(locate_kernels(release)[variant]), fused=bool(fused))
    except LoaderError as exc:
        if vision != "release":
            return unavailable(name, str(exc))
        notes.update({op: str(exc) for op in FAMILY_OPS["lora"]})
    declines, poison, helper = {}, None, None
    if vision == "installed":
        fn, why_v = _sglang_vision_fn()
        entries.update({"vision": fn} if fn is not None else {})
        notes.update({} if fn is not None else {"vision": why_v})
    elif vision == "release":
        try:
            fn, keywords, poison, how_v = vision_entry(release, str(device))
            declines = caller_declines(release.version, keywords, fn.kv_heads)
            entries["vision"], helper = fn, fn.metadata_helper
            reasons.append(how_v)
        except LoaderError as exc:
            notes["vision"] = str(exc)
    else:
        notes["vision"] = (f"the vision wrapper is the same file in both variants: test it as "
                           f"sglang=={release.version} --op vision")
    if not entries:
        return unavailable(name, "; ".join(dict.fromkeys(notes.values())))
    if "step_a_q" not in entries:
        reasons.insert(0, f"sglang {release.version}: no kv_b LoRA kernels (a vision-only release)")
    t = third_party(name, entries, notes, triton_code="step_a_q" in entries, strict=False, precision=None,
                    device=device)
    if "vision" in entries:  # the kv_b kernels' exclusions are theirs; the wrapper's engine has its own
        t.precision = {op: t.precision for op in entries} | {"vision": "ieee"}  # the engine's fp32 accumulation
        if t.excluded_dtypes:
            t.excluded_dtypes_by_family["lora"], t.excluded_dtypes = dict(t.excluded_dtypes), {}
        t.excluded_dtypes_by_family["vision"] = {"float32": ENGINE_DTYPES_REASON + " (the CPU engine follows it)"}
    if config != ReleaseConfiguration():
        reasons.append(f"configuration: {config.describe()}")
    t.reason = "; ".join(reasons)
    t.release = str(release.version)  # the known issues of this release apply (harness.known_issues)
    t.declines, t.poison, t.metadata_helper, t.tiles = declines, poison, helper, tiles
    return t


def v2_target(name: str, release: ReleaseFiles, device,
              config: ReleaseConfiguration = ReleaseConfiguration()) -> Target:
    """The :class:`Target` of ``release``'s ``triton_v2`` kv_b path (Note [The v2 kv_b path])."""
    import torch

    refusal = _pdl_refusal(config, str(device))
    if refusal is not None:
        return unavailable(name, refusal)
    try:
        module = load_v2(release, config)
    except LoaderError as exc:
        return unavailable(name, str(exc))
    corrections = V2Corrections(module, device, config)
    notes: dict = {}
    entries = entries_from(corrections, FAMILY_OPS["lora"], notes)
    t = third_party(name, entries, notes, triton_code=True, strict=False, precision=None, device=device)
    how = [f"sglang {release.version}: {module_name(locate_v2(release))} (the triton_v2 backend's absorbed-MLA "
           f"correction) with its runner, routes and grouped kernels, loaded standalone from the {release.origin}",
           ALIGNER_NOTE]
    if torch.device(device).type != "cuda":
        how.append(CPU_NOTE)
    if config != ReleaseConfiguration():
        how.append(f"configuration: {config.describe()}")
    t.reason = "; ".join(how)
    t.release = str(release.version)
    t.declines = dict(V2_DECLINES)
    t.tiles = {"lora": v2_model(module, corrections.phase_type)}
    return t


def torch_device_type(device) -> str:
    import torch

    return torch.device(device).type


def sglang_target(spec: TargetSpec, device: str, sources: TargetSources) -> Target:
    """``sglang`` / ``sglang-trt`` / ``sglang-v2``: the installed release; ``...==X.Y.Z``: the release's
    wheel (Note [SGLang targets])."""
    name = str(spec)
    config = ReleaseConfiguration.from_spec(spec)
    engine = dict(spec.configuration).get("engine")  # the vision wrapper's FlashInfer release (Note [Engine versions])
    why = select_engine(engine) if engine and torch_device_type(device) == "cuda" else ""
    if why:
        return unavailable(name, why)
    if spec.release is None:
        try:
            release = installed_release()
        except LoaderError as exc:
            return unavailable(name, str(exc))
        if spec.variant == "v2":
            return v2_target(name, release, device, config)
        return release_target(name, release, spec.variant, device, try_import=True, config=config,
                              vision="installed" if spec.name == "sglang" else "none")
    if not _VERSION.fullmatch(spec.release):
        return unavailable(name, f"{name!r}: version {spec.release!r} is not a release number; pass e.g. "
                                 f"{spec.name}==0.5.23")
    try:
        release = wheel_release(find_wheel(spec.release, sources.sglang_wheel))
    except LoaderError as exc:
        return unavailable(name, str(exc))
    if spec.variant == "v2":
        return v2_target(name, release, device, config)
    return release_target(name, release, spec.variant, device, config=config,
                          vision="release" if spec.name == "sglang" else "none")


def release_has_code(spec, family: str, sources: Optional[TargetSources] = None) -> Optional[bool]:
    """Whether the release of ``spec`` has code of ``family`` for its target (kv_b kernels of its
    variant; the vision wrapper for ``sglang``); None when that is unknown (not a release spec, or no
    wheel here)."""
    parsed = TargetSpec.parse(spec)
    if parsed.release is None or parsed.name not in RELEASE_NAMES:
        return None
    try:
        release = wheel_release(find_wheel(parsed.release, (sources or TargetSources()).sglang_wheel, download=False))
    except LoaderError:
        return None
    if parsed.variant == "v2":
        return family == "lora" and locate_v2(release) is not None
    if parsed.variant == "csgmv":
        return family == "csgmv" and bool(locate_csgmv(release))
    if family == "vision":
        if parsed.name != "sglang":
            return False
        try:
            read_vision_code(release)
        except LoaderError:
            return False
        return True
    return family == "lora" and parsed.variant in locate_kernels(release)


def release_identity(spec, family: str, device: str = "cpu", sources: Optional[TargetSources] = None) -> Optional[str]:
    """What a ``family`` campaign on the release target ``spec`` runs, as one string: the identity of
    its code (:func:`~.sglang_wheel.kernel_identity`, :attr:`~.sglang_vision.VisionCode.identity`,
    :func:`~.sglang_csgmv_identity.csgmv_run_identity`) and, for the kv_b and csgmv kernels, every
    switch as the files read it under the spec's configuration; for vision, the engine's kind.  Two
    specs with the same identity run the same code on the same calls.  None: not a release spec, no wheel, or no such code in the release."""
    parsed = TargetSpec.parse(spec)
    if parsed.release is None or parsed.name not in RELEASE_NAMES:
        return None
    try:
        release = wheel_release(find_wheel(parsed.release, (sources or TargetSources()).sglang_wheel))
        if parsed.variant == "v2":
            entry = locate_v2(release) if family == "lora" else None
            if entry is None:
                return None
            config = ReleaseConfiguration.from_spec(parsed)
            pdl = config.pdl if config.pdl is not None else hardware_pdl()
            return f"v2 {v2_identity(release, entry)} pdl={int(pdl)}"
        if parsed.variant == "csgmv":
            if family != "csgmv" or not locate_csgmv(release):
                return None
            return csgmv_run_identity(release, csgmv_configuration(parsed))
        if family == "vision":
            engine = "cpu" if str(device).startswith("cpu") else "cuda"
            release_of = dict(parsed.configuration).get("engine")
            engine += f" FlashInfer {release_of}" if release_of and engine == "cuda" else ""
            return f"vision {read_vision_code(release).identity} on the {engine} engine" \
                if parsed.name == "sglang" else None
    except LoaderError:
        return None
    path = locate_kernels(release).get(parsed.variant)
    if path is None:
        return None
    config = ReleaseConfiguration.from_spec(parsed)
    reads = set().union(*(switches_read(release.read(f)) for f in kernel_files(release, path)))
    module = switch_module(release, path)
    file = module.replace(".", "/") + ".py" if module else None
    declared = declared_switches(release.read(file) if file in release.names else None)
    values = [f"{r}={int(config.reads(r.partition('.')[2], declared.get(r.partition('.')[2], False)))}"
              for r in sorted(reads) if r.startswith("lora_envs.")]
    if PDL_READ in reads:
        values.append(f"pdl={int(config.pdl if config.pdl is not None else hardware_pdl())}")
    fused = ""
    if parsed.variant == "trt" and config.master and TWO_STREAM_FILE in release.names:  # the fused sides' file
        fused = f" fused {code_identity(ast.parse(release.read(TWO_STREAM_FILE)).body)}"
    return f"{parsed.variant} {kernel_identity(release, path)}{fused} " + ",".join(values)


def configuration_applies(spec, sources: Optional[TargetSources] = None) -> bool:
    """Whether the configuration of the release spec ``spec`` sets only switches its code reads: False
    only for an ``sglang-csgmv`` release whose csgmv files read none of them (before 0.5.22: Note [csgmv
    run identity]); True for every other spec, and where the wheel is not here."""
    parsed = TargetSpec.parse(spec)
    if parsed.release is None or parsed.variant != "csgmv" or not parsed.configuration:
        return True
    try:
        release = wheel_release(find_wheel(parsed.release, (sources or TargetSources()).sglang_wheel, download=False))
    except LoaderError:
        return True
    return csgmv_configuration_applies(release, parsed)


register_target("sglang", sglang_target, configuration={"engine": tuple(ENGINE_RELEASES)})
register_target("sglang-trt", sglang_target, configuration=CONFIGURATION)
register_target("sglang-v2", sglang_target, configuration={"pdl": CONFIGURATION["pdl"]})
