"""Every file the suite reads or writes is data (Note [Files as data] in harness/data_files.py), and every
input a user can hand a command ends in one line: deeply nested or oversized JSON and TOML, report files
planted as symlinks, malformed cases for ``repro --case-json``, a target raising ``BaseException`` under
``--no-isolate``, contradictory flags.  Each test plants the defect it exists for."""

from __future__ import annotations

import json
import os

import pytest

from oracle_tests.conftest import DEVICE
from oracle_tests.kernel_oracle.test_faults_cli import _cli, _usage_error

from kernel_oracle.harness import data_files
from kernel_oracle.harness.schema import new_record, save

DEEP = "[" * 100_000 + "]" * 100_000  # json and tomllib recurse per level: RecursionError, not ValueError


def _record(path):
    return save(new_record("campaign", seeds={"seed": 0}, device="cpu"), path)


# ---- deeply nested and oversized JSON / TOML: one line, exit 2 (never a RecursionError traceback) ----------

@pytest.mark.parametrize("command", ["report", "compare-new", "compare-baseline"])
def test_a_deeply_nested_result_is_one_line_and_exit_2(tmp_path, capsys, command):
    deep, good = tmp_path / "deep.json", _record(tmp_path / "good.json")
    deep.write_text(DEEP)
    argv = {"report": ["report", str(deep)], "compare-new": ["compare", str(good), str(deep)],
            "compare-baseline": ["compare", str(deep), str(good)]}[command]
    _usage_error(*_cli(capsys, *argv), contains=f"{deep}: nested deeper than {data_files.MAX_DEPTH} levels")


def test_a_result_nested_past_the_limit_but_under_the_recursion_limit_is_refused_too(tmp_path, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text(json.dumps({"findings": json.loads("[" * 200 + "]" * 200)}))
    _usage_error(*_cli(capsys, "report", str(deep)), contains="nested deeper than")


def test_an_oversized_result_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(data_files, "MAX_BYTES", 100)
    big = _record(tmp_path / "big.json")
    _usage_error(*_cli(capsys, "report", str(big)), contains="more than the 100 read back")


@pytest.mark.parametrize("text", [f"a = {DEEP}", "a = " + "{ b = " * 5000 + "1" + " }" * 5000])
def test_a_deeply_nested_known_issues_file_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, text):
    bad = tmp_path / "deep.toml"
    bad.write_text(text)
    monkeypatch.setenv("KERNEL_ORACLE_KNOWN_ISSUES", str(bad))
    _usage_error(*_cli(capsys, "fuzz", "--targets", "reference", "--op", "lora", "--cases", "1", "--out",
                       str(tmp_path / "o"), "--quiet"), contains=f"{bad}: nested deeper than")


def _campaign(capsys, out, *extra):
    return _cli(capsys, "fuzz", "--targets", "reference", "--op", "step_a_q", "--cases", "3", "--device", DEVICE,
                "--out", str(out), "--limits", "tiny", "--quiet", "--no-isolate", *extra)


def test_deeply_nested_state_files_are_set_aside_and_the_campaign_resumes(tmp_path, capsys):
    """A nested findings line is set aside like a torn one, a nested state.json is rebuilt: no traceback
    (it read as exit 1, "new findings")."""
    out = tmp_path / "c"
    assert _campaign(capsys, out)[0] == 0
    with open(out / "findings.jsonl", "a") as fh:
        fh.write(DEEP + "\n")
    (out / "state.json").write_text(DEEP)
    (out / "identity.json").write_text(DEEP)
    rc, stdout, err = _campaign(capsys, out)
    assert "Traceback" not in err and rc == 3, err  # the set-aside line may have been a finding: never clean
    assert err.strip().startswith("kernel-oracle fuzz: incomplete: findings.jsonl held 1 finding record(s) that "
                                  "could not be read"), err
    notes = json.loads((out / "state.json").read_text())["notes"]
    assert any(n.startswith("state.json was unreadable (DataFileError: state.json: nested deeper") for n in notes)
    assert any(n.startswith("findings.jsonl: 1 torn or unreadable line(s) set aside") for n in notes), notes
    assert DEEP in (out / "findings.jsonl.torn").read_text()


def test_an_oversized_findings_file_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    out = tmp_path / "c"
    assert _campaign(capsys, out)[0] == 0
    monkeypatch.setattr("kernel_oracle.fuzz.state.MAX_BYTES", 10)
    (out / "findings.jsonl").write_text("x" * 11)
    _usage_error(*_campaign(capsys, out), contains="findings.jsonl holds more than 10 bytes")


