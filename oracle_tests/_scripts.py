"""Scripts that are not installed (``tools/``, ``docs/upstream/``), loaded by path for their tests.

Nothing of the package can import them (``oracle_tests/architecture/test_packaging.py`` checks), so a
test loads the file itself; the module is registered in ``sys.modules`` because Triton's JIT and
pickling look a function's module up there.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["ROOT", "load_script", "run_script"]


def load_script(relpath: str):
    """The script at ``relpath`` (from the repository root) as a module, loaded once."""
    path = ROOT / relpath
    name = f"_script_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def run_script(relpath: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
    """``python ROOT/relpath ARGS`` in a child process (text output captured)."""
    return subprocess.run([sys.executable, str(ROOT / relpath), *args], capture_output=True, text=True, **kwargs)
