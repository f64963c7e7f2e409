"""``flashinfer_cudnn_attention``: SGLang's vision attention forward on our Triton kernel.

Note [One contract, one resolver]
---------------------------------
The contract (resolution order, the six upstream messages, strict validation, element-offset
packed indptrs) is not re-implemented here: :func:`reference.vision_metadata.resolve_flashinfer_cudnn`
resolves every call into a :class:`~reference.vision_metadata.VisionPlan` of per-sequence token
starts for q/k, v and o and lengths, exactly as for the reference.  This module turns the plan into
the kernel's block table (Note [Schedule] in :mod:`kernels.vision._kernel`) and launches once.

Host synchronisation: the resolver copies ``sequence_lengths`` and the packed indptrs to the CPU
(the bounds check of the upstream contract and the strict checks need their values), and the block
table is built there and copied back.  That is one device->host sync per *distinct* metadata, as
in SGLang's own ``flashinfer_cudnn`` path (its bounds check does ``.item()``).  Every layer of a
vision tower passes the same metadata, so the entry point caches the resolved launch (Note [Launch
cache]); callers can also build a :class:`VisionLaunch` once with :func:`plan_attention` and call
:meth:`VisionLaunch.run` per layer.  Neither a cache hit nor ``run`` syncs.

Note [Launch cache]
-------------------
:func:`flashinfer_cudnn_attention` keeps the last :data:`LAUNCH_CACHE_SIZE` resolved launches (an LRU)
keyed on everything resolution reads: for each metadata tensor (``sequence_lengths`` and the packed
indptrs, and ``max_seqlen`` when it is a tensor) its ``id``, ``data_ptr``, shape, strides and
``_version`` (PyTorch's in-place modification counter, shared by views; a tensor object's dtype and
device change only through ``.data``, which also moves its address); an int ``max_seqlen`` by value;
the shapes, strides, dtypes and devices of q, k, v (never their data or address: offsets count from
each tensor's own pointer); ``softmax_scale``; ``window_size`` by value, ``s_aux`` as a metadata tensor
(identity and state: the launch reads it through its pointer) and whether an ``attention_mask`` was
passed (Note [Window and sinks] in :mod:`reference.vision_arguments`); the resolved ``strict``
(ambient setting included); ``fp32_precision``; ``config``; and the vision launch options in force
(:class:`~kernels.options.VisionOptions`: head-dim split, exact fp32 level, folded scale, direct
launches), which a launch is planned under and keeps.  The resolution (contract checks, strict
validation, anomalies, block table) is a pure function of these, so a hit skips it and launches with
no host sync; an in-place edit bumps ``_version`` and a new object has a new ``id``, so either misses
and is validated afresh.  A call that repeats the last launch (every layer of a tower after the first)
compares its key with that one's instead of hashing it (tuple equality compares each element by
identity first, so the options value of an ``options(...)`` block, or the defaults, cost one pointer
compare), and one that repeats it with a direct launcher is matched field by field without a key (Note
[Repeated call] in :mod:`kernels.vision._repeat`).  The entry holds the keyed metadata objects, so
their ``id`` cannot be reused by another object while the entry lives, and holds no q, k, v
(meta-device stand-ins keep their layout).  Errors are never cached.  Not seen: writes that bypass the
version counter (through ``.data``, DLPack or a raw pointer); call :func:`clear_launch_cache` after
such a write.  ``LaunchOptions.poison_outputs`` is not in the key: it only decides how a hit allocates
its output.

Memory safety with ``strict=False``: a sequence whose token range lies outside q, k, v or the
output (only reachable when strict validation is off) has unspecified output by contract; the
kernel skips it rather than touching foreign memory.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from kernel_oracle.reference.strict import resolve_strict
from kernel_oracle.reference.vision_metadata import (
    VisionAttentionMetadata,
    VisionPlan,
    check_attention_operands,
    prepare_flashinfer_cudnn_metadata,
    resolve_flashinfer_cudnn,
)

from ..options import VisionOptions, current_options
from . import _direct
from ._config import INTERPRETING, KernelConfig, default_config, has_tma, head_dim_split
from ._kernel import _vision_attn_fwd, attention_arguments, launch_attention
from ._repeat import RepeatedCall

__all__ = [
    "FP32_PRECISIONS",
    "VisionAttentionMetadata",
    "LAUNCH_CACHE_SIZE",
    "VisionLaunch",
    "clear_launch_cache",
    "flashinfer_cudnn_attention",
    "launch_cache_info",
    "plan_attention",
    "prepare_flashinfer_cudnn_metadata",
]

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# fp32 inputs: "ieee" = exact fp32 products (the default; faithful=True baseline), "tf32" = tensor
# cores in TF32 on NVIDIA GPUs (faithful="tf32" baseline).  The interpreter is exact in both.
FP32_PRECISIONS = ("ieee", "tf32")


def _check_runnable(plan: VisionPlan, precision: str) -> None:
    q, k, v = plan.q, plan.k, plan.v
    if q.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"the Triton vision kernel supports float16, bfloat16 and float32, got q of dtype {q.dtype}; "
                        "cast q, k, v or use reference.vision.flashinfer_cudnn_attention")
    check_attention_operands(q, k, v)  # the kernel cannot run on mismatched operands, strict or not
    if precision not in FP32_PRECISIONS:
        raise ValueError(f"fp32_precision={precision!r} is invalid; the only valid values are {FP32_PRECISIONS}")
    if q.device.type == "cpu" and not INTERPRETING:
        raise RuntimeError("CPU tensors need the Triton interpreter: set TRITON_INTERPRET=1 before importing "
                           "kernel_oracle.kernels.vision, or pass CUDA tensors")


def _kept(plan: VisionPlan) -> torch.Tensor:
    """bool (B,): the sequences with rows to compute (non-empty, in bounds, output defined)."""
    n = plan.lengths
    tq, tk, tv = plan.q.shape[0], plan.k.shape[0], plan.v.shape[0]
    qs, vs, os = plan.qk_start, plan.v_start, plan.o_start
    keep = (n > 0) & (qs >= 0) & (qs + n <= min(tq, tk)) & (vs >= 0) & (vs + n <= tv) & (os >= 0) & (os + n <= tq)
    if plan.all_undefined:  # output offsets upstream would write out of place: nothing is defined
        keep &= False
    return keep


def _block_table(plan: VisionPlan, block_m: int) -> torch.Tensor:
    """int32 (num_blocks, 5) rows [qk_tok, v_tok, o_tok, length, first query], longest first (CPU)."""
    n = plan.lengths
    qs, vs, os = plan.qk_start, plan.v_start, plan.o_start
    keep = _kept(plan)
    # numpy: torch.repeat_interleave costs ~10 ms per call on CPU tensors (torch 2.13)
    idx = np.flatnonzero(keep.numpy())
    n_np = n.numpy()
    idx = idx[np.argsort(-n_np[idx], kind="stable")]  # longest first
    nblk = (n_np[idx] + block_m - 1) // block_m
    seq = np.repeat(idx, nblk)
    first_blk = np.repeat(np.cumsum(nblk) - nblk, nblk)
    m0 = (np.arange(int(nblk.sum()), dtype=np.int64) - first_blk) * block_m
    table = np.stack([qs.numpy()[seq], vs.numpy()[seq], os.numpy()[seq], n_np[seq], m0], axis=1)
    return torch.from_numpy(np.ascontiguousarray(table, dtype=np.int32))


@dataclass(frozen=True)
class VisionLaunch:
    """A resolved call ready to launch: the plan, the device block table, the kernel config, the fp32
    precision and the vision launch options it was planned under (:class:`~kernels.options.VisionOptions`,
    used by every launch of it wherever it runs)."""

    plan: VisionPlan
    table: torch.Tensor
    num_blocks: int
    config: KernelConfig
    precision: str
    options: VisionOptions = VisionOptions()
    # the kernel this launch runs: "triton", or "gluon" (Note [Gluon Hopper kernel]; a call whose pointers TMA
    # cannot read runs the Triton kernel on the same 128-row block table, under ``config``)
    kernel: str = "triton"
    # [the direct launch function (``DirectLaunch.launch``, Note [Direct launch] in kernels.vision._direct),
    # False where there is none]: built after the first launch, shared by the launch cache's copy of this object
    _direct: list = field(default_factory=lambda: [None], compare=False, repr=False)

    def run(self, q: Optional[torch.Tensor] = None, k: Optional[torch.Tensor] = None,
            v: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Launch; q, k, v default to the planned ones and must otherwise match their shapes and
        strides (e.g. the next layer's activations under the same metadata).  No host sync.  The output
        is allocated full of NaN where ``LaunchOptions.poison_outputs`` is in force."""
        plan = self.plan
        q3, k3, v3 = plan.q, plan.k, plan.v
        if q is not None:
            q3, k3, v3 = (x.flatten(0, 1) if x.dim() == 4 else x for x in (q, k, v))
            for name, new, old in (("q", q3, plan.q), ("k", k3, plan.k), ("v", v3, plan.v)):
                if new.shape != old.shape or new.stride() != old.stride() or new.dtype != old.dtype:
                    raise ValueError(f"{name} has shape {tuple(new.shape)}, strides {new.stride()}, {new.dtype}; "
                                     f"this launch was planned for {tuple(old.shape)}, {old.stride()}, {old.dtype}; "
                                     "plan again with plan_attention")
        return self._launch(q3, k3, v3, current_options().poison_outputs)

    def _launch(self, q3: torch.Tensor, k3: torch.Tensor, v3: torch.Tensor, poison: bool) -> torch.Tensor:
        """Allocate the output (full of NaN with ``poison``) and launch on 3-D q, k, v of the planned
        layout (not checked here)."""
        plan = self.plan
        T, H, DV = q3.shape[0], q3.shape[1], v3.shape[2]
        if poison:
            out = torch.full((T, H, DV), float("nan"), dtype=q3.dtype, device=q3.device)
        elif DV == q3.shape[2]:  # q's shape: the cheapest allocation
            out = torch.empty_like(q3, memory_format=torch.contiguous_format)
        else:
            out = torch.empty((T, H, DV), dtype=q3.dtype, device=q3.device)
        if self.num_blocks and H:
            direct = self._direct[0]
            if not (direct and direct(q3, k3, v3, out)):
                gluon = self.kernel == "gluon" and not any(t.data_ptr() % 16 for t in (q3, k3, v3, out))
                if gluon:
                    kernel = _gluon().launch_gluon(q3, k3, v3, out, self.table, self.num_blocks, plan.scale)
                else:
                    kernel = launch_attention(q3, k3, v3, out, self.table, self.num_blocks, plan.scale, self.config,
                                              self.precision, self.options, window=plan.window, sinks=plan.sinks)
                if direct is None and gluon == (self.kernel == "gluon"):  # built from the planned kernel only
                    launcher = self._direct_launcher(kernel, q3, k3, v3, out)
                    self._direct[0] = launcher.launch if launcher is not None else False
        if plan.reshape_batch is not None:
            out = out.unflatten(0, (plan.reshape_batch, -1))
        return out

    def _direct_launcher(self, kernel, q3, k3, v3, out) -> Optional[_direct.DirectLaunch]:
        """The direct launcher of this launch's kernel (checked bit for bit once per compiled kernel),
        or None: under the interpreter, during CUDA-graph capture (the check syncs), or switched off
        (``VisionOptions.direct_launch``)."""
        if (not self.options.direct_launch or INTERPRETING or kernel is None or not q3.is_cuda
                or torch.cuda.is_current_stream_capturing()):
            return None
        plan = self.plan

        def jit_launch(o):
            if self.kernel == "gluon":
                return _gluon().launch_gluon(q3, k3, v3, o, self.table, self.num_blocks, plan.scale)
            return launch_attention(q3, k3, v3, o, self.table, self.num_blocks, plan.scale, self.config,
                                    self.precision, self.options, window=plan.window, sinks=plan.sinks)

        def make():
            if self.kernel == "gluon":
                G = _gluon()
                grid, args, _ = G.gluon_arguments(q3, k3, v3, out, self.table, self.num_blocks, plan.scale)
                return _direct.DirectLaunch(kernel, grid, args, G._gluon_attn_fwd.arg_names, 4)
            grid, args, _ = attention_arguments(q3, k3, v3, out, self.table, self.num_blocks, plan.scale,
                                                self.config, self.precision, self.options, window=plan.window,
                                                sinks=plan.sinks)
            return _direct.DirectLaunch(kernel, grid, args, _vision_attn_fwd.arg_names, 4)

        def run_both(direct):
            jit_out, direct_out = torch.full_like(out, float("nan")), torch.full_like(out, float("nan"))
            jit_launch(jit_out)
            return jit_out, (direct_out if direct(q3, k3, v3, direct_out) else None)

        return _direct.verified(kernel, make, run_both)


