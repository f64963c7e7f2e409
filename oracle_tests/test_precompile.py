"""Parallel precompilation children (Note [Parallel precompilation] in fuzz.precompile)."""

from __future__ import annotations

import pytest

from kernel_oracle.fuzz.campaign import run_campaign
from kernel_oracle.fuzz import precompile


def test_children_execute_the_campaigns_cases_and_stop(monkeypatch):
    """Two children draw lora cases from the campaign strategy and execute them until told to stop;
    none outlives :meth:`Precompile.stop`, which counts what they ran."""
    handle = precompile.start("triton", "lora", "cpu", seconds=60.0, limits="tiny", dtypes=("float16",),
                              categories=("valid",), ops=("step_a_v",), processes=2, seed=3)
    import time

    time.sleep(12.0)  # imports, then cases under the interpreter
    done = handle.stop()
    assert all(p.poll() is not None for p in handle.procs)
    assert done["processes"] == 2 and done["cases"] > 0, done


def test_a_campaign_records_its_precompilation(tmp_path, monkeypatch):
    """``precompile=True``: the campaign starts children for its clock and records them; by default it
    starts none (measured slower on the H200: Note [Parallel precompilation])."""
    monkeypatch.setattr(precompile, "default_processes", lambda: 1)
    rec = run_campaign(target="triton", op="step_a_v", time_s=10.0, seed=0, device="cpu", out_dir=tmp_path / "on",
                       progress=False, limits="tiny", precompile=True)
    assert rec["campaign"]["precompile"]["processes"] == 1 and rec["findings"] == []
    off = run_campaign(target="triton", op="step_a_v", budget=2, seed=0, device="cpu", out_dir=tmp_path / "off",
                       progress=False, limits="tiny")
    assert off["campaign"]["precompile"] is None


@pytest.mark.parametrize("cores,expected", [(1, 0), (4, 1), (16, 12), (64, 12)])
def test_default_processes_leave_cores_to_the_campaign(monkeypatch, cores, expected):
    monkeypatch.setattr(precompile.os, "cpu_count", lambda: cores)
    assert precompile.default_processes() == expected
