"""SGLang's kv_b LoRA kernel files, loaded standalone from a wheel or an installed distribution.

Note [Loading SGLang's kernels standalone]
------------------------------------------
The kv_b LoRA kernels of every SGLang release are one Python file (``kv_b_lora_absorbed.py``, a
default and a TRT-LLM-style variant) that needs only torch, triton, a ``kernel_utils`` helper file
beside it, and a few names from the rest of SGLang (SPEC.md, "Where SGLang keeps these kernels").
Importing it through the package runs ``sglang/__init__`` and ``sglang.srt.lora.utils``, which pull
in transformers, pydantic, zmq, aiohttp and more; on a machine with torch and triton alone that
import fails.  So a release is tested without installing it:

1. **files**: a :class:`ReleaseFiles` lists a release's files and reads them without importing
   anything: a wheel (a zip; :func:`find_wheel` takes it from ``--sglang-wheel``, the cache, or
   ``pip download --no-deps``) or an installed distribution (``importlib.metadata``'s ``files()``);
2. **locate**: :func:`locate_kernels` tries SPEC.md's module table first, then searches the
   release's ``sglang/**.py`` files for ``def step_a_q_fwd(``; the path says the variant
   (``trtllm_lora_temp`` -> ``trt``);
3. **load**: :func:`load_kernel_module` executes the file under a private module name
   (``_kernel_oracle_sglang.<release>.<variant>.<folder>.<file>``) with its own ``__import__``: an ``sglang.*``
   import of a ``kernel_utils`` file of the same release loads that file the same way; the other
   ``sglang`` names the kernel files import get the small stand-ins of :data:`STAND_INS`; anything
   else is refused with a one-line reason.  ``sys.modules`` never holds an ``sglang`` entry.

The stand-ins (read from 0.5.12, 0.5.15 and 0.5.23): ``LoRABatchInfo`` (only a type annotation in
the kernels; ours has the same fields), ``lora_envs`` (the TRT variant's experimental cuBLAS
switches; off, as in SGLang unless ``SGLANG_EXPERIMENTAL_LORA_OPTI`` is set) and
``is_arch_support_pdl`` (programmatic dependent launch: SM90+ CUDA, never in the interpreter).
Extracted files live in the cache (:func:`cache_dir`), so Triton reads real source files.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import importlib.util
import os
import re
import subprocess
import sys
import types
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

__all__ = ["KNOWN_KERNEL_FILES", "LoaderError", "ReleaseFiles", "STAND_INS", "cache_dir", "find_wheel",
           "installed_release", "load_kernel_module", "locate_kernels", "wheel_release", "write_slim_wheel"]

# SPEC.md's table, newest layout first: variant -> the kernel file's path in each layout
KNOWN_KERNEL_FILES = {
    "default": ("sglang/kernels/ops/lora/dense/kv_b_lora_absorbed.py",  # 0.5.23
                "sglang/kernels/ops/gemm/kv_b_lora_absorbed.py",  # 0.5.17 - 0.5.19
                "sglang/srt/lora/triton_ops/kv_b_lora_absorbed.py"),  # 0.5.12 - 0.5.15
    "trt": ("sglang/kernels/ops/lora/dense/trtllm_lora_temp/kv_b_lora_absorbed.py",
            "sglang/kernels/ops/gemm/trtllm_lora_temp/kv_b_lora_absorbed.py",
            "sglang/srt/lora/trtllm_lora_temp/triton_ops/kv_b_lora_absorbed.py"),  # from 0.5.15
}
ENTRY_MARK = "def step_a_q_fwd("
# the helper files a kernel file may load from its own release (everything else is a stand-in)
HELPER_FILE = "kernel_utils.py"
CACHE_ENV = "KERNEL_ORACLE_CACHE"
PIP_TIMEOUT_S = 600


class LoaderError(RuntimeError):
    """A release, wheel or kernel file that cannot be used; the message is one line saying why."""


def cache_dir() -> Path:
    """``$KERNEL_ORACLE_CACHE`` or ``~/.cache/kernel-oracle``; wheels go in ``wheels/`` under it."""
    root = os.environ.get(CACHE_ENV)
    return Path(root).expanduser() if root else Path.home() / ".cache" / "kernel-oracle"


# ---- release files -------------------------------------------------------------------------------

@dataclass
class ReleaseFiles:
    """A release's files, readable without importing it.  ``names``: posix paths such as
    ``sglang/srt/lora/utils.py``; ``read(name) -> str``; ``disk(name) -> Path`` of a real file."""

    version: str
    origin: str  # e.g. "wheel /path/sglang-0.5.23-...whl" or "installed distribution at /site-packages"
    names: tuple[str, ...]
    read: Callable[[str], str]
    disk: Callable[[str], Path]
    _kv: dict = field(default_factory=dict, repr=False)


def wheel_release(path: str | os.PathLike) -> ReleaseFiles:
    """The files of an SGLang wheel; kernel files are extracted to the cache when loaded."""
    path = Path(path)
    try:
        zf = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise LoaderError(f"{path} is not a readable wheel ({type(exc).__name__}: {exc}); pass the path of an "
                          f"sglang-X.Y.Z-*.whl file") from None
    names = tuple(n for n in zf.namelist() if not n.endswith("/"))
    version = _wheel_version(path, names)
    digest = hashlib.sha1(f"{path.name}:{path.stat().st_size}".encode()).hexdigest()[:10]
    root = cache_dir() / "extracted" / f"sglang-{version}-{digest}"

    def read(name: str) -> str:
        return zf.read(name).decode("utf-8")

    def disk(name: str) -> Path:
        target = root / name
        data = zf.read(name)
        if not target.exists() or target.read_bytes() != data:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_suffix(".tmp")
            tmp.write_bytes(data)
            tmp.replace(target)
        return target

    return ReleaseFiles(version, f"wheel {path}", names, read, disk)


def _wheel_version(path: Path, names: tuple[str, ...]) -> str:
    for n in names:
        m = re.fullmatch(r"sglang-([^/]+)\.dist-info/METADATA", n)
        if m:
            return m.group(1)
    m = re.match(r"sglang-([^-]+)-", path.name)
    if not m:
        raise LoaderError(f"{path} is not an SGLang wheel (no sglang-*.dist-info/METADATA inside and the name "
                          f"is not sglang-X.Y.Z-*.whl)")
    return m.group(1)


def installed_release() -> ReleaseFiles:
    """The installed ``sglang`` distribution's files, found through its metadata (never imported)."""
    from importlib import metadata

    try:
        dist = metadata.distribution("sglang")
    except metadata.PackageNotFoundError:
        raise LoaderError("SGLang is not installed here (pip install sglang, or test a published release "
                          "without installing it: --targets sglang==X.Y.Z)") from None
    files = {str(f).replace(os.sep, "/"): f for f in (dist.files or ())}
    if not files:
        raise LoaderError(f"sglang {dist.version} is installed without a RECORD of its files; reinstall it "
                          f"with pip")

    def read(name: str) -> str:
        return Path(dist.locate_file(files[name])).read_text(encoding="utf-8")

    def disk(name: str) -> Path:
        return Path(dist.locate_file(files[name]))

    where = Path(dist.locate_file(""))
    return ReleaseFiles(dist.version, f"installed distribution at {where}", tuple(sorted(files)), read, disk)


