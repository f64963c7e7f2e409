"""The ``flashinfer-cudnn`` target: SGLang's ``flashinfer_cudnn`` wrapper semantics over the real
engine, FlashInfer's ``cudnn_batch_prefill_with_kv_cache`` (cuDNN SDPA).

Note [The flashinfer-cudnn target]
----------------------------------
SGLang's ``VisionFlashInferAttention.forward`` is a thin wrapper: resolve the metadata
(docs/semantics.md#error-contracts-and-their-order, the six upstream messages in order: :func:`reference.vision_metadata.resolve_flashinfer_cudnn`
with ``strict=False``, which raises exactly what SGLang raises), flatten 4-D inputs, split the
``3*(B+1)`` packed **element** indptrs into qk / v / o views shaped ``(B+1,1,1,1)``, and call
the engine with ``actual_seq_lens_q = actual_seq_lens_kv = sequence_lengths`` as ``(B,1,1,1)``,
``max_token_per_sequence = max_sequence_kv = max_seqlen``, ``causal=False``, ``return_lse=True``,
``batch_offsets_k = batch_offsets_q`` and ``is_cuda_graph_compatible=True``.  This module does
the same (our code, written from that description), so the suite can run our reference and our
Triton kernel against the code users actually run.

``return_lse``: SGLang asks for the log-sum-exp.  cuDNN backends before 9.26 refuse that graph
for ragged outputs ("a non-ragged Stats output must be a packed BHSD tensor").  The target probes
once, with SGLang's call, when it is built; if the engine refuses, the target says so in its
``reason`` (versions and the engine's own message) and runs with ``return_lse=False``, which
produces the same output tensor.  A refusal seen later, on a call, switches to the same fallback.

Graph-cache hazard: FlashInfer caches one cuDNN graph per key
(``flashinfer.cudnn.prefill._sdpa_prefill_key_fn``: batch size, max sequence lengths, heads,
head dims, dtype, scale, ...) but the graph also bakes in every tensor's strides and v's head dim,
which the key omits (for 3-D v it even takes ``d_vo`` from k).  A later call with the same key and
another layout replays the stale graph: measured on the H200 (fuzz/triage_flashinfer_cudnn.py),
wrong output everywhere for a strided v after a contiguous one or a 48-wide v after a 64-wide one,
and an illegal memory access the other way round.  The target remembers the layout each key was
built for (reading the engine's own cache, :func:`engine_graph_cache`, else mirroring its 256-entry
first-in-first-out cache) and raises :class:`GraphCacheHazard`, naming
the key and the layout change, instead of returning that garbage; ``guard=False`` replays as the
engine does (for the tests that pin the bug down).

Availability: FlashInfer and the cuDNN frontend must import and the device must be CUDA;
otherwise the target is unavailable and says why.  fp32 is excluded (cuDNN SDPA takes fp16/bf16).
The target implements no strict validation (like SGLang): run campaigns on it with
``--upstream-contracts-only``, because malformed offsets reach the engine unchecked.

GQA/MQA: the engine takes k and v with their own heads.  SGLang passes ``batch_offsets_k =
batch_offsets_q``, element offsets in q's units, which name other keys when k's token stride differs
from q's (Note [Grouped-query attention] in :mod:`reference.vision_metadata`); this target passes the
same object where the strides agree (SGLang's call) and k's own offsets (q's token times k's token
stride) where they differ, so it tests the engine, while the release's own wrapper (``sglang==X.Y.Z``)
is what shows SGLang's choice.  The engine has no window and no sinks: the target declines
``window_size`` and ``s_aux`` and refuses them, naming the argument.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Optional

import torch

from kernel_oracle.harness.family import FAMILY_OPS
from kernel_oracle.harness.targets import Target, unavailable
from kernel_oracle.harness.tiles import unknown_model

from .flashinfer_engines import ENGINE_RELEASES, select_engine
from .registry import register_target

__all__ = ["CUDNN_TILES", "DECLINES", "ENGINE_DTYPES_REASON", "GRAPH_CACHE_SIZE", "WORKSPACE_BYTES", "FlashInferCudnn",
           "GraphCacheHazard", "cannot_run_here", "engine_graph_cache", "engine_versions", "flashinfer_cudnn_target",
           "shared_engine"]

# SGLang's vision backends share a workspace buffer; FlashInfer documents 128 MB as sufficient for
# typical prefill workloads.
WORKSPACE_BYTES = 128 * 2**20
ENGINE_DTYPES_REASON = "cuDNN SDPA takes float16 and bfloat16 only"
# why no tile model describes a cuDNN-backed vision target (Note [Tile models] in harness.tiles)
CUDNN_TILES = ("cuDNN picks its attention blocks inside its own engine (its graph's execution plan), which "
               "kernel-oracle cannot read")
# cudnn.graph_cache's default maxsize (nvidia-cudnn-frontend 1.28): the oldest key is evicted first
GRAPH_CACHE_SIZE = 256


class GraphCacheHazard(RuntimeError):
    """The engine would replay a cuDNN graph built for another layout under the same cache key."""


def engine_versions() -> dict:
    """Versions of what the engine runs on (missing pieces are reported as such)."""
    out = {"torch": torch.__version__, "cuda": torch.version.cuda}
    try:
        import flashinfer

        out["flashinfer"] = getattr(flashinfer, "__version__", "?")
    except Exception as exc:  # noqa: BLE001 - reported, not swallowed
        out["flashinfer"] = f"unavailable ({type(exc).__name__}: {exc})"
    try:
        import cudnn

        out["cudnn_frontend"] = getattr(cudnn, "__version__", "?")
        backend = getattr(cudnn, "backend_version", None)
        out["cudnn_backend"] = _cudnn_version_string(backend()) if callable(backend) else "?"
    except Exception as exc:  # noqa: BLE001
        out["cudnn_frontend"] = f"unavailable ({type(exc).__name__}: {exc})"
    if torch.backends.cudnn.is_available():
        out["torch_cudnn"] = _cudnn_version_string(torch.backends.cudnn.version())
    return out


def _flashinfer_release():
    """FlashInfer's version (the release its known issues are listed under), or None when unknown."""
    v = str(engine_versions().get("flashinfer") or "")
    return v if v[:1].isdigit() else None


