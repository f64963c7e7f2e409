"""The files a module target runs: its import closure, found without importing it.

Note [Import closure]
---------------------
A campaign resumes only over the same code (Note [Campaign identity] in :mod:`fuzz.state`), so the hash
of a ``package.module[:attr]`` target must cover every file whose change changes what the target runs.
Hashing the target's own package missed the rest: a plain module that re-exports ``from my_ops import *``,
a compiled extension rebuilt beside it, a helper package it imports inside a function -- a regression
there resumed as "clean".  :func:`closure_files` follows the imports instead, without running any of
the target's code (a campaign's parent never imports it):

* each module's source is parsed (:mod:`ast`) and every import found, at any depth (inside functions and
  ``try`` blocks too), plus ``importlib.import_module("name")`` and ``__import__("name")`` with a literal
  name; ``from pkg import name`` also follows ``pkg.name`` when that is a module;
* a name is located with :mod:`importlib`'s finders (``find_spec`` of the top-level name, then the
  package's search path for each part: no package's ``__init__`` runs);
* a compiled extension (``.so``, ``.pyd``) is hashed with the sources beside it (``.c``, ``.cpp``,
  ``.cu``, ``.h``, ``.pyx``, ...: a rebuild from edited sources changes both);
* a shared library the code loads itself (``ctypes.CDLL``, ``torch.ops.load_library``) is found by its
  name: every string literal of a module's source that names a ``.so`` / ``.so.N`` / ``.dylib`` / ``.dll``
  file, looked for where it says (an absolute path), beside the module (``os.path.dirname(__file__)``)
  and in the current directory (where ``CDLL("./libx.so")`` looks), is hashed with the sources beside it;
* the walk stops at Python's standard library and at the suite's own dependencies (``torch``,
  ``triton``, ``numpy`` and what they require, from ``kernel-oracle``'s metadata): those are the
  environment, recorded as the suite's version, not the target's code.

What stays unseen: an import whose name is computed at run time (``import_module(f"ops_{n}")``), a
library whose name is (``CDLL(f"lib{n}.so")``, or one found on the loader's search path only) and code
that is not a module (a kernel read from a data file): docs/reference.md lists them.
"""

from __future__ import annotations

import ast
import functools
import importlib.machinery
import re
import sys
import sysconfig
from pathlib import Path
from typing import Iterable, Optional

__all__ = ["MAX_FILES", "closure_files", "library_files", "suite_dependencies"]

# the most files one closure holds (a walk that reaches this many has left the target's own code)
MAX_FILES = 20_000
# sources a compiled extension is built from, hashed beside it
EXTENSION_SOURCES = (".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hh", ".hpp", ".pyx", ".pxd", ".pyi")
_EXTENSIONS = tuple(importlib.machinery.EXTENSION_SUFFIXES)
# a string literal naming a shared library (a file name or a path ending in one)
_LIBRARY = re.compile(r"[^\0]*[^/\0]\.(so(\.[0-9]+)*|dylib|dll)")
_REQUIREMENT_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_EXTRA = re.compile(r"\bextra\s*==")


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@functools.lru_cache(maxsize=1)
def suite_dependencies() -> frozenset:
    """Top-level module names of the suite's own dependencies, transitively (extras excluded: an SGLang
    under test is code to hash), from the installed metadata; the direct ones when it is absent."""
    from importlib import metadata

    names, todo = set(), ["kernel-oracle"]
    while todo:
        dist = _normalized(todo.pop())
        if dist in names:
            continue
        names.add(dist)
        try:
            requires = metadata.requires(dist) or []
        except metadata.PackageNotFoundError:
            continue
        for req in requires:
            m = _REQUIREMENT_NAME.match(req)
            if m and not _EXTRA.search(req):
                todo.append(m.group(1))
    names.discard("kernel-oracle")
    tops = {top for top, dists in metadata.packages_distributions().items()
            if any(_normalized(d) in names for d in dists)}
    return frozenset(tops | {"torch", "triton", "numpy"})


@functools.lru_cache(maxsize=1)
def _stdlib_dirs() -> tuple:
    paths = sysconfig.get_paths()
    return tuple({str(Path(paths[k]).resolve()) for k in ("stdlib", "platstdlib") if k in paths})


def _outside(name: str, origin: Optional[str]) -> bool:
    """Whether module ``name`` (found at ``origin``) is the environment's, not the target's."""
    top = name.split(".")[0]
    if top in sys.stdlib_module_names or top in sys.builtin_module_names or top in suite_dependencies():
        return True
    if origin is None or origin in ("built-in", "frozen"):
        return True
    where = str(Path(origin).resolve())
    return any(where.startswith(d + "/") for d in _stdlib_dirs()) and "site-packages" not in where


