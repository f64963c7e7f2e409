"""What code a campaign tested: a hash of the target's source files and of the suite's own.

A campaign's ``--out`` can be resumed only by the same campaign (:mod:`fuzz.state`, Note [Campaign
identity]): the same target spec, op and seed, *and* the same code, else its old findings would be
reported as the current code's.  The hashes are taken in the calling process without importing the
target (a target runs in a worker):

* ``package.module[:attr]`` (and a plain module name, ``mykernels``: the same spec once resolved): the
  module's import closure (:mod:`fuzz.targets.import_closure`, Note
  [Import closure]: every module it imports outside the standard library and the suite's dependencies,
  compiled extensions with the sources beside them, the shared libraries its sources name) and the ``.py``
  files of its top-level package, found
  where the worker imports it: the current directory first, then ``sys.path`` (:func:`.user_modules.find_spec`);
* ``sglang==X.Y.Z`` (and ``sglang-trt==X.Y.Z``): the SHA-256 of the release's wheel when one is found
  (``--sglang-wheel`` or the cache, never downloaded here), else the pinned version itself;
* ``sglang-csgmv==X.Y.Z@...``: the release's csgmv files and the switches as its configuration sets them
  (Note [csgmv run identity] in :mod:`.sglang_csgmv_identity`) when the wheel is found, else the pinned
  version and the configuration;
* an installed ``sglang`` (no version): the installed package's files that hold the entry points;
* the other built-ins and ``mutant:NAME``: what :data:`BUILTIN_CODE` names for the target, our packages'
  files (``reference``: the oracle's package; ``triton`` and mutants: our kernels and the reference
  their entry points fall back on), our adapter's files, and the installed versions of the distributions
  whose code it calls (``flashinfer-cudnn``: FlashInfer and cuDNN; ``torch-varlen``: torch).  An edit of
  our kernels changes the identity of the targets that run them and of no other.

:func:`suite_version` is the package version plus a hash of the oracle's own files (``harness``,
``reference``), so an edited oracle or comparison counts as other code too.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from kernel_oracle.harness.targets import TargetSources, TargetSpec
from .flashinfer_engines import engine_site
from .registry import resolved_spec

__all__ = ["BUILTIN_CODE", "BuiltinCode", "code_hash", "files_hash", "identity_difference", "suite_version"]

_HERE = Path(__file__).resolve().parent  # fuzz/targets


def files_hash(files: Iterable[Path], root: Optional[Path] = None) -> str:
    """SHA-256 (16 hex digits) of ``files``' names (relative to ``root``) and bytes, in sorted order."""
    h = hashlib.sha256()
    for p in sorted(set(files)):
        name = str(p.relative_to(root)) if root is not None and p.is_relative_to(root) else str(p)
        h.update(name.encode() + b"\0")
        try:
            h.update(p.read_bytes())
        except OSError:
            h.update(b"<unreadable>")
        h.update(b"\0")
    return h.hexdigest()[:16]


def _py_files(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*.py") if "__pycache__" not in p.parts]


def _package_dir(dotted: str) -> Optional[Path]:
    spec = importlib.util.find_spec(dotted)
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).resolve().parent


def _module_files(module: str) -> tuple[list[Path], Optional[Path]]:
    from .user_modules import find_spec

    spec = find_spec(module)  # the current directory first, as the import in the worker (Note [Modules beside the user])
    if spec is None:
        return [], None
    if spec.submodule_search_locations:
        roots = [Path(p) for p in spec.submodule_search_locations]
        return [f for r in roots for f in _py_files(r)], roots[0].parent
    if spec.origin and Path(spec.origin).is_file():
        return [Path(spec.origin)], Path(spec.origin).parent
    return [], None


@dataclass(frozen=True)
class BuiltinCode:
    """What a built-in target runs: our ``packages`` (import names), our adapter ``modules`` (files of
    ``fuzz/targets``) and the installed ``distributions`` whose code it calls (hashed by version)."""

    packages: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    distributions: tuple[str, ...] = ()


_REF, _KERNELS = "kernel_oracle.reference", "kernel_oracle.kernels"
# built-in target name (or "mutant") -> the code its identity hashes
BUILTIN_CODE = {
    "reference": BuiltinCode((_REF,), ("reference.py", "adapter.py")),
    "triton": BuiltinCode((_KERNELS, _REF), ("triton.py", "adapter.py")),
    "mutant": BuiltinCode((_KERNELS, _REF), ("mutants.py", "mutant_data.py", "mutants_csgmv.py", "triton.py",
                                             "adapter.py")),
    # our wrapper semantics resolve the metadata with the reference's contract code, then call the engine
    "flashinfer-cudnn": BuiltinCode((_REF,), ("flashinfer_cudnn.py", "flashinfer_engines.py"),
                                    ("flashinfer-python", "nvidia-cudnn-frontend", "nvidia-cudnn-cu12",
                                     "nvidia-cudnn-cu13")),
    "torch-varlen": BuiltinCode((_REF,), ("torch_varlen.py",), ("torch",)),
}


