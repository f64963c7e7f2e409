"""SGLang's kv_b LoRA kernel files, loaded standalone from a wheel or an installed distribution.

Note [Loading SGLang's kernels standalone]
------------------------------------------
The kv_b LoRA kernels of every SGLang release are one Python file (``kv_b_lora_absorbed.py``, a
default and a TRT-LLM-style variant) that needs only torch, triton, a ``kernel_utils`` helper file
beside it, and a few names from the rest of SGLang (docs/semantics.md#where-sglang-keeps-the-kernels).
Importing it through the package runs ``sglang/__init__`` and ``sglang.srt.lora.utils``, which pull
in transformers, pydantic, zmq, aiohttp and more; on a machine with torch and triton alone that
import fails.  So a release is tested without installing it:

1. **files**: a :class:`ReleaseFiles` lists a release's files and reads them without importing
   anything: a wheel (a zip; :func:`find_wheel` takes it from ``--sglang-wheel``, the cache, or
   ``pip download --no-deps``) or an installed distribution (``importlib.metadata``'s ``files()``);
2. **locate**: :func:`locate_kernels` tries the module table of docs/semantics.md#where-sglang-keeps-the-kernels first, then searches the
   release's ``sglang/**.py`` files for ``def step_a_q_fwd(``; the path says the variant
   (``trtllm_lora_temp`` -> ``trt``);
3. **load**: :func:`load_kernel_module` executes the file under a private module name
   (``_kernel_oracle_sglang.<release>.<variant>.<folder>.<file>``) with its own ``__import__``: an ``sglang.*``
   import of a ``kernel_utils`` file of the same release loads that file the same way; the other
   ``sglang`` names the kernel files import get the small stand-ins of :data:`STAND_INS`; anything
   else is refused with a one-line reason.  ``sys.modules`` never holds an ``sglang`` entry.

The stand-ins (read from every release, 0.5.12 - 0.5.23): ``LoRABatchInfo`` (only a type annotation
in the kernels; ours has the same fields), ``lora_envs`` (the TRT variant's experimental switches:
:class:`~.sglang_switches.LoraEnvs`, every switch the release's own ``environ.py`` declares, read
as the target's configuration says) and ``is_arch_support_pdl`` (programmatic dependent launch: the
configuration's ``pdl``, else SM90+ CUDA and never in the interpreter); Note [SGLang switches].
Each configuration loads the file as its own module.  Extracted files live in the cache
(:func:`cache_dir`), so Triton reads real source files.

Identity: :func:`kernel_identity` hashes the syntax tree of the kernel file and of the helper files
it loads (docstrings, comments, layout and the module paths of its ``sglang`` imports aside: a
release that only moved the files runs the same code), so the release matrix tests each distinct
code once.

Note [Wheel members as data]
----------------------------
A wheel is a file the suite reads, not one it trusts (``--sglang-wheel`` names any file; anything named
``sglang-*.whl`` in the cache is taken).  So :func:`wheel_release` refuses, in one line naming the member,
a wheel with a member whose name could leave the extraction folder (absolute, ``..``, a drive or a
backslash) or that is a symbolic link, or with more members or bytes than any wheel has
(:data:`MAX_MEMBERS`, :data:`MAX_WHEEL_BYTES`); a member is read at most :data:`MAX_MEMBER_BYTES` bytes (SGLang's
largest source file is under 0.5 MB: a larger one is refused before it is decompressed, and a header that
understates the size stops there too); and a member is extracted only to a path inside the release's
extraction folder, through a new file renamed into place (never through a link planted there).
"""

from __future__ import annotations

import ast
import builtins
import copy
import hashlib
import importlib.util
import os
import re
import stat
import subprocess
import sys
import types
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from kernel_oracle.harness.data_files import write_bytes

from .sglang_switches import LoraEnvs, ReleaseConfiguration, declared_switches, hardware_pdl

