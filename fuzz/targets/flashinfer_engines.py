"""FlashInfer releases as an axis of the vision engine: ``flashinfer-cudnn@engine=0.7.4``.

Note [Engine versions]
----------------------
FlashInfer's cuDNN prefill changed between releases (its graph cache and its offsets handling), so a
finding of the ``flashinfer-cudnn`` target holds in the FlashInfer it ran on and may not in another.
Each release in :data:`ENGINE_RELEASES` is installed into a folder of its own,
``$KERNEL_ORACLE_FLASHINFER_SITES/<version>`` (default ``flashinfer-sites/`` in the cache,
``~/.cache/kernel-oracle``), by
``bash scripts/flashinfer_wheels.sh install DIR VERSION``: FlashInfer without its JIT sources
(``flashinfer/data``, which the cuDNN path never compiles), and the cuDNN frontend and TVM FFI it
imports, each as the wheel's files unpacked (never installed into the environment).

One process can hold one FlashInfer.  :func:`select_engine` puts the asked release's folder first on
``sys.path`` before anything imports ``flashinfer`` or ``cudnn``; when the process already holds
another release it refuses, naming both, rather than run a different engine than the spec names.
A campaign builds its target in a worker process of its own (the default), so each column of
``kernel-oracle matrix --targets flashinfer-cudnn --configurations all`` runs its own release.
Without ``@engine`` the target runs whatever ``import flashinfer`` finds.

An engine folder is code this process imports, so it must be the user's own (:func:`site_problem`): the
folder, everything in it, and the sites folder are owned by the user (or root) and writable by no one
else, none of them a link, and each folder above them is writable by no one else unless it is sticky
(``/tmp``: others cannot replace what the user made there).  A folder another local user could have
planted ``flashinfer/__init__.py`` in is refused in one line, before anything is imported.  And nothing
is imported where the target cannot run: the device and CUDA are checked first
(:mod:`.flashinfer_cudnn`).
"""

from __future__ import annotations

import importlib
import os
import stat
import sys
from pathlib import Path

__all__ = ["ENGINE_RELEASES", "SITES_ENV", "engine_site", "select_engine", "site_problem", "sites_root"]

# FlashInfer release -> the wheels its cuDNN prefill imports (scripts/flashinfer_wheels.sh reads this
# table through `python -m kernel_oracle.fuzz.targets.flashinfer_engines wheels VERSION`); the first is
# the one SGLang's releases pin, the last the newest on PyPI when this table was written
ENGINE_RELEASES = {
    "0.6.18": ("flashinfer-python==0.6.18", "nvidia-cudnn-frontend==1.28.0", "apache-tvm-ffi==0.1.11"),
    "0.7.4": ("flashinfer-python==0.7.4", "nvidia-cudnn-frontend==1.32.0", "apache-tvm-ffi==0.1.15.post2",
              "nvidia-ml-py==13.615.71", "requests==2.34.2", "urllib3==2.8.0", "idna==3.21",
              "certifi==2026.10.19.post1"),
}
SITES_ENV = "KERNEL_ORACLE_FLASHINFER_SITES"
# the top-level modules an engine folder provides: none of them may come from elsewhere
_ENGINE_MODULES = ("flashinfer", "cudnn", "tvm_ffi")
# the most entries of an engine folder its ownership check looks at (an installed release has a few thousand)
MAX_SITE_ENTRIES = 200_000


def sites_root() -> Path:
    """The folder holding one folder per installed FlashInfer release: ``$KERNEL_ORACLE_FLASHINFER_SITES``,
    else ``flashinfer-sites`` in the cache (:func:`~.sglang_wheel.cache_dir`, under the user's home)."""
    from .sglang_wheel import cache_dir  # here: scripts/flashinfer_wheels.sh runs this file on its own

    named = os.environ.get(SITES_ENV)
    return Path(named).expanduser() if named else cache_dir() / "flashinfer-sites"


def _foreign(st: os.stat_result, *, sticky_ok: bool) -> str:
    """Why a file of status ``st`` could have been written by another user ("" when it could not)."""
    if st.st_uid not in (os.getuid(), 0):
        return f"is owned by uid {st.st_uid}, not by you"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not (sticky_ok and st.st_mode & stat.S_ISVTX):
        return "is writable by other users"
    return ""


