"""``kernel-oracle selfcheck``: its documented row format, its exit codes, and that it can fail."""

from __future__ import annotations

import pytest
import torch

from kernel_oracle.reference import independent_lora as ind
from kernel_oracle.jobs import selfcheck
from kernel_oracle.cli import main as cli_main

KEYS = {"op", "family", "dtype", "case", "passed", "err", "allowed", "ratio", "message"}


def test_rows_are_documented_and_pass():
    rows = selfcheck.run_selfcheck("cpu", cases=1, seed=3)
    assert rows and all(set(r) == KEYS for r in rows)
    failed = [r for r in rows if not r["passed"]]
    assert not failed, selfcheck.summarize(failed)
    assert {r["dtype"] for r in rows} == {"float16", "bfloat16", "float32", "float64", "-"}
    assert any(r["case"].startswith("random-") for r in rows)
    assert all(r["ratio"] is None for r in rows if r["dtype"] == "-")


def test_a_wrong_formulation_fails(monkeypatch):
    real = ind.lora_independent

    def off_by_a_bit(op, args, kwargs=None):
        value, defined = real(op, args, kwargs)
        return value * (1 + 1e-3), defined

    monkeypatch.setattr(ind, "lora_independent", off_by_a_bit)
    rows = selfcheck.run_selfcheck("cpu", cases=0, seed=0)
    lora = [r for r in rows if r["family"] == "lora" and r["dtype"] == "float64"]
    assert any(not r["passed"] and r["ratio"] > 1 for r in lora)
    assert all(r["passed"] for r in rows if r["family"] == "vision")


def test_cli_exit_code(capsys):
    assert cli_main(["selfcheck", "--device", "cpu", "--cases", "0"]) == 0
    out = capsys.readouterr().out
    assert "checks passed" in out and "max ratio" in out
    with pytest.raises(SystemExit) as exc:  # argparse's usage error: one line, exit 2
        cli_main(["selfcheck", "--device", "cpu", "--cases", "-1"])
    assert exc.value.code == 2 and "argument --cases: expected 0 or more but got '-1'" in capsys.readouterr().err


def test_random_samples_are_reproducible():
    from kernel_oracle.harness.opinfo import OP_DB

    a = [s.problem for s in selfcheck.random_samples(OP_DB["vision"], torch.float16, 3, seed=5)]
    b = [s.problem for s in selfcheck.random_samples(OP_DB["vision"], torch.float16, 3, seed=5)]
    assert a == b and len(a) == 3


def test_error_rows_are_the_opinfo_error_inputs_and_can_fail(monkeypatch):
    """One error row per OpInfo error input (a sample broken by its mutations), in order; a row whose
    expected text is wrong fails and says what was raised."""
    import dataclasses

    from kernel_oracle.harness import opinfo

    info = opinfo.OP_DB["step_a_v"]
    errs = list(info.error_inputs("cpu"))
    slot = next(e for e in errs if e.contract_id == "lora.strict.slot_out_of_range")
    wrong = dataclasses.replace(slot, fields={**slot.fields, "value": 99})
    only = dataclasses.replace(info, dtypes=(torch.float32,), sample_inputs=lambda device, dtype: iter(()),
                               error_inputs=lambda device: iter([*errs, wrong]))
    monkeypatch.setattr(opinfo, "OP_DB", {"step_a_v": only})
    rows = [r for r in selfcheck.run_selfcheck("cpu", cases=0) if r["dtype"] == "-"]
    assert [r["case"] for r in rows] == [f"error:{e.contract_id}#{i}" for i, e in enumerate([*errs, wrong])]
    assert all(r["passed"] for r in rows[:-1]), selfcheck.summarize(rows)
    assert not rows[-1]["passed"] and "weight_indices[1]=99" in rows[-1]["message"] and "got ValueError" in rows[-1]["message"]
