"""The real-bug corpus travels in the wheel: ``kernel-oracle matrix`` and a campaign's known cases read
it from an installed copy, with no checkout beside it.

The wheel is built from a copy of this checkout, its file list must hold every corpus entry, and the
installed copy (``pip install --target``, run from a folder outside the checkout) loads the same
entries from its own ``kernel_oracle/corpus``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
_SKIP = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".whl", ".hypothesis")
_LOAD = r"""
import json
from kernel_oracle.jobs.bug_corpus import CORPUS_DIR, known_cases_for, load_corpus
print(json.dumps({"dir": str(CORPUS_DIR), "ids": [e.id for e in load_corpus()],
                  "known_cases": len(known_cases_for("sglang==0.5.12"))}))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    shutil.copytree(REPO_ROOT, src, ignore=_SKIP)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           str(src), "-w", str(work / "dist")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    (found,) = (work / "dist").glob("kernel_oracle-*.whl")
    return found


def test_the_wheel_holds_every_corpus_entry(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    entries = sorted(p.name for p in (REPO_ROOT / "corpus").glob("*.toml"))
    assert entries
    missing = [n for n in entries if f"kernel_oracle/corpus/{n}" not in names]
    assert not missing, f"corpus entries not in {wheel.name}: {missing}"
    assert "kernel_oracle/corpus/__init__.py" in names


def test_the_installed_copy_loads_its_corpus(wheel, tmp_path):
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile",
                           "--disable-pip-version-check", "--target", str(site), str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run([sys.executable, "-c", _LOAD], cwd=elsewhere, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(got["dir"]).resolve() == (site / "kernel_oracle" / "corpus").resolve()
    from kernel_oracle.jobs.bug_corpus import load_corpus

    assert got["ids"] == [e.id for e in load_corpus()]
    assert got["known_cases"] > 0
