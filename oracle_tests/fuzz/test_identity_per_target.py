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
    monkeypatch.setattr(identity, "_dist_version",
                        lambda name, path=None: "9.9.9" if name == dist else REAL_DIST(name, path))
    assert _changed(before, _hashes()) == {target}


def _plant_engine(root: Path, version: str, frontend: str) -> None:
    """A FlashInfer release folder as scripts/flashinfer_wheels.sh leaves it: the dist-info of each wheel."""
    for dist, v in (("flashinfer_python", version), ("nvidia_cudnn_frontend", frontend)):
        info = root / version / f"{dist}-{v}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist.replace('_', '-')}\nVersion: {v}\n")


def test_each_engine_release_is_an_identity_of_its_own_read_in_its_folder(tmp_path, monkeypatch):
    from kernel_oracle.fuzz.targets.flashinfer_engines import SITES_ENV

    monkeypatch.setenv(SITES_ENV, str(tmp_path))
    _plant_engine(tmp_path, "0.6.18", "1.28.0")
    _plant_engine(tmp_path, "0.7.4", "1.32.0")
    old, new = (identity.code_hash(TargetSpec.parse(f"flashinfer-cudnn@engine={v}")) for v in ("0.6.18", "0.7.4"))
    assert old != new
    assert identity._dist_version("flashinfer-python", [str(tmp_path / "0.7.4")]) == "0.7.4"
    before = new
    shutil.rmtree(tmp_path / "0.7.4" / "nvidia_cudnn_frontend-1.32.0.dist-info")
    _plant_engine(tmp_path / "x", "0.7.4", "1.33.0")  # a reinstall with another frontend
    shutil.move(str(tmp_path / "x" / "0.7.4" / "nvidia_cudnn_frontend-1.33.0.dist-info"), str(tmp_path / "0.7.4"))
    assert identity.code_hash(TargetSpec.parse("flashinfer-cudnn@engine=0.7.4")) != before