def test_a_deeply_nested_case_for_repro_is_one_line_and_exit_2(tmp_path, capsys):
    case = tmp_path / "case.json"
    case.write_text(DEEP)
    _usage_error(*_cli(capsys, "repro", str(case), "--targets", "reference"), contains="nested deeper than")


# ---- report files planted as symlinks: replaced, never written through -------------------------------------

@pytest.mark.parametrize("name", ["report.html", "report.md"])
def test_a_report_planted_as_a_symlink_is_not_written_through(tmp_path, capsys, name):
    out = tmp_path / "c"
    assert _campaign(capsys, out)[0] == 0
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    (out / name).unlink()
    os.symlink(outside, out / name)
    assert _cli(capsys, "report", str(out))[0] == 0
    assert outside.read_text() == "precious"
    assert not (out / name).is_symlink() and "kernel-oracle" in (out / name).read_text().lower()
    os.unlink(out / name)  # the campaign's own pages (fuzz writes them at its end) too
    os.symlink(outside, out / name)
    assert _campaign(capsys, out)[0] == 0
    assert outside.read_text() == "precious" and not (out / name).is_symlink()


@pytest.mark.parametrize("planted", ["latest.json", "latest.json.tmp"])
def test_the_main_jobs_record_is_not_written_through_a_planted_symlink(tmp_path, planted):
    """Its temporary file was a fixed name beside it (``latest.json.tmp``): a symlink there was written
    through before the rename."""
    outside = tmp_path / "outside.json"
    outside.write_text("precious")
    (tmp_path / "out").mkdir()
    os.symlink(outside, tmp_path / "out" / planted)
    save(new_record("main", seeds={"seed": 0}, device="cpu"), tmp_path / "out" / "latest.json", overwrite=True)
    assert outside.read_text() == "precious" and not (tmp_path / "out" / "latest.json").is_symlink()


# ---- repro --case-json with a malformed case: one line, exit 2 (it read as "reproduced") --------------------------

_LORA = {"family": "lora", "op": "step_a_q", "seg_lens": [3], "weight_indices": [0], "lora_ranks": [4],
         "scalings": [1.0]}


@pytest.mark.parametrize("case, says", [
    ({"problem": {**_LORA, "seg_lens": "ab"}}, "Expected seg_lens to be a list but got seg_lens='ab'"),
    ({"problem": {**_LORA, "H": -1}}, "H=-1 is negative"),
    ({"problem": {**_LORA, "H": 2.5}}, "Expected H to be a finite int but got H=2.5"),
    ({"problem": {**_LORA, "H": True}}, "Expected H to be a finite int but got H=True"),
    ({"problem": {**_LORA, "scalings": [float("nan")]}}, "Expected scalings[0] to be a finite float"),
    ({"problem": {**_LORA, "seg_lens": [10**12]}}, "more than the 2147483648 a case may have"),
    ({"problem": {**_LORA, "dtype": "int8"}}, "dtype='int8' is unknown"),
    ({"problem": {**_LORA, "weight_indices": [0, 1]}}, "the case cannot be built"),
    ({"problem": {"family": "vision", "lengths": [3], "H": 0}}, "the case cannot be built"),
    ({"problem": {"family": "vision", "lengths": [3], "window": [1, 2, 3]}}, "Expected window to hold 2 values"),
    ({"problem": {**_LORA, "family": "x"}}, "family='x' is unknown"),
    ({"problem": _LORA, "mutation": {"family": "lora", "kind": "seg_indptr_past_rows", "index": 0, "amount": 10**9}},
     "Expected amount from 1 to 64 but got amount=1000000000"),  # it is added to max_len: a grid of that many tiles
    # counts that size a launch grid or a Python loop: refused before use (they ran for minutes)
    ({"problem": {**_LORA, "cuda_graph_pad_to": 30_000_000}}, "cuda_graph_pad_to: 30000000, more than the 8192"),
    ({"problem": {**_LORA, "eager_counts": [30_000_000, 0]}}, "eager_counts: 30000000, more than the 8192"),
    ({"problem": {**_LORA, "max_len_slack": 10**9}}, "max_len_slack: 1000000000, more than the 8192"),
    ({"problem": {"family": "vision", "lengths": [0] * 10_000}}, "sequences (len(lengths)): 10000, more than the 8192"),
    ({"problem": {"family": "csgmv", "op": "csgmv_shrink", "seg_lens": [3], "weight_indices": [0], "lora_ranks": [4],
                  "scalings": [1.0], "permutation": [0, 1, 2], "use_cuda_graph": True, "graph_pad_to": 30_000_000}},
     "graph_pad_to: 30000000, more than the 8192"),
    ({"problem": {"family": "csgmv", "op": "csgmv_shrink", "seg_lens": [3], "weight_indices": [0], "lora_ranks": [4],
                  "scalings": [1.0], "permutation": [0, 1, 2], "num_slices": 0, "slice_offsets": [0]}},
     "num_slices=0; a layer has 1 or more slices"),
    ({"problem": _LORA, "mutation": {"family": "lora", "kind": "bad_max_len", "index": "0", "amount": 1}},
     "Expected index to be an int"),
    ({"problem": []}, "Expected a problem as a dict"),
])
def test_repro_refuses_a_malformed_case_in_one_line(capsys, case, says):
    _usage_error(*_cli(capsys, "repro", "--case-json", json.dumps(case), "--targets", "reference", "--device", "cpu"),
                 contains=says)


