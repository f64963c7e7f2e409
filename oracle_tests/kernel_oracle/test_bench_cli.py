"""``kernel-oracle bench``: the oracle's own throughput, as a versioned ``bench`` record."""

from __future__ import annotations

import pytest

from kernel_oracle.jobs.bench import main_job_counts
from kernel_oracle.cli import main as cli_main
from kernel_oracle.harness.schema import load

from oracle_tests.conftest import DEVICE


def test_bench_measures_campaign_throughput_into_a_record(tmp_path, capsys):
    out = tmp_path / "bench"
    code = cli_main(["bench", "--device", DEVICE, "--targets", "reference,no_such_pkg.kernels", "--op", "lora",
                     "--time", "3", "--cases", "2", "--main-time", "0", "--out", str(out), "--quiet"])
    assert code == 0, capsys.readouterr()
    rec = load(out / "oracle-bench.json")  # --out is a directory, as in every command
    assert rec["kind"] == "bench" and rec["environment"]["device"] == DEVICE
    bench = rec["summary"]["oracle_bench"]
    assert bench["worker_startup_s"] > 0 and bench["limits"] == "tiny" and bench["main_job"] is None
    ref, missing = bench["campaigns"]
    assert (ref["target"], ref["family"], ref["available"]) == ("reference", "lora", True)
    assert ref["cases"] > 0 and ref["cases_per_s"] == pytest.approx(ref["cases"] / ref["seconds"], rel=0.01)
    assert ref["seconds"] >= 3 and ref["findings"] == 0
    (row,) = rec["benchmarks"]  # only the available target has a figure; compare gates it as µs per case
    assert (row["target"], row["op"], row["shape"]) == ("reference", "lora", "campaign/tiny")
    assert row["median_us"] == pytest.approx(1e6 / ref["cases_per_s"], rel=0.01)
    assert not missing["available"] and missing["cases"] == 0
    assert any("no_such_pkg.kernels x lora: target unavailable" in n for n in rec["notes"])
    assert sum(g["cases"] for g in rec["groups"] if g["target"] == "reference") == ref["cases"]
    printed = capsys.readouterr().out
    assert f"reference x lora: {ref['cases_per_s']} cases/s" in printed and f"record: {out}" in printed


def test_main_job_counts_fuzz_cases_and_failed_campaigns():
    rec = {"groups": [{"cases": 700}, {"cases": 300}],
           "summary": {"campaigns": [{"target": "triton", "family": "lora", "cases": 250},
                                     {"target": "sglang", "family": "lora", "cases": 50, "problem": "killed"}],
                       "failed_parts": ["campaign sglang x lora: killed"]}}
    assert main_job_counts(rec) == {"fuzz_cases": 300, "cases": 1000, "campaigns": 2,
                                    "failed_campaigns": ["sglang x lora: killed"],
                                    "failed_parts": ["campaign sglang x lora: killed"]}


@pytest.mark.parametrize("argv, text", [
    (["--op", "lora,audio"], "--op 'lora,audio' names ['audio'], which no family has; the only valid values are the families ['lora', "
     "'vision', 'csgmv']"),
    (["--time", "0"], "argument --time: expected a positive, finite number of seconds but got '0'"),
    (["--main-time", "nan"], "argument --main-time: expected a non-negative, finite number of seconds but got 'nan'"),
    (["--limits", "huge"], "argument --limits: invalid choice: 'huge'"),
    (["--targets", ","], "argument --targets: ',' names no target; pass a comma-separated list of specs"),
    (["--cases", "-1"], "argument --cases: expected 0 or more but got '-1'"),
    (["--warm-up", "-1"], "argument --warm-up: expected a non-negative, finite number of seconds but got '-1'"),
])
def test_usage_errors_exit_2_in_one_line(argv, text, tmp_path, capsys):
    try:
        code = cli_main(["bench", "--device", "cpu", "--out", str(tmp_path / "b"), *argv])
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kernel-oracle bench: error: {text}") and err.count("\n") == 1, err
    assert not (tmp_path / "b").exists()


def test_out_is_a_directory_as_in_every_command(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    assert cli_main(["bench", "--device", "cpu", "--out", str(tmp_path / "file")]) == 2
    assert capsys.readouterr().err == f"kernel-oracle bench: error: --out {tmp_path / 'file'}: is a file; pass a directory\n"


def test_expected_outcome_refuses_a_targets_whole_precision_table():
    """``bench sglang`` passed ``target.precision`` (a dict per op) and crashed with AttributeError deep in the
    check; a wrong precision is refused naming the fix."""
    from kernel_oracle.harness.check import Case, expected_outcome
    from kernel_oracle.harness.problem_lora import LoRAProblem

    with pytest.raises(TypeError, match=r"pass target\.precision_for\(op\)"):
        expected_outcome(Case(LoRAProblem(op="step_a_q", seg_lens=(2,), weight_indices=(0,), lora_ranks=(4,),
                                           scalings=(1.0,))), "cpu", precision={"step_a_q": "ieee"})