def site_problem(site: Path) -> str:
    """Why the engine folder ``site`` is not safe to import from ("" when it is): Note [Engine versions]."""
    try:
        for above in reversed(site.parent.absolute().parents):  # /, /root, ... down to the sites folder's parent
            link = os.lstat(above)
            if stat.S_ISLNK(link.st_mode) and link.st_uid not in (os.getuid(), 0):
                return f"{above} is a link owned by uid {link.st_uid}, not by you"
            why = _foreign(os.stat(above), sticky_ok=True)
            if why:
                return f"{above} {why}"
        root = site.parent
        for path in (root, site):
            st = os.lstat(path)
            why = "is a link" if stat.S_ISLNK(st.st_mode) else _foreign(st, sticky_ok=False)
            if why:
                return f"{path} {why}"
        seen = 0
        for folder, dirs, files in os.walk(site):
            for name in dirs + files:
                seen += 1
                if seen > MAX_SITE_ENTRIES:
                    return f"{site} holds more than {MAX_SITE_ENTRIES} files; no installed release has that many"
                path = os.path.join(folder, name)
                st = os.lstat(path)
                why = "is a link" if stat.S_ISLNK(st.st_mode) else _foreign(st, sticky_ok=False)
                if why:
                    return f"{path} {why}"
    except OSError as exc:
        return f"{exc.filename or site}: {exc.strerror or exc}"
    return ""


def engine_site(version: str) -> Path:
    """Where ``scripts/flashinfer_wheels.sh install DIR VERSION`` puts FlashInfer ``version``."""
    return sites_root() / version


def _held(name: str) -> tuple[str, str]:
    """``(version, file)`` of the already imported top-level module ``name`` (``("", "")`` if none)."""
    mod = sys.modules.get(name)
    if mod is None:
        return "", ""
    return str(getattr(mod, "__version__", "?")), str(getattr(mod, "__file__", "") or "")


def select_engine(version: str) -> str:
    """Make ``import flashinfer`` in this process give FlashInfer ``version`` (Note [Engine versions]);
    returns "" when it does, else why not (one line naming the fix)."""
    if version not in ENGINE_RELEASES:
        return f"engine={version!r}: the FlashInfer releases this suite knows are {sorted(ENGINE_RELEASES)}"
    site = engine_site(version)
    held, where = _held("flashinfer")
    if held:
        if held == version and Path(where).resolve().is_relative_to(site.resolve()):
            return ""
        return (f"engine={version}: this process already imported FlashInfer {held} from {where}; one process "
                f"holds one FlashInfer: run each engine in its own worker (leave --no-isolate off)")
    if not (site / "flashinfer" / "__init__.py").is_file():
        return (f"engine={version}: FlashInfer {version} is not installed in {site} (where a registry is reachable: "
                f"bash scripts/flashinfer_wheels.sh download .whl/flashinfer {version}; then, on the GPU machine: "
                f"bash scripts/flashinfer_wheels.sh install .whl/flashinfer {version})")
    unsafe = site_problem(site)
    if unsafe:
        return (f"engine={version}: not imported from {site}: {unsafe}, so another user could have put code there; "
                f"install the release into a folder of your own ({SITES_ENV}, or the cache's default)")
    for name in _ENGINE_MODULES[1:]:
        other, other_file = _held(name)
        if other and not Path(other_file).resolve().is_relative_to(site.resolve()):
            return (f"engine={version}: this process already imported {name} {other} from {other_file}, not the "
                    f"one installed beside FlashInfer {version} in {site}")
    sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    try:
        import flashinfer
    except Exception as exc:  # noqa: BLE001 - the reason is the report
        return f"engine={version}: import flashinfer from {site} failed: {type(exc).__name__}: {exc}"
    got = str(getattr(flashinfer, "__version__", "?"))
    if got != version:
        return f"engine={version}: {site} holds FlashInfer {got}; reinstall it with scripts/flashinfer_wheels.sh"
    return ""


def _main(argv: list) -> int:
    """``wheels VERSION``: the pinned wheels of that release, one per line (for the shell script)."""
    if len(argv) != 2 or argv[0] != "wheels" or argv[1] not in ENGINE_RELEASES:
        print(f"usage: python -m kernel_oracle.fuzz.targets.flashinfer_engines wheels "
              f"{{{','.join(ENGINE_RELEASES)}}}", file=sys.stderr)
        return 2
    print("\n".join(ENGINE_RELEASES[argv[1]]))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
