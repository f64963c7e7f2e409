"""Each target kind's resume identity hashes the code that target runs (fuzz/targets/identity.py):
an edit of our kernels changes the identity of triton and the mutants, not of the reference,
flashinfer-cudnn or torch-varlen; an edit of the reference changes every target that resolves or
falls back on it; another FlashInfer or torch version changes only the target that calls it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kernel_oracle.fuzz.targets import identity
from kernel_oracle.harness.targets import TargetSpec

SPECS = ("reference", "triton", "mutant:lora_wrong_slot", "flashinfer-cudnn", "torch-varlen")
REAL_DIST = getattr(identity, "_dist_version", None)


@pytest.fixture
def copies(tmp_path, monkeypatch):
    """Our kernels and reference packages as copies the test may edit, in place of the real ones."""
    dirs = {}
    for name in ("kernel_oracle.kernels", "kernel_oracle.reference"):
        real = identity._package_dir(name)
        dirs[name] = tmp_path / name.rsplit(".", 1)[1]
        shutil.copytree(real, dirs[name], ignore=shutil.ignore_patterns("__pycache__"))
    real_dir = identity._package_dir
    monkeypatch.setattr(identity, "_package_dir", lambda name: dirs.get(name) or real_dir(name))
    return dirs


def _hashes() -> dict:
    return {s: identity.code_hash(TargetSpec.parse(s)) for s in SPECS}


def _changed(before: dict, after: dict) -> set:
    return {s for s in SPECS if before[s] != after[s]}


def _edit(directory: Path) -> None:
    f = sorted(directory.rglob("*.py"))[0]
    f.write_text(f.read_text() + "\n# edited\n")


def test_each_builtin_has_its_own_identity(copies):
    hashes = _hashes()
    assert len(set(hashes.values())) == len(SPECS), hashes
    assert not any(h.startswith("unlocated") for h in hashes.values())


def test_a_kernels_edit_changes_only_the_targets_that_run_our_kernels(copies):
    before = _hashes()
    _edit(copies["kernel_oracle.kernels"])
    assert _changed(before, _hashes()) == {"triton", "mutant:lora_wrong_slot"}


def test_a_reference_edit_changes_every_target_that_runs_it(copies):
    before = _hashes()
    _edit(copies["kernel_oracle.reference"])
    assert _changed(before, _hashes()) == set(SPECS)


@pytest.mark.parametrize("dist, target", [("flashinfer-python", "flashinfer-cudnn"),
                                          ("nvidia-cudnn-frontend", "flashinfer-cudnn"),
                                          ("torch", "torch-varlen")])
def test_another_engine_version_changes_only_its_target(copies, monkeypatch, dist, target):
    before = _hashes()
    monkeypatch.setattr(identity, "_dist_version", lambda name: "9.9.9" if name == dist else REAL_DIST(name))
    assert _changed(before, _hashes()) == {target}