def plan_attention(q, k, v, cu_seqlens, bsz=None, seq_len=None, softmax_scale=None, forward_metadata=None,
                   **kwargs) -> VisionLaunch:
    """Resolve (contract + strict validation) and build the block table; see :class:`VisionLaunch`.

    Takes the forward's arguments; extra keywords: ``strict`` (None = the ambient setting),
    ``fp32_precision`` ("ieee" or "tf32"), ``config`` (a :class:`KernelConfig` of the Triton kernel, for
    benchmarks; it plans the Triton kernel whatever ``VisionOptions.kernel`` says).  The
    launch keeps the vision options in force (``with options(vision={...}):``, :mod:`kernels.options`).
    """
    return _plan(q, k, v, cu_seqlens, softmax_scale, forward_metadata, kwargs, current_options().vision)


def _plan(q, k, v, cu_seqlens, softmax_scale, forward_metadata, kwargs: dict, vision: VisionOptions) -> VisionLaunch:
    """:func:`plan_attention` under the vision options ``vision``."""
    kwargs = dict(kwargs)
    strict = kwargs.pop("strict", None)
    precision = kwargs.pop("fp32_precision", "ieee")
    config = kwargs.pop("config", None)
    plan = resolve_flashinfer_cudnn(q, k, v, cu_seqlens, softmax_scale, forward_metadata, strict=strict, **kwargs)
    _check_runnable(plan, precision)
    kernel = "triton"
    if vision.kernel == "gluon" and config is None:
        G = _gluon()
        if not G.gluon_unsupported(plan.q, plan.k, plan.v, plan.window, plan.sinks):
            kernel = "gluon"  # Note [Gluon Hopper kernel]: 128 query rows a block, the Triton kernel's config beside
            config = KernelConfig(G.GLUON_BLOCK_M, 64, 8, 3)
    if config is None:
        d_tiles = sum(head_dim_split(plan.q.shape[2], False))
        dv_tiles = sum(head_dim_split(plan.v.shape[2], False))
        splits = any(head_dim_split(x, True)[1] > 0 for x in (plan.q.shape[2], plan.v.shape[2]))
        config = default_config(d_tiles, dv_tiles, plan.q.element_size(), has_tma(plan.q.device), splits)
    table = _block_table(plan, config.block_m)
    return VisionLaunch(plan, table.to(plan.q.device), int(table.shape[0]), config, precision, vision, kernel)


