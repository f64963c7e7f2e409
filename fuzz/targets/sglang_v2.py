"""SGLang's third kv_b code path, the ``triton_v2`` LoRA backend's absorbed-MLA correction, loaded standalone.

Note [The v2 kv_b path]
-----------------------
From 0.5.23 an SGLang server started with ``--lora-backend triton_v2`` does not call the kv_b files
of :mod:`.sglang_wheel` for absorbed MLA: ``sglang.srt.lora.utils.kv_b_lora_correction`` answers
``"v2"`` and the DeepSeek MLA forward calls ``sglang/srt/lora/dense/mla_correction.py`` instead:
``prepare_q_correction(attn, q_nope)`` / ``prepare_v_correction(attn, attn_output)`` run the shrink
(``grouped_lora_a``) into a bridge, ``apply_correction(prepared, out)`` the expand
(``grouped_lora_b``, added in place).  Rows are (token, head) pairs sorted by bucket
``slot * H + head`` (``build_route`` of ``sglang/kernels/ops/lora/common/routing.py``); the slot is
per token, ``-1`` for a token no adapter serves; ``seg_indptr``, ``max_len`` and ``seg_lens`` are
never read.  The decode phase (block 16) runs the shrink on a side stream while the caller's stream
goes on (an event pair orders them); prefill (block 64) runs on one stream.  The math is the q-side
and v-side of the kv_b ops (docs/kernels_lora.md), so the target has the same six ops:

=================  ===========================================================================
op                 what the target runs (the release's own code, through one ``attn`` stand-in)
=================  ===========================================================================
``q_side_fused``   ``prepare_q_correction`` then ``apply_correction``, as the MLA forward does
``v_side_fused``   ``prepare_v_correction`` then ``apply_correction``
``step_a_q/_v``    the prepare alone; the result is its bridge, ``(S, H, R)``
``step_b_q/_v``    ``apply_correction`` of a prepared value whose bridge is the op's input (the
                   release's ``_Prepared`` with the weight view and route ``_prepare`` would make)
=================  ===========================================================================

The per-token slots come from the batch as the reference routes it: the rows of segment ``b``
(``permutation`` applied) get ``weight_indices[b]``, every other token ``-1``; the segments are
``num_segments or bs`` (every one under CUDA graph).  The release's backend builds the same
mapping from its requests; the target does not run that (it has no permutation).  The phase is
``batch_info.is_prefill`` (0.5.23's field; SGLang sets it from the forward mode).  One runner
(``DenseLoraRunner`` with its ``LoraWorkspace``) per device and slot count serves every call, as
one serves a server's whole life, so buffers and routes of an earlier, larger batch are there.

What the target does not have: the kv_b files' ``ValueError`` for a batch without ``max_len`` and
``seg_lens`` (the v2 path reads neither): it declines that contract (``Target.declines``).

Loading: the files under ``sglang/srt/lora/dense/``, ``sglang/kernels/ops/lora/common/`` and
``sglang/srt/lora/workspace.py`` are the release's own modules (:data:`V2_FOLDERS`), executed by
:func:`~.sglang_wheel.load_kernel_module`; the plan tables beside ``plan.py`` are extracted with it.
They import ``msgspec`` and ``pydantic`` (install them: ``pip install msgspec pydantic``; the
target says so when they are missing).  The other ``sglang`` names get stand-ins:

=================================  ======================================================================
name (module)                      stand-in
=================================  ======================================================================
``Phase``,                         the release's own definitions, taken out of its ``utils.py`` with
``architecture_for_capability``    :mod:`ast` (the module imports SGLang's runtime)
(``sglang.srt.lora.utils``)
``_align_block_size_jit``          the release's own pure-torch aligner ``_align_block_size_torch``
(``...lora.moe.virtual_experts``)  (its fallback where the JIT module cannot load), run eagerly: the
                                   CUDA JIT (``moe_align_kernel.cu`` built by tvm-ffi) is not loaded,
                                   so routes of 513 - 16,383 pairs are aligned by torch, not that kernel
``envs`` (``sglang.srt.environ``)  no ``SGLANG_LORA_DENSE_CONFIG_DIR``: the plan tables of the wheel
``is_arch_support_pdl``            the configuration's ``pdl``, else the hardware (Note [SGLang switches])
=================================  ======================================================================

On the CPU (Triton interpreter) two things of the release refuse any device but CUDA, and the
target changes exactly those: the decode plan runs without its side stream (``Overlap.NONE``;
streams do not exist there), and ``slice_geometry``'s table is built by the release's own
``_build_geometry`` with the capture check answered "not capturing".  The record says so.

Identity: :func:`v2_identity` hashes the syntax trees of every file the path loads and of the
extracted stand-in definitions, as :func:`~.sglang_wheel.kernel_identity` does for the kv_b files.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import importlib.util
import threading
import types
import typing
from typing import Optional

import torch

from kernel_oracle.reference.lora_routing import num_segments

from .sglang_switches import ReleaseConfiguration
from .sglang_wheel import STAND_INS, LoaderError, ReleaseFiles, code_identity, import_closure

__all__ = ["MISSING_PACKAGES_HINT", "V2_DECLINES", "V2_ENTRY", "V2Corrections", "V2Primitives", "load_v2", "locate_v2",
           "token_slots", "v2_files", "v2_identity", "v2_primitives", "v2_slim_files"]

V2_ENTRY = "sglang/srt/lora/dense/mla_correction.py"
V2_MARK = "def prepare_q_correction("
# the folders (and file) whose modules the v2 path loads as the release's own code
V2_FOLDERS = ("sglang/srt/lora/dense/", "sglang/kernels/ops/lora/common/", "sglang/srt/lora/workspace.py")
PLAN_TABLES = "sglang/srt/lora/dense/configs/"
RUNNER_FILE = "runner.py"  # beside the entry file: the DenseLoraRunner the corrections read through ``attn``
UTILS_FILE = "sglang/srt/lora/utils.py"
ALIGNER_FILE = "sglang/kernels/ops/lora/moe/virtual_experts.py"
ALIGNER = "_align_block_size_torch"
THIRD_PARTY = ("msgspec", "pydantic")
MISSING_PACKAGES_HINT = "pip install msgspec pydantic (SGLang's v2 LoRA files import them)"
# what the target declines (Note [Targets] in harness.targets): the kv_b files' upstream contract
V2_DECLINES = {"lora.missing_max_len": "the v2 path reads neither max_len nor seg_lens: it has no such error"}
CPU_NOTE = ("on the CPU the decode plan runs without its side stream and the expand's slice table is built on the "
            "host by the release's _build_geometry (the release refuses both off CUDA)")
ALIGNER_NOTE = ("routes of 513-16,383 (token, head) pairs are aligned by the release's pure-torch "
                "_align_block_size_torch (eager), not its CUDA JIT module")


def locate_v2(release: ReleaseFiles) -> Optional[str]:
    """The release's ``mla_correction.py`` (the v2 entry file), or None where it has no v2 path."""
    if V2_ENTRY in release.names:
        return V2_ENTRY
    for name in sorted(n for n in release.names if n.startswith("sglang/") and "lora" in n and n.endswith(".py")):
        try:
            text = release.read(name)
        except (OSError, UnicodeDecodeError, KeyError):
            continue
        if V2_MARK in text and "def apply_correction(" in text:
            return name
    return None