__all__ = ["KNOWN_KERNEL_FILES", "LoaderError", "MAX_MEMBERS", "MAX_MEMBER_BYTES", "MAX_WHEEL_BYTES", "ReleaseFiles",
           "STAND_INS", "cache_dir", "code_identity", "find_wheel", "helper_file", "import_closure",
           "installed_release", "kernel_files", "kernel_identity", "load_kernel_module", "locate_kernels",
           "switch_module", "wheel_release"]

# the table of docs/semantics.md#where-sglang-keeps-the-kernels, newest layout first: variant -> the kernel file's path in each layout
KNOWN_KERNEL_FILES = {
    "default": ("sglang/kernels/ops/lora/dense/kv_b_lora_absorbed.py",  # 0.5.23
                "sglang/kernels/ops/gemm/kv_b_lora_absorbed.py",  # 0.5.17 - 0.5.19
                "sglang/srt/lora/triton_ops/kv_b_lora_absorbed.py"),  # 0.5.12 - 0.5.15.post1
    "trt": ("sglang/kernels/ops/lora/dense/trtllm_lora_temp/kv_b_lora_absorbed.py",
            "sglang/kernels/ops/gemm/trtllm_lora_temp/kv_b_lora_absorbed.py",
            "sglang/srt/lora/trtllm_lora_temp/triton_ops/kv_b_lora_absorbed.py"),  # from 0.5.13
}
ENTRY_MARK = "def step_a_q_fwd("
# the helper files a kernel file may load from its own release (everything else is a stand-in)
HELPER_FILE = "kernel_utils.py"
# what a slim wheel keeps besides the kernel files and their helpers: the batch-info type, the
# switches' declarations and the vision module
SLIM_EXTRAS = ("sglang/srt/lora/utils.py", "sglang/srt/lora/trtllm_lora_temp/environ.py",
               "sglang/srt/layers/attention/vision.py")
CACHE_ENV = "KERNEL_ORACLE_CACHE"
PIP_TIMEOUT_S = 600
# the most bytes one wheel member is read, the most members and bytes a wheel may have (Note [Wheel members as
# data]; SGLang's wheels hold about 6,400 members in 40 MB)
MAX_MEMBER_BYTES = 16 * 2**20
MAX_MEMBERS = 100_000
MAX_WHEEL_BYTES = 2**30


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
    loaded: dict = field(default_factory=dict, repr=False)  # modules and parsed code, by what was loaded