def _gluon():
    """:mod:`kernels.vision._gluon`, imported where a launch asks for it (it needs triton's Gluon)."""
    from . import _gluon as module

    return module


def flashinfer_cudnn_attention(q, k, v, cu_seqlens, bsz, seq_len, softmax_scale=None, forward_metadata=None,
                               **kwargs) -> torch.Tensor:
    """SGLang's ``VisionFlashInferAttention.forward`` contract on the Triton kernel.

    q, k (T,H,D) or (b,s,H,D); v (T,H,Dv) (a strided view is fine); returns (T,H,Dv) (4-D in,
    4-D out) in q's dtype.  Tokens covered by no sequence are unspecified.  Beside SGLang's kwargs
    (``sequence_lengths``, ``max_seqlen``) accepts ``strict=``, ``fp32_precision=`` and ``config=``;
    launches under the options in force (:mod:`kernels.options`).
    """
    global _LAST, _REPEAT
    opts = current_options()
    repeat = _REPEAT
    if repeat is not None:  # Note [Repeated call]: the last keyed call again, checked field by field
        out = repeat.call(q, k, v, cu_seqlens, softmax_scale, forward_metadata, kwargs, opts)
        if out is not None:
            return out
    vision = opts.vision
    keyed = _cache_key(q, k, v, cu_seqlens, softmax_scale, forward_metadata, kwargs, vision)
    entry = None
    if keyed is not None:
        last_key, last_entry = _LAST
        repeated = keyed[0] == last_key  # the same launch as the last call (every layer of a tower): no hashing
        if repeated:
            entry = last_entry
            _CACHE_STATS["hits"] += 1
        else:
            with _CACHE_LOCK:
                try:
                    entry = _LAUNCH_CACHE.get(keyed[0])
                except TypeError:  # an unhashable option (e.g. a config list): the uncached path
                    keyed = None
                if entry is not None:
                    _LAUNCH_CACHE.move_to_end(keyed[0])
                    _CACHE_STATS["hits"] += 1
                    _LAST = (keyed[0], entry)
    if entry is not None:
        q3, k3, v3 = (x.flatten(0, 1) for x in (q, k, v)) if q.dim() == 4 else (q, k, v)  # as the resolver does
        out = entry.launch._launch(q3, k3, v3, opts.poison_outputs)
        # a repeated launch is remembered, so that the next repeat is matched without a key
        _REPEAT = RepeatedCall.remember(entry.launch._direct[0], q, k, v, cu_seqlens, softmax_scale,
                                        forward_metadata, kwargs, out, _CACHE_STATS, opts) if repeated else None
        return out
    _REPEAT = None
    launch = _plan(q, k, v, cu_seqlens, softmax_scale, forward_metadata, kwargs, vision)
    out = launch._launch(launch.plan.q, launch.plan.k, launch.plan.v, opts.poison_outputs)
    if keyed is None:  # something resolution would reject (it raised above) or we cannot key: not cached
        return out
    key, keep = keyed
    stored = _LaunchEntry(_without_activations(launch), keep)
    with _CACHE_LOCK:
        _CACHE_STATS["misses"] += 1
        _LAUNCH_CACHE[key] = stored
        _LAUNCH_CACHE.move_to_end(key)
        while len(_LAUNCH_CACHE) > max(int(LAUNCH_CACHE_SIZE), 0):
            _LAUNCH_CACHE.popitem(last=False)
        _LAST = (key, stored) if key in _LAUNCH_CACHE else (None, None)
    return out


