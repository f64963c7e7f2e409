"""Each SGLang release's own ``VisionFlashInferAttention``, loaded standalone from its ``vision.py``.

Note [Loading SGLang's vision wrapper standalone]
-------------------------------------------------
``sglang/srt/layers/attention/vision.py`` is a 1,100-1,600-line module whose imports pull in
SGLang's whole runtime (distributed groups, server arguments, quantization, ``sgl_kernel``).  The
``flashinfer_cudnn`` backend in it is one class, ``VisionFlashInferAttention``, plus (from 0.5.16)
the ``VisionAttentionMetadata`` dataclass and (from 0.5.17) the metadata helper
``prepare_flashinfer_cudnn_vision_attention_metadata``.  So :func:`read_vision_code` takes exactly
those definitions out of the release's file with :mod:`ast`, together with the module-level
definitions they use (the helper needs ``prepare_vision_attention_metadata``, ``BATCH_BUCKETS``,
``FLASHINFER_MAX_SEQLEN_BUCKETS``), and :func:`load_vision_wrapper` executes them, compiled from the
release's own file (tracebacks point at its lines), in a private module whose other names are the
stand-ins of :data:`STAND_INS`:

=====================================  =========================================  ==========================
name the definitions use               how the release binds it                   stand-in
=====================================  =========================================  ==========================
``torch``, ``nn``, ``math``,            ``import torch``, ``import torch.nn as nn``  the real modules
``dataclasses``                         ...
``rearrange``                           ``from einops import rearrange``           :func:`rearrange` (the two
                                                                                   patterns the wrapper uses)
``_is_cuda``                            ``_is_cuda = is_cuda()``                   ``True``: an engine is bound
``cudnn_batch_prefill_with_kv_cache``   ``from flashinfer.prefill import ...``     the engine the target
                                        (0.5.23: ``LazyImport(...)``)              chose (real or CPU)
=====================================  =========================================  ==========================

A name the definitions use that is neither a stand-in, a builtin nor a module-level definition, a
stand-in name the release binds some other way, or a ``rearrange`` pattern the stand-in does not
know is a :class:`~.sglang_wheel.LoaderError` in one line: the loader never guesses.  ``sglang``
is never imported and ``sys.modules`` never holds an ``sglang`` entry.

What callers pass: :func:`read_vision_code` also reads, from the release's ``VisionAttention.forward``,
the keywords it passes to ``self.qkv_backend.forward(...)`` (0.5.10: ``sequence_lengths``,
``max_seqlen``, ...; 0.5.11: + ``softmax_scale``, ``window_size``, ``s_aux``; 0.5.16: +
``forward_metadata``).  The target declines the rest of SGLang's call (``Target.declines``), so the harness passes
a release's wrapper only what that release's own layer passes it.

Identity: :attr:`VisionCode.identity` hashes the syntax trees of the extracted definitions
(docstrings, comments and layout aside) and the callers' keywords: two releases with the same
identity run the same wrapper code on the same calls (:mod:`kernel_oracle.jobs.matrix` tests
them once).
"""

from __future__ import annotations

import __future__
import ast
import builtins
import copy
import hashlib
import math
import sys
import types
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from .sglang_wheel import LoaderError, ReleaseFiles, code_identity

__all__ = ["CALLER", "HELPER", "METADATA", "REARRANGE_PATTERNS", "STAND_INS", "VISION_FILE", "WRAPPER", "VisionCode",
           "VisionWrapper", "load_vision_wrapper", "read_vision_code", "rearrange"]

VISION_FILE = "sglang/srt/layers/attention/vision.py"
WRAPPER = "VisionFlashInferAttention"
METADATA = "VisionAttentionMetadata"
HELPER = "prepare_flashinfer_cudnn_vision_attention_metadata"
CALLER = "VisionAttention"
POSITIONAL = ("q", "k", "v", "cu_seqlens", "bsz", "seq_len")  # the backend forward's positional parameters

REARRANGE_PATTERNS = ("b s ... -> (b s) ...", "(b s) h d -> b s h d")


