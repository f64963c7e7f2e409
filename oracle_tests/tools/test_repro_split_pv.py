"""The split-PV reduction (``docs/upstream/triton_split_pv.py``, the reproducer of the upstream report
beside it) is right under the interpreter, so a variant that is wrong when compiled on a GPU points at the
compiler (Note [Head-dim split])."""

from __future__ import annotations


import pytest

from kernel_oracle.kernels.interpreter import interpreting
from .._scripts import load_script




repro = load_script("docs/upstream/triton_split_pv.py")


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