def _cudnn_version_string(v) -> str:
    """91900 -> '9.19.0' (cuDNN 9 encodes major*10000 + minor*100 + patch)."""
    try:
        v = int(v)
    except (TypeError, ValueError):
        return str(v)
    return f"{v // 10000}.{v // 100 % 100}.{v % 100}" if v >= 10000 else str(v)


def engine_graph_cache() -> Optional[dict]:
    """FlashInfer's cuDNN prefill graph cache: the dict that ``cudnn.graph_cache`` (nvidia-cudnn-frontend)
    keeps in the closure of ``flashinfer.cudnn.prefill._build_prefill_graph``'s wrapper, found by
    walking wrappers (``__wrapped__`` and closure functions); None when this engine has no such cell.

    Why: the guard must know exactly which graphs the engine holds.  Mirroring it from our side
    missed one: a call that raises after the engine has built and cached its graph (malformed
    offsets) was never remembered, so a later call with the same key and another layout replayed
    the stale graph unguarded (a fresh process computes that layout right; after the raising call,
    a contiguous v with the same key gives inf)."""
    try:
        from flashinfer.cudnn import prefill
    except Exception:  # noqa: BLE001 - no engine, no cache
        return None
    todo, seen = [getattr(prefill, "_build_prefill_graph", None)], set()
    while todo:
        fn = todo.pop()
        if not callable(fn) or id(fn) in seen:
            continue
        seen.add(id(fn))
        code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None) or ()
        named = dict(zip(code.co_freevars, cells)) if code is not None else {}
        cache, key_fn = named.get("cache"), named.get("key_fn")
        if cache is not None and key_fn is not None and isinstance(cache.cell_contents, dict):
            return cache.cell_contents
        todo.append(getattr(fn, "__wrapped__", None))
        todo.extend(c.cell_contents for c in cells if callable(getattr(c, "cell_contents", None)))
    return None