def _own_file(release: ReleaseFiles, module: str) -> Optional[str]:
    """The file ``from <module> import ...`` loads as the release's own module on the v2 path."""
    file = module.replace(".", "/") + ".py"
    if file not in release.names:
        return None
    return file if any(file.startswith(f) or file == f for f in V2_FOLDERS) else None


def v2_files(release: ReleaseFiles, entry: str) -> list[str]:
    """``entry``, the runner beside it, and every file of ``release`` they load as a module, recursively
    (module-level and function-level ``from sglang... import``), in load order."""
    runner = entry.rsplit("/", 1)[0] + "/" + RUNNER_FILE
    return import_closure(release, [entry] + ([runner] if runner in release.names else []), _own_file)


# ---- stand-ins -----------------------------------------------------------------------------------

def _definitions(release: ReleaseFiles, file: str, names: tuple, *, strip_decorators: bool = False) -> list:
    """The top-level definitions ``names`` of ``file`` and its non-``sglang`` import statements, as
    syntax trees (a definition the file lacks is a :class:`LoaderError`)."""
    if file not in release.names:
        raise LoaderError(f"sglang {release.version} has no {file}, which the v2 path's stand-ins read")
    tree = ast.parse(release.read(file))
    found = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name in names}
    missing = [n for n in names if n not in found]
    if missing:
        raise LoaderError(f"sglang {release.version}: {file} defines no {', '.join(missing)}; the v2 loader takes "
                          f"them from there")
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
               and not any(m.split(".")[0] == "sglang" for m in _import_modules(n))]
    defs = [found[n] for n in names]
    if strip_decorators:
        for d in defs:
            d.decorator_list = []
    return imports + defs


