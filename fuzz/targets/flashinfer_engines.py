"""FlashInfer releases as an axis of the vision engine: ``flashinfer-cudnn@engine=0.7.4``.

Note [Engine versions]
----------------------
FlashInfer's cuDNN prefill changed between releases (its graph cache and its offsets handling), so a
finding of the ``flashinfer-cudnn`` target holds in the FlashInfer it ran on and may not in another.
Each release in :data:`ENGINE_RELEASES` is installed into a folder of its own,
``$KERNEL_ORACLE_FLASHINFER_SITES/<version>`` (default ``/tmp/flashinfer-sites``), by
``bash scripts/flashinfer_wheels.sh install DIR VERSION``: FlashInfer without its JIT sources
(``flashinfer/data``, which the cuDNN path never compiles), and the cuDNN frontend and TVM FFI it
imports, each as the wheel's files unpacked (never installed into the environment).

One process can hold one FlashInfer.  :func:`select_engine` puts the asked release's folder first on
``sys.path`` before anything imports ``flashinfer`` or ``cudnn``; when the process already holds
another release it refuses, naming both, rather than run a different engine than the spec names.
A campaign builds its target in a worker process of its own (the default), so each column of
``kernel-oracle matrix --targets flashinfer-cudnn --configurations all`` runs its own release.
Without ``@engine`` the target runs whatever ``import flashinfer`` finds.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

__all__ = ["ENGINE_RELEASES", "SITES_ENV", "engine_site", "select_engine", "sites_root"]

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


def sites_root() -> Path:
    """The folder holding one folder per installed FlashInfer release."""
    return Path(os.environ.get(SITES_ENV) or "/tmp/flashinfer-sites")


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