class FlashInferCudnn:
    """One engine binding per device: the wrapper, the return_lse state and the output poison switch."""

    def __init__(self, device: torch.device, prefill, *, guard: bool = True,
                 graph_cache: Optional[dict] = None) -> None:
        """``prefill``: the engine call (FlashInfer's ``cudnn_batch_prefill_with_kv_cache`` or a stand-in);
        ``graph_cache``: the dict in which that very engine keeps its graphs (:func:`engine_graph_cache`
        for FlashInfer's), None to mirror it.  Passed, not looked up: a stand-in engine on a machine
        where FlashInfer is installed must not be guarded by FlashInfer's cache (the H200 suite)."""
        self.device = device
        self._prefill = prefill
        self.guard = guard
        self._layouts: dict = {}  # the engine's graph key -> the layout its graph was built for
        # the engine's own graph cache when known, and our key -> its key
        self._engine_cache: Optional[dict] = graph_cache
        self._engine_keys: dict = {}
        self._workspace: Optional[torch.Tensor] = None
        self.return_lse = True  # SGLang's call; False after a refusal (see the module note)
        self.lse_refusal: Optional[str] = None
        self._poison = False

    # -- the SGLang signature -----------------------------------------------------------------
    def flashinfer_cudnn_attention(self, q, k, v, cu_seqlens, bsz, seq_len, softmax_scale=None,
                                   forward_metadata=None, **kwargs) -> torch.Tensor:
        """SGLang's ``VisionFlashInferAttention.forward`` on FlashInfer's cuDNN prefill."""
        return self.prepare(q, k, v, cu_seqlens, bsz, seq_len, softmax_scale, forward_metadata, **kwargs)()

    def prepare(self, q, k, v, cu_seqlens, bsz, seq_len, softmax_scale=None, forward_metadata=None,
                **kwargs) -> Callable[[], torch.Tensor]:
        """SGLang's wrapper steps (contract, flattening, indptr views), returning the engine call
        as a closure: ``prepare(...)()`` is the forward; the closure alone times the engine."""
        from kernel_oracle.reference.vision_metadata import resolve_flashinfer_cudnn, select_metadata

        kwargs.pop("strict", None)  # SGLang has no strict validation
        # the upstream contract, in SGLang's order (raises its exact types and messages)
        resolve_flashinfer_cudnn(q, k, v, cu_seqlens, softmax_scale, forward_metadata, strict=False, **kwargs)
        sequence_lengths, packed, max_seqlen = select_metadata(cu_seqlens, forward_metadata, kwargs)
        _refuse_extras(kwargs)
        reshape_batch = q.shape[0] if q.dim() == 4 else None
        if reshape_batch is not None:
            q, k, v = (x.flatten(0, 1) for x in (q, k, v))
        lens = sequence_lengths.reshape(-1).to(device=q.device, dtype=torch.int32)
        B = int(lens.numel())
        flat = packed.reshape(-1).to(device=q.device, dtype=torch.int32)
        qk_ind, v_ind, o_ind = (flat[i * (B + 1):(i + 1) * (B + 1)].view(B + 1, 1, 1, 1) for i in range(3))
        # k's elements from the token q's offset names (SGLang's very object where the strides agree)
        k_ind = qk_ind if k.stride(0) == q.stride(0) else qk_ind // q.stride(0) * k.stride(0)
        scale = float(softmax_scale if softmax_scale is not None else q.shape[2] ** -0.5)
        call = dict(max_token_per_sequence=max_seqlen, max_sequence_kv=max_seqlen,
                    actual_seq_lens_q=lens.view(B, 1, 1, 1), actual_seq_lens_kv=lens.view(B, 1, 1, 1),
                    causal=False, batch_offsets_q=qk_ind, batch_offsets_k=k_ind, batch_offsets_v=v_ind,
                    batch_offsets_o=o_ind, is_cuda_graph_compatible=True)
        poison = self._poison

        def run() -> torch.Tensor:
            output = self._guarded(q, k, v, scale, call, poison=poison)
            return output if reshape_batch is None else output.unflatten(0, (reshape_batch, -1))

        return run

    def engine(self, q, k, v, scale, workspace_buffer=None, *, return_lse=True, out=None, **call):
        """``cudnn_batch_prefill_with_kv_cache`` as this binding runs it, for a wrapper that calls the
        engine itself (an SGLang release's own ``VisionFlashInferAttention``, :mod:`.sglang_vision`):
        the graph-cache guard, the ``return_lse`` fallback and the NaN-filled output of
        :meth:`poisoned_output` apply as to this target's own calls.  Returns ``(out, None)``: the
        wrapper discards the LSE, and after a refusal there is none."""
        output = self._guarded(q, k, v, scale, call, poison=self._poison, workspace=workspace_buffer, out=out)
        return output, None

    def _guarded(self, q, k, v, scale, call: dict, *, poison: bool, workspace=None, out=None) -> torch.Tensor:
        """One engine call behind the graph-cache guard (see the module note), into ``out`` (NaN-filled
        when ``poison``; allocated by the engine when None)."""
        B, max_seqlen = int(call["actual_seq_lens_q"].shape[0]), call["max_token_per_sequence"]
        key = (B, q.dtype, max_seqlen, q.shape[1], q.shape[2], k.shape[1], k.shape[2], float(scale))
        layout = {"q strides": tuple(q.stride()), "k strides": tuple(k.stride()), "v strides": tuple(v.stride()),
                  "v head dim": v.shape[2]}
        self._check_graph_key(key, layout)
        if poison:  # the same call with an output buffer full of NaN: unwritten tokens stay NaN
            out = torch.full((q.shape[0], q.shape[1], v.shape[2]), float("nan"), dtype=q.dtype, device=q.device)
        before = set(self._engine_cache) if self._engine_cache is not None else None
        try:
            return self._run(q, k, v, scale, {**call, "out": out}, workspace)
        finally:  # a call that raises after the engine built (and cached) its graph counts too
            self._remember(key, layout, before)

    def _check_graph_key(self, key: tuple, layout: dict) -> None:
        """Raise GraphCacheHazard when ``key`` was built for another layout (see the module note)."""
        seen = self._layouts.get(key)
        if seen is not None and self._engine_cache is not None and self._engine_keys.get(key) not in self._engine_cache:
            del self._layouts[key]  # the engine evicted that graph: the next call builds a fresh one
            seen = None
        if seen is None:
            return
        changed = [f"{name} {seen[name]} then {layout[name]}" for name in layout if seen[name] != layout[name]]
        if changed and self.guard:
            B, dtype, max_seqlen, H, D, _, _, scale = key
            raise GraphCacheHazard(
                f"flashinfer-cudnn: FlashInfer {engine_versions().get('flashinfer')} would replay the cuDNN graph "
                f"built for an earlier call with the same cache key (batch {B}, max_seqlen {max_seqlen}, {H} heads, "
                f"head dim {D}, {str(dtype).replace('torch.', '')}, scale {scale:g}) but another layout ("
                + "; ".join(changed) + "): its key omits strides and takes v's head dim from k "
                "(flashinfer.cudnn.prefill._sdpa_prefill_key_fn), so the output would be wrong or the "
                "kernel would read out of bounds. A known engine bug: see docs/flashinfer_cudnn.md.")

    def _remember(self, key: tuple, layout: dict, before: Optional[set] = None) -> None:
        """After a call that may have built the graph of ``key`` (returned or raised): the layout it was
        built for.  With the engine's cache in view (``before``: its keys before the call), exactly
        when the call added an entry, and that entry is what later calls check; without it, on every
        call of a key not yet seen, mirroring the engine's first-in-first-out eviction."""
        if self._engine_cache is not None and before is not None:
            added = [k for k in self._engine_cache if k not in before]
            if added:
                self._layouts[key], self._engine_keys[key] = layout, added[-1]
            return
        if key not in self._layouts:
            if len(self._layouts) >= GRAPH_CACHE_SIZE:
                self._layouts.pop(next(iter(self._layouts)))
            self._layouts[key] = layout

    def _run(self, q, k, v, scale: float, call: dict, workspace=None) -> torch.Tensor:
        workspace = self.workspace() if workspace is None else workspace
        if self.return_lse:
            try:
                return self._prefill(q, k, v, scale, workspace, return_lse=True, **call)[0]
            except Exception as exc:  # noqa: BLE001 - retried without the LSE, refusal recorded
                first = exc
            output = self._prefill(q, k, v, scale, workspace, return_lse=False, **call)[0]
            self.note_refusal(first)  # the LSE was the only difference: record it, fall back for good
            return output
        return self._prefill(q, k, v, scale, workspace, return_lse=False, **call)[0]

    def note_refusal(self, exc: BaseException) -> None:
        self.return_lse = False
        self.lse_refusal = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"

    def workspace(self) -> torch.Tensor:
        if self._workspace is None:
            self._workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=self.device)
        return self._workspace

    @contextlib.contextmanager
    def poisoned_output(self, family: str = "vision") -> Iterator[None]:
        old, self._poison = self._poison, family == "vision"
        try:
            yield
        finally:
            self._poison = old

    # -- the probe ------------------------------------------------------------------------------
    def probe(self) -> None:
        """SGLang's exact call on a tiny bf16 batch (2 ragged sequences plus a padded entry), so the
        return_lse verdict is known before any test runs."""
        from kernel_oracle.reference.vision_metadata import prepare_flashinfer_cudnn_metadata

        gen = torch.Generator().manual_seed(0)
        H, D = 2, 64
        q, k, v = (torch.randn(40, H, D, generator=gen).to(self.device, torch.bfloat16) for _ in range(3))
        md = prepare_flashinfer_cudnn_metadata([0, 17, 40], self.device, elem_per_token=H * D)
        self.flashinfer_cudnn_attention(q, k, v, None, None, None, forward_metadata=md)
        torch.cuda.synchronize(self.device)

    def describe(self) -> str:
        v = engine_versions()
        where = (f"FlashInfer {v.get('flashinfer')}, cuDNN frontend {v.get('cudnn_frontend')}, "
                 f"cuDNN backend {v.get('cudnn_backend', '?')}, torch {v['torch']} (CUDA {v['cuda']})")
        if self.lse_refusal is None:
            return f"{where}: SGLang's call (return_lse=True) runs as is"
        return (f"{where}: the engine refuses SGLang's call with return_lse=True ({self.lse_refusal}); "
                "this target runs return_lse=False instead (the same output tensor, no LSE)")