def wheel_release(path: str | os.PathLike) -> ReleaseFiles:
    """The files of an SGLang wheel; kernel files are extracted to the cache when loaded (Note [Wheel
    members as data]: a member that could leave the extraction folder, or a link, refuses the wheel)."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_WHEEL_BYTES:
            raise LoaderError(f"{path} holds {size} bytes, more than the {MAX_WHEEL_BYTES} of any wheel the suite "
                              f"reads")
        zf = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise LoaderError(f"{path} is not a readable wheel ({type(exc).__name__}: {exc}); pass the path of an "
                          f"sglang-X.Y.Z-*.whl file") from None
    if len(zf.infolist()) > MAX_MEMBERS:
        raise LoaderError(f"{path} holds {len(zf.infolist())} members, more than the {MAX_MEMBERS} of any wheel the "
                          f"suite reads")
    for info in zf.infolist():
        why = _unsafe_member(info)
        if why:
            raise LoaderError(f"{path}: member {info.filename!r} {why}; no wheel the suite reads has one (refused, "
                              f"nothing extracted)")
    names = tuple(n for n in zf.namelist() if not n.endswith("/"))
    version = _wheel_version(path, names)
    digest = hashlib.sha1(f"{path.name}:{path.stat().st_size}".encode()).hexdigest()[:10]
    root = cache_dir() / "extracted" / f"sglang-{version}-{digest}"

    def member(name: str) -> bytes:
        info = zf.getinfo(name)
        if info.file_size > MAX_MEMBER_BYTES:
            raise LoaderError(f"{path}: member {name!r} holds {info.file_size} bytes, more than the "
                              f"{MAX_MEMBER_BYTES} a file the suite reads may have")
        with zf.open(info) as fh:
            data = fh.read(MAX_MEMBER_BYTES + 1)
        if len(data) > MAX_MEMBER_BYTES:  # a header that understates the size
            raise LoaderError(f"{path}: member {name!r} holds more than the {MAX_MEMBER_BYTES} bytes a file the "
                              f"suite reads may have")
        return data

    def read(name: str) -> str:
        return member(name).decode("utf-8")

    def disk(name: str) -> Path:
        target = _inside(root, name)
        data = member(name)
        if target.is_symlink() or not target.is_file() or target.read_bytes() != data:
            target.parent.mkdir(parents=True, exist_ok=True)
            _inside(root, name)  # again, now that its folders exist: none of them may be a link out of root
            write_bytes(target, data)  # a temporary file of its own: pytest workers extract one release at once
        return target

    return ReleaseFiles(version, f"wheel {path}", names, read, disk)


def _unsafe_member(info: zipfile.ZipInfo) -> str:
    """Why a wheel member cannot be extracted as it is named ("" when it can): Note [Wheel members as data]."""
    name = info.filename
    parts = name.rstrip("/").split("/")
    if "\\" in name or "\0" in name or name.startswith("/") or re.match(r"[A-Za-z]:", name):
        return "is not a relative path of '/'-separated names"
    if any(p in ("", ".", "..") for p in parts):
        return "has an empty, '.' or '..' part: it would be written outside the extraction folder"
    if stat.S_ISLNK(info.external_attr >> 16):
        return "is a symbolic link"
    return ""


def _inside(root: Path, name: str) -> Path:
    """``root / name``, or :class:`LoaderError` when its folder resolves outside ``root`` (a link on the way)."""
    target = root / name
    if not target.parent.resolve().is_relative_to(root.resolve()):
        raise LoaderError(f"{name}: its extracted path {target} leaves {root} (a link in the cache); remove {root}")
    return target


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
    """``variant -> kernel file`` of ``release`` (``default``, ``trt``): the table of docs/semantics.md#where-sglang-keeps-the-kernels first, then a
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

def _lora_batch_info(release: ReleaseFiles, config: ReleaseConfiguration, module: str):
    from kernel_oracle.reference.batch_info import LoRABatchInfo

    return LoRABatchInfo


def _lora_envs(release: ReleaseFiles, config: ReleaseConfiguration, module: str) -> LoraEnvs:
    """The release's own switches (its ``environ.py``, the module the kernel imports them from)."""
    file = module.replace(".", "/") + ".py"
    return LoraEnvs(declared_switches(release.read(file) if file in release.names else None), config)


def _pdl(release: ReleaseFiles, config: ReleaseConfiguration, module: str):
    return (lambda: config.pdl) if config.pdl is not None else hardware_pdl