def _find(name: str):
    """The spec of module ``name`` without importing anything: the import system's finders asked for each
    part in turn, with the package's search path (what an import does, minus running each package's
    ``__init__``).  None when not found."""
    spec, path = None, None
    parts = name.split(".")
    for i in range(len(parts)):
        if i and (spec is None or not spec.submodule_search_locations):
            return None
        if i:
            path = list(spec.submodule_search_locations)
        spec = _ask_finders(".".join(parts[:i + 1]), path)
    return spec


def _ask_finders(fullname: str, path):
    loaded = sys.modules.get(fullname)
    if loaded is not None and getattr(loaded, "__spec__", None) is not None:
        return loaded.__spec__
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(fullname, path)
        except (ImportError, ValueError, TypeError, AttributeError):
            continue
        if spec is not None:
            return spec
    return None


def _resolve(module: str, level: int, package: str) -> Optional[str]:
    """The absolute name of ``from <level dots><module> import ...`` in ``package``."""
    if level == 0:
        return module
    if not package or package.count(".") < level - 1:  # above the top-level package
        return None
    base = package.rsplit(".", level - 1)[0] if level > 1 else package
    return f"{base}.{module}" if module else base


def _imported(tree: ast.AST, name: str, is_package: bool) -> Iterable[str]:
    """The module names the syntax tree of module ``name`` imports (Note [Import closure])."""
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module or "", node.level, package)
            if base:
                yield base
                for alias in node.names:
                    if alias.name != "*":
                        yield f"{base}.{alias.name}"  # a submodule, when it is one
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("import_module", "__import__"):
                yield node.args[0].value


def _libraries(tree: ast.AST, folder: Path) -> list:
    """The shared libraries the string literals of a module's syntax tree name, found where a loader would
    look (Note [Import closure]): as given, beside the module (``folder``), in the current directory."""
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 4096
                and _LIBRARY.fullmatch(node.value)):
            continue
        given = Path(node.value)
        for where in ((given,) if given.is_absolute() else (folder / given, folder / given.name, Path.cwd() / given)):
            try:
                if where.is_file():
                    out.append(where.resolve())
            except OSError:
                continue
    return out


def _beside(extension: Path) -> list:
    try:
        return [p for p in extension.parent.iterdir() if p.suffix in EXTENSION_SOURCES and p.is_file()]
    except OSError:
        return []


def library_files(sources: Iterable[Path]) -> list[Path]:
    """The shared libraries the Python files ``sources`` name (Note [Import closure]) and the sources beside them."""
    out: set = set()
    for path in sources:
        if Path(path).suffix != ".py":
            continue
        try:
            tree = ast.parse(Path(path).read_text(encoding="utf-8", errors="replace"))
        except (OSError, SyntaxError, ValueError):
            continue
        for library in _libraries(tree, Path(path).parent):
            out.add(library)
            out.update(_beside(library))
    return sorted(out)


def closure_files(module: str) -> list[Path]:
    """Every file of ``module``'s import closure outside the standard library and the suite's dependencies
    (Note [Import closure]): Python sources, packages' ``__init__`` files, compiled extensions, the shared
    libraries the sources name, and the sources beside those.  Empty when ``module`` itself cannot be found."""
    files: set = set()
    seen: set = set()
    todo = [module]
    while todo and len(files) < MAX_FILES:
        name = todo.pop()
        if name in seen or not name:
            continue
        seen.add(name)
        spec = _find(name)
        if spec is None or _outside(name, spec.origin):
            continue
        origin = Path(spec.origin)
        if not origin.is_file():
            continue
        files.add(origin)
        if origin.name.endswith(_EXTENSIONS):
            files.update(_beside(origin))
            continue
        if origin.suffix != ".py":
            continue
        try:
            tree = ast.parse(origin.read_text(encoding="utf-8", errors="replace"))
        except (OSError, SyntaxError, ValueError):
            continue
        is_package = bool(spec.submodule_search_locations)
        todo.extend(n for n in _imported(tree, name, is_package) if n not in seen)
        for library in _libraries(tree, origin.parent):
            files.add(library)
            files.update(_beside(library))
        parent = name.rpartition(".")[0]
        if parent:
            todo.append(parent)  # a package's __init__ runs before its module
    return sorted(files)