# what the engine lacks, by vision feature (Target.declines)
DECLINES = {"window_size": "FlashInfer's cudnn_batch_prefill_with_kv_cache takes no window",
            "s_aux": "FlashInfer's cudnn_batch_prefill_with_kv_cache takes no attention sinks"}


def _refuse_extras(kwargs: dict) -> None:
    """A window or sinks would be ignored by the engine: refuse them, naming the argument."""
    from kernel_oracle.reference.contracts import raise_contract

    window = kwargs.get("window_size")
    if window is not None and not (isinstance(window, (tuple, list)) and tuple(window) == (-1, -1)):
        raise_contract("vision.strict.unsupported_argument", field="window_size", got=repr(window),
                       why=DECLINES["window_size"] + "; pass window_size=(-1, -1)")
    if kwargs.get("s_aux") is not None:
        raise_contract("vision.strict.unsupported_argument", field="s_aux", got="a tensor",
                       why=DECLINES["s_aux"] + "; pass s_aux=None")


ENGINES: dict = {}


def cannot_run_here(device) -> str:
    """Why FlashInfer's cuDNN prefill cannot run on ``device`` here ("" when it can), known without
    importing anything (an engine folder is imported only where the target can run: Note [Engine versions])."""
    if torch.device(device).type != "cuda":
        return (f"FlashInfer's cuDNN prefill runs on CUDA GPUs only; device={device!s} "
                "(run with --device cuda on a GPU machine)")
    if not torch.cuda.is_available():
        return "no CUDA device is visible (torch.cuda.is_available() is False)"
    return ""