# name imported from an ``sglang.*`` module -> its stand-in ``(release, configuration, module) -> value``
STAND_INS: dict[str, Callable[[ReleaseFiles, ReleaseConfiguration, str], object]] = {
    "LoRABatchInfo": _lora_batch_info,
    "lora_envs": _lora_envs,
    "is_arch_support_pdl": _pdl,
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


def helper_file(release: ReleaseFiles, module: str) -> Optional[str]:
    """The release's own helper file that ``from <module> import ...`` names, or None (a stand-in)."""
    file = module.replace(".", "/") + ".py"
    return file if file in release.names and file.rsplit("/", 1)[-1] == HELPER_FILE else None


def load_kernel_module(release: ReleaseFiles, path: str, variant: str,
                       config: ReleaseConfiguration = ReleaseConfiguration(), *,
                       own_file: Optional[Callable[[ReleaseFiles, str], Optional[str]]] = None,
                       stand_ins: Optional[dict] = None, also: tuple = ()) -> types.ModuleType:
    """Execute ``path`` of ``release`` as ``_kernel_oracle_sglang.<release>.<variant>[.<config>].<file>``,
    its ``sglang`` imports answered by the release's own files (``own_file(release, module)``: the
    file that ``from <module> import ...`` loads as a real module, or None; default: the
    ``kernel_utils.py`` helpers) and by stand-ins (``stand_ins``: name -> factory, default
    :data:`STAND_INS`; see the Note) under ``config``; the files ``also`` are loaded beside it, into the
    same modules (a code path whose entry file does not import all it runs).  Raises
    :class:`LoaderError` (one line) when an import has no answer or a file fails to run."""
    own_file = own_file or helper_file
    stand_ins = STAND_INS if stand_ins is None else stand_ins
    key = (path, variant, config)
    if key in release.loaded:
        return release.loaded[key]
    origin = hashlib.sha1(release.origin.encode()).hexdigest()[:8]
    tag = "" if config == ReleaseConfiguration() else "_" + hashlib.sha1(repr(config).encode()).hexdigest()[:8]
    prefix = f"_kernel_oracle_sglang.v{_slug(release.version)}_{origin}.{variant}{tag}"
    loaded: dict[str, types.ModuleType] = {}

    def resolve(mod: str, fromlist) -> types.ModuleType:
        if not fromlist:
            raise ImportError(f"`import {mod}` in a kernel file: only `from sglang... import name` can be answered "
                              f"standalone")
        helper = own_file(release, mod)
        if helper is not None:
            return load(helper)
        stand_in = types.ModuleType(f"{prefix}.stand_in.{mod}")
        for name in fromlist:
            if name not in stand_ins:
                raise ImportError(f"`from {mod} import {name}`: the standalone loader has no stand-in for {name!r} "
                                  f"(known: {sorted(stand_ins)})")
            setattr(stand_in, name, stand_ins[name](release, config, mod))
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
    for extra in also:
        load(extra)
    release.loaded[key] = mod
    return mod


# ---- identity ------------------------------------------------------------------------------------

def _without_docstrings(node: ast.AST) -> ast.AST:
    node = copy.deepcopy(node)
    for n in ast.walk(node):
        body = getattr(n, "body", None)
        if (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            n.body = body[1:] or [ast.Pass()]
    return node


def code_identity(nodes, extra: str = "") -> str:
    """A hash of ``nodes``' syntax trees (docstrings, comments and layout aside) and ``extra``."""
    h = hashlib.sha256()
    for node in nodes:
        h.update(ast.dump(_without_docstrings(node)).encode())
    h.update(extra.encode())
    return h.hexdigest()[:16]


def import_closure(release: ReleaseFiles, roots: list, own_file=None) -> list[str]:
    """``roots`` and every file of ``release`` they load as a module (``own_file(release, module)``, default
    :func:`helper_file`), recursively through their ``from sglang... import`` statements, in load order."""
    own_file = own_file or helper_file
    out, todo = [], list(roots)
    while todo:
        file = todo.pop(0)
        if file in out:
            continue
        out.append(file)
        todo.extend(h for mod, _ in imported_sglang_names(release.read(file))
                    if (h := own_file(release, mod)) is not None)
    return out


def kernel_files(release: ReleaseFiles, path: str) -> list[str]:
    """``path`` and the helper files of ``release`` it loads, recursively (the code a kernel target runs)."""
    return import_closure(release, [path])


def switch_module(release: ReleaseFiles, path: str) -> Optional[str]:
    """The module ``path`` (or a helper it loads) imports ``lora_envs`` from, or None."""
    for file in kernel_files(release, path):
        for mod, names in imported_sglang_names(release.read(file)):
            if "lora_envs" in names:
                return mod
    return None


def kernel_identity(release: ReleaseFiles, path: str) -> str:
    """The identity of ``path`` and the helper files it loads (see the Note): the syntax trees with
    the ``from sglang... import`` statements reduced to the names they import."""
    key = ("identity", path)
    if key not in release.loaded:
        tree = ast.parse(release.read(path))
        body, names, helpers = [], [], []
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "sglang":
                names.extend(a.name for a in node.names)
                helper = helper_file(release, node.module)
                if helper is not None:
                    helpers.append(kernel_identity(release, helper))
            else:
                body.append(node)
        release.loaded[key] = code_identity(body, ",".join(sorted(names) + sorted(helpers)))
    return release.loaded[key]
