"""The matrix's budget and its columns side by side (Note [Matrix budget] in ``kernel_oracle.jobs.matrix_columns``):
the newest release's code and targets that are no release get the matrix's time or cases, older releases a
regression budget; a vision peer is no LoRA column; on a device with several slots the columns run at once,
and a column whose campaign cannot run is a failed column, never a silent one."""

from __future__ import annotations

import pytest

from kernel_oracle.jobs import matrix as matrix_job
from kernel_oracle.jobs import matrix_columns
from kernel_oracle.jobs.matrix import Column, plan_columns, run_matrix
from kernel_oracle.jobs.matrix_columns import case_split, column_config, is_current, newest_release, run_campaigns


def test_the_newest_release_and_targets_that_are_no_release_are_current():
    specs = ["sglang==0.5.12", "sglang-trt==0.5.23@lora_opti=on", "sglang==0.5.9", "flashinfer-cudnn@engine=0.7.4"]
    assert newest_release(specs) == "0.5.23" and newest_release(["triton"]) is None
    assert is_current(["sglang==0.5.21", "sglang==0.5.23"], "0.5.23")  # a range that reaches today
    assert not is_current(["sglang==0.5.12", "sglang==0.5.13.post1"], "0.5.23")
    assert is_current(["flashinfer-cudnn@engine=0.6.18"], "0.5.23") and is_current(["triton"], None)


@pytest.mark.parametrize("config, current, want", [
    ({"time_s": 30.0, "budget": None}, True, {"time_s": 30.0, "budget": None}),
    ({"time_s": 30.0, "budget": None}, False, {"time_s": 30.0, "budget": 7}),  # the clock stays, cases capped
    ({"time_s": None, "budget": 3}, False, {"time_s": None, "budget": 3}),  # fewer asked: fewer run
    ({"time_s": None, "budget": 50}, False, {"time_s": None, "budget": 7}),
])
def test_a_regression_column_runs_at_most_its_budget(config, current, want):
    assert column_config(config, current, regression_cases=7) == want


def test_a_vision_peer_is_no_column_of_the_lora_or_csgmv_family():
    assert matrix_job._applies("flashinfer-cudnn@engine=0.6.18", "lora", None, several=True) is False
    assert matrix_job._applies("flashinfer-cudnn@engine=0.6.18", "csgmv", None, several=False) is False
    assert matrix_job._applies("torch-varlen", "lora", None, several=True) is False
    assert matrix_job._applies("flashinfer-cudnn@engine=0.6.18", "vision", None, several=True) is None


def test_the_current_columns_start_first_and_the_split_is_reported(tmp_path, monkeypatch):
    cols = plan_columns(["sglang==0.5.12", "sglang==0.5.23", "sglang==0.5.14"], ["lora"], lambda s, f: s)
    seen = []

    def on_record(column, rec, problem):
        seen.append((column.label, rec["budget"]))

    calls = []
    monkeypatch.setattr(matrix_columns, "campaign_record",
                        lambda tested, op, config, out_dir, known_cases=(): calls.append(tested) or config)
    run_campaigns(cols, lambda c: "lora", {"time_s": 9.0, "budget": None}, tmp_path, device="cpu", at_once=1,
                  newest="0.5.23", regression_cases=5, on_record=on_record)
    assert calls[0] == "sglang==0.5.23"
    assert dict(seen) == {"sglang==0.5.23": None, "sglang==0.5.12": 5, "sglang==0.5.14": 5}
    runs = [{"ran": True, "current": True, "cases": 60}, {"ran": True, "current": False, "cases": 20},
            {"ran": False, "current": False, "cases": 20}]  # a reused column's cases are not counted twice
    assert case_split(runs) == {"current_cases": 60, "regression_cases": 20, "current_share": 0.75}


def test_columns_side_by_side_each_give_their_record_and_a_failed_one_says_why(tmp_path):
    """Two children at once: one real (tiny) campaign of the reference, and one whose campaign refuses its
    settings -- its column is failed with the campaign's own words, not dropped."""
    good = Column("lora", "reference lora", ["reference"], None, label="reference lora")
    bad = Column("lora", "triton lora", ["triton"], None, label="triton lora")
    got = {}
    run_campaigns([good, bad], lambda c: "step_a_q" if c is good else "no_such_op", {"budget": 2, "time_s": None, "device": "cpu",
                                                     "progress": False, "limits": "tiny"},
                  tmp_path, device="cpu", at_once=2, newest=None, regression_cases=5,
                  on_record=lambda c, rec, problem: got.setdefault(c.label, (rec, problem)))
    rec, problem = got["reference lora"]
    assert problem is None and rec["campaign"]["executed"] >= 2
    rec, problem = got["triton lora"]
    assert rec is None and problem.startswith("raised CampaignError: triton: ") and "no_such_op" in problem


def test_a_failed_column_makes_the_matrix_incomplete(tmp_path, monkeypatch):
    cols = plan_columns(["sglang==0.5.12", "sglang==0.5.14"], ["lora"], lambda s, f: s)
    monkeypatch.setattr(matrix_job, "plan_columns", lambda *a, **k: cols)
    monkeypatch.setattr("kernel_oracle.jobs.matrix_replay.replay_absences", lambda runs, **kw: 0)

    def fake(columns, op_of, config, campaigns_dir, *, on_record, **kw):
        for c in columns:
            on_record(c, None, "its process ended without an answer (exit status -11)")

    monkeypatch.setattr(matrix_columns, "run_campaigns", fake)
    record = run_matrix(["sglang==0.5.12", "sglang==0.5.14"], entries=[], budget=2, device="cpu", out=tmp_path,
                        quiet=True)
    assert sorted(record["summary"]["failed_columns"]) == ["sglang==0.5.12", "sglang==0.5.14"]
    assert all("exit status -11" in r["reason"] for r in record["release_matrix"]["releases"])
    assert record["summary"]["campaigns"] == 0
