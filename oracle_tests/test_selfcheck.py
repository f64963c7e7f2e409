"""``kernel-oracle selfcheck``: its documented row format, its exit codes, and that it can fail."""

from __future__ import annotations

import torch

from kernel_oracle.reference import independent as ind
from kernel_oracle import selfcheck
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

    def off_by_a_bit(op, args):
        value, defined = real(op, args)
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
    assert cli_main(["selfcheck", "--device", "cpu", "--cases", "-1"]) == 2


def test_random_samples_are_reproducible():
    from kernel_oracle.harness.opinfo import OP_DB

    a = [s.problem for s in selfcheck.random_samples(OP_DB["vision"], torch.float16, 3, seed=5)]
    b = [s.problem for s in selfcheck.random_samples(OP_DB["vision"], torch.float16, 3, seed=5)]
    assert a == b and len(a) == 3