def shared_engine(device) -> tuple[Optional[FlashInferCudnn], str]:
    """``(engine, "")``: the one binding of FlashInfer's cuDNN prefill on ``device``, probed once and
    shared by every target that calls it (the engine's graph cache is per process, so its guard must
    be too); ``(None, why)`` when it cannot run here."""
    dev = torch.device(device)
    why = cannot_run_here(device)
    if why:
        return None, why
    try:
        from flashinfer.cudnn import cudnn_batch_prefill_with_kv_cache
    except Exception as exc:  # noqa: BLE001 - the reason is the report
        return None, (f"import flashinfer.cudnn failed: {type(exc).__name__}: {exc} "
                      "(install the wheels: bash scripts/flashinfer_wheels.sh install)")
    try:
        import cudnn  # noqa: F401 - the frontend the engine builds its graphs with
    except Exception as exc:  # noqa: BLE001
        return None, f"import cudnn (nvidia-cudnn-frontend) failed: {type(exc).__name__}: {exc}"
    key = str(dev)
    if key not in ENGINES:
        engine = FlashInferCudnn(dev, cudnn_batch_prefill_with_kv_cache, graph_cache=engine_graph_cache())
        try:
            engine.probe()
        except Exception as exc:  # noqa: BLE001 - even return_lse=False failed: nothing runs
            return None, (f"{engine.describe()}; the probe call failed: {type(exc).__name__}: "
                          f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
        ENGINES[key] = engine
    return ENGINES[key], ""


def flashinfer_cudnn_target(device, spec=None):
    """The :class:`~kernel_oracle.harness.targets.Target` of ``spec`` (``flashinfer-cudnn`` or
    ``flashinfer-cudnn@engine=VERSION``: Note [Engine versions]), or an unavailable one that says why."""
    name = str(spec) if spec is not None else "flashinfer-cudnn"
    version = dict(spec.configuration).get("engine") if spec is not None else None
    why = cannot_run_here(device) or (select_engine(version) if version else "")
    if why:
        return unavailable(name, why)
    engine, why = shared_engine(device)
    if engine is None:
        return unavailable(name, why)
    t = Target(name, {"vision": engine.flashinfer_cudnn_attention}, precision="ieee", strict=False,
               excluded_dtypes={"float32": ENGINE_DTYPES_REASON},
               poison=engine.poisoned_output,
               notes={op: "flashinfer-cudnn is a vision peer only" for op in FAMILY_OPS["lora"]},
               status=engine.describe, declines=dict(DECLINES), tiles={"vision": unknown_model(CUDNN_TILES)})
    t.reason = engine.describe()
    t.release = _flashinfer_release()
    return t


register_target("flashinfer-cudnn", lambda spec, device, sources: flashinfer_cudnn_target(device, spec),
                configuration={"engine": tuple(ENGINE_RELEASES)}, families=("vision",))