# ---------------------------------------------------------------------------------------------
# the launch cache: see Note [Launch cache]

# how many resolved launches flashinfer_cudnn_attention keeps (least recently used dropped first)
LAUNCH_CACHE_SIZE = 64


@dataclass(frozen=True)
class _LaunchEntry:
    launch: VisionLaunch  # plan with meta-device q, k, v (layouts only, no memory held)
    keep: tuple  # the metadata objects whose id() is in the key: held so that no other object gets it


_LAUNCH_CACHE: "OrderedDict[tuple, _LaunchEntry]" = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_STATS = {"hits": 0, "misses": 0}
# (key, entry) of the last hit or insert, the most recently used entry (so never the one evicted): a
# call repeating the last launch compares its key with this one instead of hashing it
_LAST: tuple = (None, None)
# the last keyed call, when it launched directly (Note [Repeated call] in kernels.vision._repeat)
_REPEAT: Optional[RepeatedCall] = None


def clear_launch_cache() -> None:
    """Drop every cached launch and reset the hit/miss counters."""
    global _LAST, _REPEAT
    with _CACHE_LOCK:
        _LAUNCH_CACHE.clear()
        _LAST = (None, None)
        _REPEAT = None
        _CACHE_STATS.update(hits=0, misses=0)


def launch_cache_info() -> dict:
    """``{"size", "maxsize", "hits", "misses"}`` of the launch cache."""
    with _CACHE_LOCK:
        return {"size": len(_LAUNCH_CACHE), "maxsize": int(LAUNCH_CACHE_SIZE), **_CACHE_STATS}


