"""The profiler driver for fused decode calls (``python tools/diag_lora_decode.py``):
it refuses a machine without CUDA in one line, rejects shapes it does not have, and on a GPU prints the
compiled variants and the timing a profiler run is read against."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

from ..conftest import HAS_CUDA
from .._scripts import load_script




diag_lora_decode = load_script("tools/diag_lora_decode.py")
ROOT = Path(__file__).resolve().parents[2]


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names = {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
    return names | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}


def test_nothing_installed_imports_the_tools():
    """tools/ is not installed (pyproject's packages leave it out), so an installed module that imported
    it would fail in every user's environment: every package folder is read for such an import."""
    folders = ["kernel_oracle", "reference", "kernels", "harness", "fuzz", "reports", "benchmarks"]
    offenders = [f"{path.relative_to(ROOT)}: {name}" for folder in folders for path in sorted((ROOT / folder).rglob("*.py"))
                 for name in _imported_modules(path) if name == "tools" or name.startswith("tools.")]
    assert not offenders, offenders
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    shipped = set(setup["packages"]) | set(setup.get("package-dir", {}).values())
    assert not [name for name in shipped if "tools" in name.split(".")], shipped


def test_unknown_shape_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        diag_lora_decode.main(["--shape", "prefill-8x2048"])
    assert exc.value.code == 2
    assert "invalid choice: 'prefill-8x2048'" in capsys.readouterr().err


@pytest.mark.skipif(HAS_CUDA, reason="the no-GPU refusal; a GPU runs the call itself (below)")
def test_without_cuda_it_says_so(capsys):
    assert diag_lora_decode.main(["--side", "v"]) == 2
    assert capsys.readouterr().err == "needs a CUDA device\n"


@pytest.mark.skipif(not HAS_CUDA, reason="times a fused decode call on the GPU")
@pytest.mark.parametrize("side", ["q", "v"])
def test_on_a_gpu_it_prints_variants_and_the_time(side, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("OUT", str(tmp_path))
    assert diag_lora_decode.main(["--side", side, "--calls", "1"]) == 0
    out = capsys.readouterr().out
    assert "regs" in out and f"decode-bs64 {side} fused us " in out, out
    assert ".version" in (tmp_path / f"decode-bs64_{side}.ptx").read_text()  # the PTX of a compiled variant