# ---- a target's BaseException under --no-isolate: a finding, the summary written ----------------------------

@pytest.mark.parametrize("raise_", ["SystemExit(0)", "SystemExit(3)", "KeyboardInterrupt()", "GeneratorExit()",
                                    "type('Odd', (BaseException,), {})()"])
def test_a_target_raising_a_base_exception_is_a_finding(tmp_path, capsys, monkeypatch, raise_):
    name = f"ko_base_exc_{abs(hash(raise_))}"
    (tmp_path / f"{name}.py").write_text(f"def step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head):\n"
                                         f"    raise {raise_}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "c"
    rc, stdout, err = _cli(capsys, "fuzz", "--targets", name, "--op", "step_a_q", "--cases", "3", "--device",
                           DEVICE, "--out", str(out), "--quiet", "--no-isolate")
    assert rc == 1, (rc, err)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["summary"]["status"] == "finished" and summary["findings"]
    kind = raise_.split("(")[0] if "Odd" not in raise_ else "Odd"
    assert all(kind in f["message"] for f in summary["findings"]), [f["message"] for f in summary["findings"]]


def test_a_base_exception_at_import_is_the_targets_failure(tmp_path, capsys, monkeypatch):
    (tmp_path / "ko_exits_at_import.py").write_text("raise SystemExit(0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    _usage_error(*_cli(capsys, "fuzz", "--targets", "ko_exits_at_import", "--op", "step_a_q", "--cases", "3",
                       "--out", str(tmp_path / "c"), "--quiet", "--no-isolate"),
                 contains="import ko_exits_at_import failed: SystemExit")


def test_a_real_interrupt_during_the_call_still_stops():
    """Ctrl-C while the target runs is no finding: the noted signal makes the raise a stop."""
    import signal

    from kernel_oracle.harness.target_raises import signals_noted

    # Python's own Ctrl-C handler, whatever an earlier test of this process left (a worker's entry point,
    # run in-process, ignores SIGINT); the process's handler is put back after
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            with signals_noted() as noted:
                try:
                    signal.raise_signal(signal.SIGINT)
                except BaseException as exc:
                    assert not noted.targets(exc) and noted.arrived == ["SIGINT"]
                    raise
    finally:
        signal.signal(signal.SIGINT, previous)


# ---- contradictory flags: refused in one line -------------------------------------------------------------

@pytest.mark.parametrize("flags, says", [
    (["--with-malformed", "--upstream-contracts-only"], "with_malformed=True (--with-malformed) acts on malformed"),
    (["--memcheck", "--upstream-contracts-only"], "memcheck=True (--memcheck) acts on malformed metadata"),
    (["--shards", "3"], "--shards shards a campaign over --gpus or --scheduler"),
    (["--dtypes", "float32"], "--dtypes shards a campaign over --gpus or --scheduler"),
])
def test_contradictory_flags_are_refused(tmp_path, capsys, flags, says):
    _usage_error(*_cli(capsys, "fuzz", "--targets", "reference", "--op", "lora", "--cases", "1", "--out",
                       str(tmp_path / "c"), "--quiet", *flags), contains=says)
