"""The split-PV reduction (``docs/upstream/triton_split_pv.py``, the reproducer of the upstream report
beside it) is right under the interpreter, so a variant that is wrong when compiled on a GPU points at the
compiler (Note [Head-dim split])."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from kernel_oracle.kernels.interpreter import interpreting


def _load(relpath: str):
    """The script at ``relpath`` (from the repository root) as a module: ``tools/`` and ``docs/upstream/``
    are not installed, so nothing of the package can import them, and the tests load them by path."""
    path = Path(__file__).resolve().parents[1] / relpath
    spec = importlib.util.spec_from_file_location(f"_script_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # where Triton's JIT and pickling look a function's module up
    spec.loader.exec_module(module)
    return module


repro = _load("docs/upstream/triton_split_pv.py")


@pytest.mark.skipif(not interpreting(), reason="the CPU check of the reduction; on a GPU run the script itself")
@pytest.mark.parametrize("variant", repro.CPU_VARIANTS, ids=lambda v: f"split={v[3]}-rescale={v[4]}")
def test_every_variant_is_right_under_the_interpreter(variant):
    assert repro.run_variant(*variant, device="cpu") < 0.01


@pytest.mark.skipif(not interpreting(), reason="the CPU check of the reduction")
def test_an_unwritten_output_counts_as_wrong(monkeypatch):
    """The output starts as NaN: a kernel that writes nothing is reported, not passed."""
    class _NoLaunch:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: None

    monkeypatch.setattr(repro, "_pv_kernel", _NoLaunch())
    err = repro.run_variant(*repro.CPU_VARIANTS[0], device="cpu")
    assert not err < 0.01