def find_wheel(version: str, hint: Optional[str] = None, *, download: bool = True) -> Path:
    """The wheel of ``sglang==version``: ``hint`` (``--sglang-wheel``), a file or a directory; else the
    cache's ``wheels/``; else ``pip download --no-deps`` into it."""
    looked = []
    if hint:
        p = Path(hint).expanduser()
        if p.is_file():
            got = _wheel_version(p, ())
            if got != version:
                raise LoaderError(f"--sglang-wheel {p} is sglang {got}, not {version}; pass the wheel of "
                                  f"{version} or a directory holding it")
            return p
        if not p.is_dir():
            raise LoaderError(f"--sglang-wheel {p}: no such file or directory; pass a wheel or a directory of "
                              f"wheels")
        looked.append(p)
    wheels = cache_dir() / "wheels"
    looked.append(wheels)
    for d in looked:
        hits = sorted(d.glob(f"sglang-{version}-*.whl"))
        if hits:
            return hits[0]
    if not download:
        raise LoaderError(f"no wheel of sglang {version} in {', '.join(map(str, looked))}")
    return _pip_download(version, wheels, looked)


def _pip_download(version: str, dest: Path, looked: list) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    base = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
            "-q", "-d", str(dest), f"sglang=={version}"]
    # the wheels are CPython 3.11 only, but we read their files, never install them: any Python may fetch
    why = ""
    for extra in ([], ["--python-version", "3.11"]):
        try:
            out = subprocess.run(base + extra, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as exc:
            why = f"{type(exc).__name__}: {exc}"
            break
        hits = sorted(dest.glob(f"sglang-{version}-*.whl"))
        if hits:
            return hits[0]
        lines = [ln for ln in (out.stderr or out.stdout).splitlines() if ln.strip() and "WARNING" not in ln]
        why = lines[-1].strip() if lines else f"pip exited {out.returncode}"
    raise LoaderError(f"sglang=={version}: no wheel in {', '.join(map(str, looked))} and `pip download --no-deps "
                      f"sglang=={version}` failed ({why}); pass --sglang-wheel PATH|DIR")


# ---- locating the kernels ------------------------------------------------------------------------

def locate_kernels(release: ReleaseFiles) -> dict[str, str]:
    """``variant -> kernel file`` of ``release`` (``default``, ``trt``): SPEC.md's table first, then a
    search of its ``sglang/**.py`` files for the entry points.  Empty when it has none."""
    names = set(release.names)
    found = {}
    for variant, paths in KNOWN_KERNEL_FILES.items():
        hit = next((p for p in paths if p in names), None)
        if hit is not None:
            found[variant] = hit
    if "default" in found:
        return found
    # a layout the table does not know: the files that define the entry points (LoRA folders first)
    candidates = sorted((n for n in names if n.startswith("sglang/") and n.endswith(".py")),
                        key=lambda n: ("lora" not in n, n))
    for name in candidates:
        try:
            text = release.read(name)
        except (OSError, UnicodeDecodeError, KeyError):
            continue
        if ENTRY_MARK in text and "step_b_v_fwd" in text:
            found.setdefault("trt" if "trtllm" in name else "default", name)
    return found


def module_name(path: str) -> str:
    """``sglang/a/b.py`` -> ``sglang.a.b`` (how the release itself names the file)."""
    return path[:-3].replace("/", ".")


# ---- loading -------------------------------------------------------------------------------------

class _OffSwitch:
    def __init__(self, name: str):
        self.name = name

    def get(self) -> bool:
        return False


class _LoraEnvs:
    """Stand-in for ``sglang.srt.lora.trtllm_lora_temp.environ.lora_envs``: the switches the kv_b
    kernels read are off (SGLang's own default while ``SGLANG_EXPERIMENTAL_LORA_OPTI`` is unset)."""

    KNOWN = ("SGLANG_OPT_LORA_CUBLAS", "SGLANG_OPT_LORA_CUBLAS_KV_B")

    def __getattr__(self, name: str):
        if name in self.KNOWN:
            return _OffSwitch(name)
        raise AttributeError(f"lora_envs stand-in has no switch {name!r}; the kv_b kernels read only "
                             f"{list(self.KNOWN)} (teach fuzz/targets/sglang_wheel.py the new one)")


def _is_arch_support_pdl() -> bool:
    """Programmatic dependent launch: CUDA (not HIP) SM90+, and never under the Triton interpreter."""
    from kernel_oracle.harness.device import interpreting

    import torch

    if interpreting() or not torch.cuda.is_available() or torch.version.hip is not None:
        return False
    return torch.cuda.get_device_capability()[0] >= 9


def _lora_batch_info():
    from kernel_oracle.reference.batch_info import LoRABatchInfo

    return LoRABatchInfo


# name imported from an ``sglang.*`` module -> a thunk building its stand-in
STAND_INS: dict[str, Callable[[], object]] = {
    "LoRABatchInfo": _lora_batch_info,
    "lora_envs": _LoraEnvs,
    "is_arch_support_pdl": lambda: _is_arch_support_pdl,
}


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


def imported_sglang_names(source: str) -> list[tuple[str, tuple[str, ...]]]:
    """``[(module, names)]`` of the ``from sglang... import ...`` statements of ``source``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "sglang":
            out.append((node.module, tuple(a.name for a in node.names)))
        elif isinstance(node, ast.Import) and any(a.name.split(".")[0] == "sglang" for a in node.names):
            out.append((node.names[0].name, ()))
    return out


def load_kernel_module(release: ReleaseFiles, path: str, variant: str) -> types.ModuleType:
    """Execute ``path`` of ``release`` as ``_kernel_oracle_sglang.<release>.<variant>.<file>``, its
    ``sglang`` imports answered by the release's helper files and :data:`STAND_INS` (see the Note).
    Raises :class:`LoaderError` (one line) when an import has no answer or the file fails to run."""
    key = (path, variant)
    if key in release._kv:
        return release._kv[key]
    origin = hashlib.sha1(release.origin.encode()).hexdigest()[:8]
    prefix = f"_kernel_oracle_sglang.v{_slug(release.version)}_{origin}.{variant}"
    names = set(release.names)
    loaded: dict[str, types.ModuleType] = {}

    def resolve(mod: str, fromlist) -> types.ModuleType:
        if not fromlist:
            raise ImportError(f"`import {mod}` in a kernel file: only `from sglang... import name` can be answered "
                              f"standalone")
        file = mod.replace(".", "/") + ".py"
        if file in names and file.rsplit("/", 1)[-1] == HELPER_FILE:
            return load(file)
        stand_in = types.ModuleType(f"{prefix}.stand_in.{mod}")
        for name in fromlist:
            if name not in STAND_INS:
                raise ImportError(f"`from {mod} import {name}`: the standalone loader has no stand-in for {name!r} "
                                  f"(known: {sorted(STAND_INS)})")
            setattr(stand_in, name, STAND_INS[name]())
        return stand_in

    real_import = builtins.__import__

    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and (name == "sglang" or name.startswith("sglang.")):
            return resolve(name, fromlist)
        return real_import(name, globals, locals, fromlist, level)

    own_builtins = dict(vars(builtins))
    own_builtins["__import__"] = guarded_import

    def load(file: str) -> types.ModuleType:
        if file in loaded:
            return loaded[file]
        folder, _, stem = module_name(file).rpartition(".")
        name = f"{prefix}.{_slug(folder)}.{stem}"  # ends in the file's own name: buckets compare it across releases
        spec = importlib.util.spec_from_file_location(name, release.disk(file))
        mod = importlib.util.module_from_spec(spec)
        mod.__dict__["__builtins__"] = own_builtins
        mod.__dict__["__kernel_oracle_origin__"] = f"{module_name(file)} of sglang {release.version} ({release.origin})"
        sys.modules[name] = mod  # Triton and inspect look functions' modules up by name
        loaded[file] = mod
        try:
            spec.loader.exec_module(mod)
        except Exception as exc:
            sys.modules.pop(name, None)
            loaded.pop(file, None)
            raise LoaderError(f"loading {module_name(file)} of sglang {release.version} standalone failed: "
                              f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc
        return mod

    mod = load(path)
    release._kv[key] = mod
    return mod


def write_slim_wheel(wheel: str | os.PathLike, dest_dir: str | os.PathLike) -> Path:
    """A copy of ``wheel`` holding only what the suite reads (the kv_b kernel files, their helper files,
    ``lora/utils.py``, the vision module and the dist-info metadata): ``sglang-X.Y.Z-kernels.whl``,
    a few hundred kB instead of 40 MB, for carrying to a GPU machine without a registry.  It is
    read like the full wheel (the loader never installs either)."""
    rel = wheel_release(wheel)
    found = locate_kernels(rel)
    if not found:
        raise LoaderError(f"{wheel}: sglang {rel.version} has no kv_b LoRA kernels to keep")
    keep = set(found.values())
    keep |= {n for n in rel.names if n.endswith("/" + HELPER_FILE) and any(n.rsplit("/", 1)[0] in p for p in keep)}
    keep |= {n for n in rel.names if n in ("sglang/srt/lora/utils.py", "sglang/srt/layers/attention/vision.py")
             or re.fullmatch(r"sglang-[^/]+\.dist-info/METADATA", n)}
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / f"sglang-{rel.version}-kernels.whl"
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for n in sorted(keep):
            zf.writestr(n, src.read(n))
    return out


if __name__ == "__main__":  # python -m kernel_oracle.fuzz.targets.sglang_wheel --slim DEST WHEEL...
    if len(sys.argv) < 4 or sys.argv[1] != "--slim":
        raise SystemExit("usage: python -m kernel_oracle.fuzz.targets.sglang_wheel --slim DEST_DIR WHEEL [WHEEL...]")
    for w in sys.argv[3:]:
        print(write_slim_wheel(w, sys.argv[2]))