def _import_modules(node) -> list:
    if isinstance(node, ast.ImportFrom):
        return [node.module or ""] if node.level == 0 else ["."]
    return [a.name for a in node.names]


def _extracted(release: ReleaseFiles, file: str, names: tuple, *, strip_decorators: bool = False) -> types.ModuleType:
    """A module holding ``names`` of ``file``, compiled from the release's own file (tracebacks point at
    its lines); cached per release."""
    key = ("v2-extracted", file, names, strip_decorators)
    if key not in release.loaded:
        body = _definitions(release, file, names, strip_decorators=strip_decorators)
        tree = ast.Module(body=body, type_ignores=[])
        ast.fix_missing_locations(tree)
        mod = types.ModuleType(f"_kernel_oracle_sglang_extracted.{file[:-3].replace('/', '.')}")
        mod.__dict__["__kernel_oracle_origin__"] = f"{', '.join(names)} of {file} (sglang {release.version})"
        exec(compile(tree, str(release.disk(file)), "exec"), mod.__dict__)  # noqa: S102 - the release's own code
        release.loaded[key] = mod
    return release.loaded[key]


def _utils_name(name: str):
    def factory(release: ReleaseFiles, config: ReleaseConfiguration, module: str):
        return getattr(_extracted(release, UTILS_FILE, ("Phase", "architecture_for_capability")), name)
    return factory


def _aligner(release: ReleaseFiles, config: ReleaseConfiguration, module: str):
    torch_aligner = getattr(_extracted(release, ALIGNER_FILE, (ALIGNER,), strip_decorators=True), ALIGNER)

    def _align_block_size_jit(topk_ids, block_size, num_experts, scratch=None, **options):
        if options:  # the route builder passes none; a release that does has changed the contract
            raise LoaderError(f"the v2 aligner stand-in takes no {sorted(options)}; the release passes options its "
                              f"pure-torch aligner does not have")
        return torch_aligner(topk_ids, block_size, num_experts)

    return _align_block_size_jit


class _Unset:
    """An ``envs`` switch SGLang reads with ``.get()``: unset."""

    def get(self):
        return None


def _envs(release: ReleaseFiles, config: ReleaseConfiguration, module: str):
    return types.SimpleNamespace(SGLANG_LORA_DENSE_CONFIG_DIR=_Unset())


V2_STAND_INS = {
    "Phase": _utils_name("Phase"),
    "architecture_for_capability": _utils_name("architecture_for_capability"),
    "_align_block_size_jit": _aligner,
    "envs": _envs,
    "is_arch_support_pdl": STAND_INS["is_arch_support_pdl"],
}


def v2_identity(release: ReleaseFiles, entry: str) -> str:
    """The identity of the v2 path (Note): the syntax trees of every file it loads, with its ``from
    sglang... import`` statements reduced to the names they import, and of the extracted stand-ins."""
    key = ("v2-identity", entry)
    if key not in release.loaded:
        nodes, names = [], []
        for file in v2_files(release, entry):
            for node in ast.parse(release.read(file)).body:
                if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("sglang"):
                    names.extend(a.name for a in node.names)
                else:
                    nodes.append(node)
        nodes += _definitions(release, UTILS_FILE, ("Phase", "architecture_for_capability"))
        nodes += _definitions(release, ALIGNER_FILE, (ALIGNER,), strip_decorators=True)
        release.loaded[key] = code_identity(nodes, ",".join(sorted(set(names))))
    return release.loaded[key]


def v2_slim_files(release: ReleaseFiles) -> list:
    """Every file of ``release`` the v2 path reads (its modules, the plan tables, the files its
    stand-ins are taken from): what a slim wheel keeps; empty where the release has no v2 path."""
    entry = locate_v2(release)
    if entry is None:
        return []
    return (v2_files(release, entry) + [n for n in release.names if n.startswith(PLAN_TABLES)]
            + [f for f in (UTILS_FILE, ALIGNER_FILE) if f in release.names])


# ---- loading -------------------------------------------------------------------------------------