def rearrange(x: torch.Tensor, pattern: str, **axes: int) -> torch.Tensor:
    """``einops.rearrange`` for the two patterns SGLang's vision wrapper uses (torch reshapes, as
    einops' torch backend does): ``"b s ... -> (b s) ..."`` merges the first two dimensions;
    ``"(b s) h d -> b s h d"`` with ``b=N`` splits a 3-D tensor's first dimension into ``(N, -1)``."""
    if pattern == REARRANGE_PATTERNS[0]:
        if axes or x.dim() < 2:
            raise ValueError(f"rearrange {pattern!r}: expected a tensor of 2+ dims and no axis sizes, got shape "
                             f"{tuple(x.shape)} and {axes}")
        return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])
    if pattern == REARRANGE_PATTERNS[1]:
        b = axes.get("b")
        if set(axes) != {"b"} or x.dim() != 3 or not isinstance(b, int) or b <= 0 or x.shape[0] % b:
            raise ValueError(f"rearrange {pattern!r}: expected a 3-D tensor whose first dim divides by b, got shape "
                             f"{tuple(x.shape)} and {axes}")
        return x.reshape(b, x.shape[0] // b, x.shape[1], x.shape[2])
    raise ValueError(f"rearrange pattern {pattern!r} has no stand-in; the known ones are {list(REARRANGE_PATTERNS)}")


@dataclass(frozen=True)
class _StandIn:
    binds: tuple[str, ...]  # how a release may bind the name (import source, or "= expression")
    value: Callable[[Any], Any]  # engine -> the value


# name -> how releases bind it, and the stand-in (Note [Loading SGLang's vision wrapper standalone])
STAND_INS: dict[str, _StandIn] = {
    "torch": _StandIn(("torch",), lambda engine: torch),
    "nn": _StandIn(("torch.nn",), lambda engine: torch.nn),
    "math": _StandIn(("math",), lambda engine: math),
    "dataclasses": _StandIn(("dataclasses",), lambda engine: __import__("dataclasses")),
    "rearrange": _StandIn(("einops.rearrange",), lambda engine: rearrange),
    "_is_cuda": _StandIn(("= is_cuda()",), lambda engine: True),
    "cudnn_batch_prefill_with_kv_cache": _StandIn(
        ("flashinfer.prefill.cudnn_batch_prefill_with_kv_cache",
         "= LazyImport('flashinfer.prefill', 'cudnn_batch_prefill_with_kv_cache')"), lambda engine: engine),
}


@dataclass(frozen=True)
class VisionCode:
    """What a release's ``vision.py`` holds for the ``flashinfer_cudnn`` backend, read without running it.

    ``nodes``: the extracted top-level definitions in file order; ``names``: theirs; ``stand_ins``:
    the stand-in names they use; ``accepts``: the keywords the release's ``VisionAttention`` passes
    its backend; ``forward_keywords``: the named keyword parameters of the wrapper's ``forward``;
    ``kv_heads``: whether its ``VisionAttention`` takes ``num_kv_heads`` (0.5.11 on: k and v may have
    fewer heads than q; before, they always have q's); ``identity``: a hash of the code, of ``accepts``
    and of ``kv_heads``."""

    version: str
    nodes: tuple
    names: tuple[str, ...]
    stand_ins: tuple[str, ...]
    accepts: frozenset
    forward_keywords: tuple[str, ...]
    identity: str
    kv_heads: bool = True

    @property
    def has_metadata_helper(self) -> bool:
        return HELPER in self.names


class _Names(ast.NodeVisitor):
    """Names a definition loads and binds, annotations skipped (the file has ``from __future__ import
    annotations``: they are never evaluated)."""

    def __init__(self) -> None:
        self.loads: set[str] = set()
        self.bound: set[str] = set()

    def visit_Name(self, node: ast.Name) -> None:
        (self.loads if isinstance(node.ctx, ast.Load) else self.bound).add(node.id)

    def visit_arg(self, node: ast.arg) -> None:
        self.bound.add(node.arg)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.visit(node.target)
        if node.value is not None:
            self.visit(node.value)

    def _function(self, node) -> None:
        self.bound.add(node.name)
        for d in node.decorator_list:
            self.visit(d)
        self.visit(node.args)
        for stmt in node.body:
            self.visit(stmt)

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.bound.add(node.name)
        for part in (*node.decorator_list, *node.bases, *node.keywords, *node.body):
            self.visit(part)


def _free_names(node: ast.AST) -> set[str]:
    v = _Names()
    v.visit(node)
    return v.loads - v.bound - set(dir(builtins))


def _bindings(body: list, out: dict) -> dict:
    """name -> how the module binds it at top level (imports and assignments, also inside top-level
    ``if`` / ``try`` blocks; ``"def"`` for a definition)."""
    for node in body:
        if isinstance(node, ast.Import):
            for a in node.names:
                bound = a.asname or a.name.split(".")[0]
                out.setdefault(bound, []).append(a.name if a.asname else bound)
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                out.setdefault(a.asname or a.name, []).append(f"{node.module}.{a.name}")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.setdefault(node.name, []).append("def")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                if isinstance(t, ast.Name):
                    out.setdefault(t.id, []).append("= " + ast.unparse(node.value))
        elif isinstance(node, ast.If):
            _bindings(node.body + node.orelse, out)
        elif isinstance(node, ast.Try):
            _bindings(node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body], out)
    return out