def _state(t: torch.Tensor) -> tuple:
    """Identity and state of a metadata tensor: a new object or an in-place edit changes it."""
    return (id(t), t.data_ptr(), t.shape, t.stride(), t.dtype, t.device, t._version)


def _cache_key(q, k, v, cu_seqlens, softmax_scale, forward_metadata, kwargs,
               vision: VisionOptions) -> Optional[tuple]:
    """(key, objects to keep alive), or None when the call must take the uncached path (which
    raises the contract's error, if any: the key never decides what is valid).  ``vision``: the vision
    launch options in force, the key's last element (Note [Launch cache])."""
    try:
        if forward_metadata is not None and getattr(forward_metadata, "packed_indptrs", None) is not None:
            sequence_lengths = forward_metadata.sequence_lengths
            packed = forward_metadata.packed_indptrs
            max_seqlen = forward_metadata.flashinfer_max_seqlen
        elif "sequence_lengths" in kwargs and "max_seqlen" in kwargs:
            sequence_lengths, packed, max_seqlen = kwargs["sequence_lengths"], cu_seqlens, kwargs["max_seqlen"]
        else:
            return None
        Tensor = torch.Tensor
        if not (isinstance(q, Tensor) and isinstance(k, Tensor) and isinstance(v, Tensor)
                and isinstance(sequence_lengths, Tensor) and isinstance(packed, Tensor)):
            return None
        if softmax_scale is not None and not isinstance(softmax_scale, (int, float)):
            return None
        keep: tuple = (sequence_lengths, packed)
        sinks = kwargs.get("s_aux")
        if isinstance(sinks, torch.Tensor):
            extras = (kwargs.get("window_size"), _state(sinks), kwargs.get("attention_mask") is None)
            keep += (sinks,)
        else:
            extras = (kwargs.get("window_size"), sinks, kwargs.get("attention_mask") is None)
        if isinstance(max_seqlen, torch.Tensor):
            mx = ("tensor",) + _state(max_seqlen)
            keep += (max_seqlen,)
        elif isinstance(max_seqlen, int):
            mx = ("int", int(max_seqlen))
        else:
            return None
        # one flat tuple, written out (a warm call's whole host budget is ~10 us): the two metadata
        # tensors' identity and state (a tensor object's dtype and device change only through ``.data``,
        # which also changes its address), max_seqlen, then q, k, v's layouts (a torch.Size hashes as a tuple),
        # the keywords and the options
        sl, pk = sequence_lengths, packed
        key = (id(sl), sl.data_ptr(), sl.shape, sl.stride(), sl._version,
               id(pk), pk.data_ptr(), pk.shape, pk.stride(), pk._version, mx,
               q.shape, q.stride(), q.dtype, q.device, k.shape, k.stride(), k.dtype, k.device,
               v.shape, v.stride(), v.dtype, v.device,
               None if softmax_scale is None else float(softmax_scale), extras,
               resolve_strict(kwargs.get("strict")), kwargs.get("fp32_precision", "ieee"), kwargs.get("config"),
               vision)
    except Exception:  # noqa: BLE001 - e.g. a tensor without storage, an unhashable option: resolve normally
        return None
    return key, keep


def _without_activations(launch: VisionLaunch) -> VisionLaunch:
    """The launch with q, k, v replaced by meta-device tensors of the same layout (no memory held)."""
    plan = launch.plan
    meta = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta") for t in (plan.q, plan.k, plan.v)]
    return dataclasses.replace(launch, plan=dataclasses.replace(plan, q=meta[0], k=meta[1], v=meta[2]))
