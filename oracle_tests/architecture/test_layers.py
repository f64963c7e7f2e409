"""The architecture is a contract (``.importlinter``), checked here so CI enforces it.

The repository keeps the design card's top-level folders (``reference/``, ``kernels/``, ...) and
pyproject's package-dir table maps them under ``kernel_oracle.*``.  import-linter (through grimp)
reads packages from the file system, so the test first stages the *installed* layout -- a copy of
each mapped folder at its import path -- and lints that copy.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def stage_installed_layout(dest: Path) -> Path:
    """Copy every package of pyproject's package-dir table to where the wheel would put it."""
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping = config["package-dir"]
    for package in config["packages"]:
        # the nearest mapped ancestor decides the folder (kernel_oracle.kernels.lora -> kernels/lora)
        owner = max((p for p in mapping if package == p or package.startswith(p + ".")), key=len)
        source = REPO_ROOT / mapping[owner] / Path(*package[len(owner) + 1:].split(".") if package != owner else ())
        target = dest / Path(*package.split("."))
        target.mkdir(parents=True, exist_ok=True)
        for f in source.glob("*.py"):
            shutil.copy2(f, target / f.name)
    return dest


def test_staged_layout_has_every_package(tmp_path):
    root = stage_installed_layout(tmp_path)
    for sub in ("reference", "kernels", "kernels/lora", "kernels/vision", "harness", "fuzz", "fuzz/targets",
                "reports", "benchmarks", "cli", "jobs", "pytest"):
        assert (root / "kernel_oracle" / sub / "__init__.py").is_file(), sub


def lint(root: Path) -> subprocess.CompletedProcess:
    pytest.importorskip("importlinter", reason="import-linter is a test requirement (requirements-cpu.txt)")
    return subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                           "sys.exit(lint_imports_command())", str(REPO_ROOT / ".importlinter"), "--no-cache"],
                          cwd=root, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})


def test_import_contracts_are_kept(tmp_path):
    proc = lint(stage_installed_layout(tmp_path / "site"))
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "BROKEN" not in proc.stdout and "KEPT" in proc.stdout


def test_an_upward_import_breaks_the_contracts(tmp_path):
    """The contract can fail: the oracle importing the harness (even inside a function) is caught
    as a layer violation and as a cycle."""
    root = stage_installed_layout(tmp_path / "site")
    lora = root / "kernel_oracle" / "reference" / "lora.py"
    lora.write_text(lora.read_text() + "\n\ndef _upward():\n    from kernel_oracle.harness import check\n")
    proc = lint(root)
    assert proc.returncode == 1
    assert "kernel_oracle.reference is not allowed to import kernel_oracle.harness" in proc.stdout
    assert "No import cycle between or inside packages" in proc.stdout.split("Broken contracts")[1]