def _definitions(tree: ast.Module) -> dict[str, ast.stmt]:
    """name -> the top-level statement defining it (a def, a class, or ``NAME = ...``)."""
    out: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.setdefault(node.name, node)
        elif isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            for t in node.targets:
                out.setdefault(t.id, node)
    return out


def _closure(version: str, tree: ast.Module, wanted: list[str]) -> tuple[list, set]:
    """The definitions of ``wanted`` and of everything they use, and the stand-in names they need."""
    defs, binds = _definitions(tree), _bindings(tree.body, {})
    chosen: dict[int, ast.stmt] = {}
    stand_ins: set[str] = set()
    todo = list(wanted)
    while todo:
        name = todo.pop()
        if name in STAND_INS:
            how = binds.get(name, [])
            if not how or any(h not in STAND_INS[name].binds for h in how):
                raise LoaderError(f"sglang {version}: {VISION_FILE} binds {name!r} as {how or 'nothing'}, not as "
                                  f"the stand-in expects ({list(STAND_INS[name].binds)}); teach "
                                  f"fuzz/targets/sglang_vision.py the new binding")
            stand_ins.add(name)
            continue
        node = defs.get(name)
        if node is None:
            raise LoaderError(f"sglang {version}: the {WRAPPER} code of {VISION_FILE} uses {name!r} (bound as "
                              f"{binds.get(name) or 'nothing at top level'}), which the standalone loader has no "
                              f"stand-in for (known: {sorted(STAND_INS)})")
        if id(node) not in chosen:
            chosen[id(node)] = node
            todo.extend(sorted(_free_names(node)))
    return sorted(chosen.values(), key=lambda n: n.lineno), stand_ins


def _caller_keywords(version: str, tree: ast.Module) -> frozenset:
    """The keywords ``VisionAttention.forward`` passes to ``self.qkv_backend.forward(...)``."""
    for cls in tree.body:
        if not (isinstance(cls, ast.ClassDef) and cls.name == CALLER):
            continue
        for fn in cls.body:
            if not (isinstance(fn, ast.FunctionDef) and fn.name == "forward"):
                continue
            for node in ast.walk(fn):
                f = getattr(node, "func", None)
                if (isinstance(node, ast.Call) and isinstance(f, ast.Attribute) and f.attr == "forward"
                        and isinstance(f.value, ast.Attribute) and f.value.attr == "qkv_backend"):
                    return frozenset(k.arg for k in node.keywords if k.arg and k.arg not in POSITIONAL)
    raise LoaderError(f"sglang {version}: {VISION_FILE} has no call self.qkv_backend.forward(...) in "
                      f"{CALLER}.forward, so what its callers pass is unknown; teach fuzz/targets/sglang_vision.py")


def _forward_keywords(cls: ast.ClassDef) -> tuple[str, ...]:
    for fn in cls.body:
        if isinstance(fn, ast.FunctionDef) and fn.name == "forward":
            names = [a.arg for a in fn.args.args + fn.args.kwonlyargs]
            return tuple(n for n in names if n not in ("self",) + POSITIONAL)
    return ()


def _init_parameters(cls) -> tuple[str, ...]:
    """The parameters of a class definition's ``__init__`` (none for a missing class)."""
    for fn in getattr(cls, "body", ()):
        if isinstance(fn, ast.FunctionDef) and fn.name == "__init__":
            return tuple(a.arg for a in fn.args.args + fn.args.kwonlyargs)
    return ()