def _dist_version(name: str, path: Optional[list] = None) -> str:
    """The installed version of distribution ``name`` (in the folders ``path`` only, when given)."""
    if path is not None:
        found = [d.version for d in importlib.metadata.distributions(name=name, path=path)]
        return found[0] if found else "absent"
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _builtin_hash(code: BuiltinCode, spec: Optional[TargetSpec] = None) -> str:
    """``flashinfer-cudnn@engine=V`` reads its distributions' versions in V's own folder (Note [Engine
    versions] in :mod:`.flashinfer_engines`), not in the environment's."""
    files = [f for p in code.packages if (d := _package_dir(p)) for f in _py_files(d)]
    files += [_HERE / m for m in code.modules]
    h = hashlib.sha256(files_hash(files, _HERE.parent.parent).encode())
    engine = dict(spec.configuration).get("engine") if spec is not None else None
    path = [str(engine_site(engine))] if engine else None
    for dist in code.distributions:
        h.update(f"\0{dist}=={_dist_version(dist, path)}".encode())
    return h.hexdigest()[:16]


def _csgmv_hash(spec: TargetSpec, sources: Optional[TargetSources]) -> str:
    from .sglang_csgmv_identity import csgmv_code_hash, csgmv_configuration
    from .sglang_wheel import LoaderError, find_wheel, wheel_release

    try:
        release = wheel_release(find_wheel(spec.release, sources.sglang_wheel if sources else None, download=False))
        return csgmv_code_hash(release, csgmv_configuration(spec))
    except (LoaderError, OSError):
        return f"unlocated:{spec}"


def _wheel_hash(version: str, sources: Optional[TargetSources]) -> str:
    from .sglang_wheel import LoaderError, find_wheel

    try:
        wheel = find_wheel(version, sources.sglang_wheel if sources else None, download=False)
    except (LoaderError, OSError):
        return f"sglang=={version}"
    h = hashlib.sha256()
    with open(wheel, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return "wheel:" + h.hexdigest()[:16]


def code_hash(spec: TargetSpec, sources: Optional[TargetSources] = None) -> str:
    """A hash of the code the target ``spec`` runs (see the module docstring); a spec whose files
    cannot be found hashes as ``"unlocated:<spec>"`` (then only the spec identifies it)."""
    spec = resolved_spec(spec)  # a plain module name (``mykernels``) is that module, as the worker resolves it
    kind = spec.kind
    if kind == "module":
        from .import_closure import closure_files, library_files

        files, root = _module_files(spec.module)
        files = sorted(set(files) | set(closure_files(spec.module)) | set(library_files(files)))
        return files_hash(files, root) if files else f"unlocated:{spec}"
    if kind == "release" and spec.release:
        return _csgmv_hash(spec, sources) if spec.variant == "csgmv" else _wheel_hash(spec.release, sources)
    if spec.base.startswith("sglang"):
        files, root = _module_files("sglang")
        lora = [f for f in files if "lora" in f.parts or "multimodal" in f.parts or "attention" in f.parts]
        return files_hash(lora, root) if lora else f"unlocated:{spec}"
    code = BUILTIN_CODE.get("mutant" if kind == "mutant" else spec.name)
    if code is not None:
        return _builtin_hash(code, spec)
    kernels = _package_dir(_KERNELS)  # a built-in registered without an entry: every adapter and our kernels
    files = (_py_files(kernels) if kernels else []) + _py_files(_HERE)
    return files_hash(files, _HERE.parent.parent)


def suite_version() -> str:
    """``<package version>+<hash of harness/ and reference/>``: the oracle that judged the cases."""
    from kernel_oracle._version import __version__

    dirs = [d for d in (_package_dir("kernel_oracle.harness"), _package_dir("kernel_oracle.reference")) if d]
    files = [f for d in dirs for f in _py_files(d)] + [f for d in dirs for f in d.glob("*.toml")]
    return f"{__version__}+{files_hash(files, _HERE.parent.parent)}"


_IDENTITY_NAMES = {"target": "another target", "op": "another op", "seed": "another seed",
                   "code": "target sources changed since it ran", "suite": "the suite's oracle changed since it ran"}


def identity_difference(held: Optional[dict], wanted: dict) -> str:
    """Why a campaign of identity ``held`` is not the campaign ``wanted``; "" when it is."""
    if not held:
        return "its identity is unknown: it was written without one"
    for key, what in _IDENTITY_NAMES.items():
        if key in wanted and held.get(key) != wanted[key]:
            if key in ("target", "op", "seed"):
                return f"{what}: {key}={held.get(key)!r}, not {wanted[key]!r}"
            return what
    return ""