def _missing_packages() -> list:
    return [m for m in THIRD_PARTY if importlib.util.find_spec(m) is None]


def load_v2(release: ReleaseFiles, config: ReleaseConfiguration = ReleaseConfiguration()) -> types.ModuleType:
    """The release's ``mla_correction`` module, loaded standalone (Note); :class:`LoaderError` in one
    line when the release has no v2 path, a package it imports is missing, or a file fails."""
    entry = locate_v2(release)
    if entry is None:
        raise LoaderError(f"sglang {release.version} has no triton_v2 kv_b path (no {V2_ENTRY}: it ships from 0.5.23)")
    missing = _missing_packages()
    if missing:
        raise LoaderError(f"sglang {release.version}'s v2 path imports {', '.join(missing)}, which is not installed "
                          f"here; {MISSING_PACKAGES_HINT}")
    for name in release.names:  # plan.py reads its tables from the folder beside it
        if name.startswith(PLAN_TABLES):
            release.disk(name)
    from .sglang_wheel import load_kernel_module

    runner = entry.rsplit("/", 1)[0] + "/" + RUNNER_FILE
    if runner not in release.names:
        raise LoaderError(f"sglang {release.version} has no {runner} beside its {entry}; the v2 path's runner lives "
                          f"there")
    return load_kernel_module(release, entry, "v2", config, own_file=_own_file, stand_ins=V2_STAND_INS,
                              also=(runner,))


# ---- the adapter ---------------------------------------------------------------------------------

def token_slots(batch_info, num_tokens: int, device) -> torch.Tensor:
    """int32 ``(num_tokens,)``: the slot of each token as the batch routes it (Note), ``-1`` where no
    segment routes the token.  Segment bounds come from ``seg_indptr``; a bound or permutation entry
    outside the tokens raises ``IndexError`` naming the field."""
    n = num_segments(batch_info)
    out = torch.full((num_tokens,), -1, dtype=torch.int32)
    if n == 0 or num_tokens == 0:
        return out.to(device)
    indptr = batch_info.seg_indptr.detach().to("cpu", torch.int64)[: n + 1]
    slots = batch_info.weight_indices.detach().to("cpu", torch.int64)[:n]
    lens = (indptr[1:] - indptr[:-1]).clamp(min=0)
    seg = torch.repeat_interleave(torch.arange(n), lens)
    within = torch.arange(int(lens.sum())) - torch.repeat_interleave(torch.cumsum(lens, 0) - lens, lens)
    logical = indptr[:-1][seg] + within
    perm = getattr(batch_info, "permutation", None)
    if perm is not None:
        perm = perm.detach().to("cpu", torch.int64)
        bad = (logical < 0) | (logical >= perm.numel())
        if bool(bad.any()):
            raise IndexError(f"batch_info.seg_indptr routes logical row {int(logical[bad][0])}, outside the "
                             f"{perm.numel()} entries of permutation")
        logical = perm[logical]
    bad = (logical < 0) | (logical >= num_tokens)
    if bool(bad.any()):
        raise IndexError(f"batch_info routes row {int(logical[bad][0])}, outside the {num_tokens} tokens of the input")
    out[logical] = slots[seg].to(torch.int32)
    return out.to(device)


class _HostCuda:
    """``torch.cuda`` as the release's ``_build_geometry`` sees it on the CPU: no device to enter, no
    capture under way."""

    @staticmethod
    def device(device):
        return contextlib.nullcontext()

    @staticmethod
    def is_current_stream_capturing() -> bool:
        return False


class _HostTorch(types.ModuleType):
    def __init__(self):
        super().__init__("torch")

    def __getattr__(self, name):
        return _HostCuda if name == "cuda" else getattr(torch, name)


class V2Primitives(typing.NamedTuple):
    """The grouped kernels of one release's v2 path, as the release defines them (:func:`v2_primitives`)."""

    build_route: typing.Callable  # routing.build_route(token_slots, *, group_ids, groups_per_slot, max_loras, ...)
    grouped_lora_a: typing.Callable  # lora_a.grouped_lora_a(input, weight, output, routing, *, config, ...)
    grouped_lora_b: typing.Callable  # lora_b.grouped_lora_b(bridge, weight, destination, routing, *, geometry, ...)
    slice_geometry: typing.Callable  # lora_b.slice_geometry(offsets, block_size_n, device, out_offsets=None)