def _check_rearrange(version: str, nodes: list) -> None:
    for node in (n for top in nodes for n in ast.walk(top)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "rearrange":
            pattern = node.args[1].value if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) else None
            if pattern not in REARRANGE_PATTERNS:
                raise LoaderError(f"sglang {version}: {VISION_FILE} line {node.lineno} calls rearrange with pattern "
                                  f"{pattern!r}, which the stand-in does not know (known: {list(REARRANGE_PATTERNS)})")


def read_vision_code(release: ReleaseFiles) -> VisionCode:
    """The ``flashinfer_cudnn`` code of ``release``'s ``vision.py`` (see the Note); raises
    :class:`LoaderError` (one line) when the release has none or it needs a name the loader lacks."""
    key = ("vision-code",)
    if key in release.loaded:
        return release.loaded[key]
    if VISION_FILE not in release.names:
        raise LoaderError(f"sglang {release.version} has no {VISION_FILE} (the vision backend exists from 0.5.10)")
    tree = ast.parse(release.read(VISION_FILE))
    defs = _definitions(tree)
    if not isinstance(defs.get(WRAPPER), ast.ClassDef):
        raise LoaderError(f"sglang {release.version}: {VISION_FILE} defines no {WRAPPER} (the flashinfer_cudnn "
                          f"vision backend exists from 0.5.10)")
    wanted = [n for n in (WRAPPER, METADATA, HELPER) if n in defs]
    nodes, stand_ins = _closure(release.version, tree, wanted)
    _check_rearrange(release.version, nodes)
    accepts = _caller_keywords(release.version, tree)
    kv_heads = "num_kv_heads" in _init_parameters(defs.get(CALLER))
    code = VisionCode(release.version, tuple(nodes), tuple(sorted(n for node in nodes for n in _defined(node))),
                      tuple(sorted(stand_ins)), accepts, _forward_keywords(defs[WRAPPER]),
                      code_identity(nodes, ",".join(sorted(accepts)) + ("" if kv_heads else ";no num_kv_heads")),
                      kv_heads)
    release.loaded[key] = code
    return code


def _defined(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets]
    return [node.name]


@dataclass
class VisionWrapper:
    """A release's loaded wrapper: ``cls`` (``VisionFlashInferAttention``), ``metadata_cls`` and
    ``metadata_helper`` (None where the release has none), the :class:`VisionCode` it came from."""

    code: VisionCode
    module: types.ModuleType
    cls: type
    metadata_cls: Optional[type]
    metadata_helper: Optional[Callable]


def load_vision_wrapper(release: ReleaseFiles, engine: Callable, tag: str) -> VisionWrapper:
    """Execute ``release``'s wrapper code (:func:`read_vision_code`) with ``engine`` as its
    ``cudnn_batch_prefill_with_kv_cache``, in a private module named after ``tag`` (the engine's
    kind: one module per release and engine)."""
    code = read_vision_code(release)
    key = ("vision", tag)
    if key in release.loaded:
        return release.loaded[key]
    origin = hashlib.sha1(release.origin.encode()).hexdigest()[:8]
    name = f"_kernel_oracle_sglang.v{_slug(release.version)}_{origin}.vision_{_slug(tag)}.vision"
    mod = types.ModuleType(name)
    mod.__dict__.update({n: STAND_INS[n].value(engine) for n in code.stand_ins})
    mod.__dict__["__kernel_oracle_origin__"] = f"{VISION_FILE} of sglang {release.version} ({release.origin})"
    flags = __future__.annotations.compiler_flag  # the file's own `from __future__ import annotations`
    compiled = compile(ast.Module(body=[copy.deepcopy(n) for n in code.nodes], type_ignores=[]),
                       str(release.disk(VISION_FILE)), "exec", flags=flags, dont_inherit=True)
    sys.modules[name] = mod  # dataclasses and inspect look the module up by name
    try:
        exec(compiled, mod.__dict__)  # noqa: S102 - the release's own definitions, with our stand-ins only
    except Exception as exc:
        sys.modules.pop(name, None)
        raise LoaderError(f"loading {WRAPPER} of sglang {release.version} standalone failed: {type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else ''}") from exc
    wrapper = VisionWrapper(code, mod, mod.__dict__[WRAPPER], mod.__dict__.get(METADATA), mod.__dict__.get(HELPER))
    release.loaded[key] = wrapper
    return wrapper


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in text)