def v2_primitives(module: types.ModuleType, device) -> V2Primitives:
    """``build_route``, ``grouped_lora_a`` and ``grouped_lora_b`` of the release whose v2 module
    :func:`load_v2` gave, and the ``slice_geometry`` that ``grouped_lora_b`` needs.  Off CUDA the
    release's ``slice_geometry`` refuses the device, so the one given builds the same table with the
    release's own ``_geometry_inputs`` / ``_build_geometry`` on the host (as the target does, Note)."""
    routing, lora_a, lora_b = (_sibling(module, stem) for stem in ("routing", "lora_a", "lora_b"))
    geometry = lora_b.slice_geometry
    if torch.device(device).type != "cuda":
        build = types.FunctionType(lora_b._build_geometry.__code__, {**lora_b.__dict__, "torch": _HostTorch()},
                                   "_build_geometry")

        def geometry(offsets, block_size_n, device, out_offsets=None):
            rows, columns = lora_b._geometry_inputs(offsets, block_size_n, out_offsets)
            return build(rows, block_size_n, torch.device(device), columns)

    return V2Primitives(routing.build_route, lora_a.grouped_lora_a, lora_b.grouped_lora_b, geometry)


class V2Corrections:
    """The six kv_b ops over one release's v2 module (Note), with SGLang's signatures."""

    def __init__(self, module: types.ModuleType, device, config: ReleaseConfiguration = ReleaseConfiguration()):
        self.module = module
        self.device = torch.device(device)
        self.config = config
        self._lock = threading.Lock()
        self._runners: dict = {}
        runner_module = _sibling(module, "runner")
        self._runner_cls = runner_module.DenseLoraRunner
        self._workspace_cls = runner_module.LoraWorkspace
        self._phase = self.phase_type = runner_module.Phase
        self._prepare = module._prepare
        self._apply = module.apply_correction
        if self.device.type != "cuda":
            self._prepare, self._apply = self._host_functions()

    def _host_functions(self):
        """Copies of ``_prepare`` / ``apply_correction`` for the CPU (Note): the decode plan without its
        side stream, the slice table built on the host."""
        mod = self.module
        plan_module = _sibling(mod, "plan")
        lora_b = _sibling(mod, "lora_b")
        overlap_none = plan_module.Overlap.NONE

        def host_plan(phase):
            return dataclasses.replace(mod._mla_plan(phase), overlap=overlap_none)

        build = types.FunctionType(lora_b._build_geometry.__code__, {**lora_b.__dict__, "torch": _HostTorch()},
                                   "_build_geometry")

        def host_slice_geometry(offsets, block_size_n, device, out_offsets=None):
            rows, columns = lora_b._geometry_inputs(offsets, block_size_n, out_offsets)
            return build(rows, block_size_n, device, columns)

        prepare = types.FunctionType(mod._prepare.__code__, {**mod.__dict__, "_mla_plan": host_plan}, "_prepare")
        apply = types.FunctionType(mod.apply_correction.__code__,
                                   {**mod.__dict__, "slice_geometry": host_slice_geometry}, "apply_correction")
        return prepare, apply

    # -- the runner and the attention module the corrections read --

    def _runner(self, batch_info, num_tokens: int, num_slots: int):
        key = (self.device, num_slots)
        runner = self._runners.get(key)
        if runner is None:
            runner = self._runner_cls(self._workspace_cls(), max_loras=num_slots, device=self.device)
            self._runners[key] = runner
        phase = self._phase.PREFILL if getattr(batch_info, "is_prefill", False) else self._phase.DECODE
        runner.begin_batch(token_slots=token_slots(batch_info, num_tokens, self.device),
                           lora_ranks=batch_info.lora_ranks, scalings=batch_info.scalings, num_tokens=num_tokens,
                           phase=phase, graph_mode=bool(getattr(batch_info, "use_cuda_graph", False)))
        return runner

    def _attn(self, runner, A_buf, B_buf, qk: int, vd: int):
        backend = types.SimpleNamespace(runner=runner, name="triton_v2")
        layer = types.SimpleNamespace(lora_backend=backend, A_buffer=A_buf, B_buffer=B_buf, set_lora=True,
                                      lora_active=True)
        return types.SimpleNamespace(kv_b_proj=layer, qk_nope_head_dim=qk, v_head_dim=vd)

    def _prepared(self, runner, side: str, bridge, weight, heads: int):
        """The release's ``_Prepared`` for an apply of ``bridge`` (step B alone): the plan, route and weight
        view ``_prepare`` builds, the bridge the op's input."""
        tokens = bridge.shape[0]
        plan = self.module._mla_plan(runner.phase)
        route = runner.pair_route(heads, plan.block_size, num_tokens=tokens)
        flat = bridge.reshape(tokens * heads, bridge.shape[-1])
        return self.module._Prepared(runner, flat, weight, route, plan, heads, side, flat, None)

    def _joined(self, prepared):
        """The bridge of ``prepared``, ordered after its side stream (what ``apply_correction`` waits for)."""
        if prepared.done is not None:
            torch.cuda.current_stream(prepared.bridge.device).wait_event(prepared.done)
        return prepared.bridge

    # -- the ops --

    def step_a_q_fwd(self, q_nope, B_buf, batch_info, full_K_per_head):
        with self._lock:
            S, H, qk = q_nope.shape
            runner = self._runner(batch_info, S, B_buf.shape[0])
            # _prepare takes the expand's view of A too (never read by the shrink): one column
            unread_a = torch.zeros(B_buf.shape[0], B_buf.shape[2], 1, dtype=B_buf.dtype, device=B_buf.device)
            prepared = self._prepare(self._attn(runner, unread_a, B_buf, qk, full_K_per_head - qk), q_nope, "q")
            bridge = self._joined(prepared)
            return bridge.view(S, H, bridge.shape[-1]).clone()

    def step_a_v_fwd(self, attn_output, A_buf, batch_info):
        with self._lock:
            S, H, _ = attn_output.shape
            runner = self._runner(batch_info, S, A_buf.shape[0])
            # _prepare takes the expand's view of B too (never read by the shrink): one column per head
            unread_b = torch.zeros(A_buf.shape[0], H, A_buf.shape[1], dtype=A_buf.dtype, device=A_buf.device)
            prepared = self._prepare(self._attn(runner, A_buf, unread_b, 0, 1), attn_output, "v")
            bridge = self._joined(prepared)
            return bridge.view(S, H, bridge.shape[-1]).clone()

    def step_b_q_fwd(self, q_lora_a, A_buf, batch_info, base_output):
        with self._lock:
            S, H, _ = q_lora_a.shape
            runner = self._runner(batch_info, S, A_buf.shape[0])
            prepared = self._prepared(runner, "q", q_lora_a, A_buf.transpose(1, 2), H)
            return self._apply(prepared, base_output)

    def step_b_v_fwd(self, attn_lora_a, B_buf, batch_info, base_output, qk_nope_head_dim, v_head_dim):
        with self._lock:
            S, H, _ = attn_lora_a.shape
            runner = self._runner(batch_info, S, B_buf.shape[0])
            weight = self.module._b_slice_per_head(B_buf, H, qk_nope_head_dim, v_head_dim)
            prepared = self._prepared(runner, "v", attn_lora_a, weight, H)
            return self._apply(prepared, base_output)

    def q_side_fused_fwd(self, q_nope, B_buf, A_buf, batch_info, base_output, full_K_per_head):
        with self._lock:
            S, H, qk = q_nope.shape
            runner = self._runner(batch_info, S, A_buf.shape[0])
            prepared = self._prepare(self._attn(runner, A_buf, B_buf, qk, full_K_per_head - qk), q_nope, "q")
            return self._apply(prepared, base_output)

    def v_side_fused_fwd(self, attn_output, A_buf, B_buf, batch_info, base_output, qk_nope_head_dim, v_head_dim):
        with self._lock:
            S, H, _ = attn_output.shape
            runner = self._runner(batch_info, S, A_buf.shape[0])
            prepared = self._prepare(self._attn(runner, A_buf, B_buf, qk_nope_head_dim, v_head_dim), attn_output, "v")
            return self._apply(prepared, base_output)


def _sibling(module: types.ModuleType, stem: str) -> types.ModuleType:
    """The module of the v2 path whose file is named ``stem`` (loaded beside ``module``)."""
    import sys

    prefix = module.__name__.split(".")[:-2]
    for name, mod in list(sys.modules.items()):
        if name.endswith("." + stem) and name.split(".")[: len(prefix)] == prefix:
            return mod
    raise LoaderError(f"the v2 path loaded no {stem}.py beside {module.__name__}")
