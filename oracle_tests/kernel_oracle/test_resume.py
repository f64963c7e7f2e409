"""Resuming a campaign's --out: visible, and only for the same campaign (fuzz.state, Note [Campaign identity])."""

from __future__ import annotations

import json

import pytest

from oracle_tests.conftest import DEVICE
from oracle_tests.kernel_oracle.test_faults_cli import target_package
from kernel_oracle.cli import main as cli_main
from kernel_oracle.fuzz.state import CampaignState, OtherCampaign


@pytest.fixture
def module_target(tmp_path, monkeypatch):
    return target_package(tmp_path, monkeypatch, "ko_resume_targets", good=False) / "buggy.py"


def _fuzz(capsys, out, *extra):
    rc = cli_main(["fuzz", "--targets", "ko_resume_targets.buggy", "--op", "step_a_v", "--cases", "6",
                   "--device", DEVICE, "--out", str(out), "--limits", "tiny", "--quiet", "--no-isolate", *extra])
    got = capsys.readouterr()
    return rc, got.out, got.err


def _findings(out):
    return [json.loads(x) for x in (out / "findings.jsonl").read_text().splitlines() if x.strip()]


def test_rerun_resumes_visibly_refuses_changed_code_and_fresh_starts_afresh(tmp_path, capsys, module_target):
    out = tmp_path / "campaign"
    rc, stdout, err = _fuzz(capsys, out)
    assert rc == 1, err
    assert "resuming:" not in stdout
    first = _findings(out)
    assert first and json.loads((out / "state.json").read_text())["identity"]["code"]
    first_executed = json.loads((out / "summary.json").read_text())["campaign"]["executed"]

    rc, stdout, err = _fuzz(capsys, out)  # same code: resumes, and says so
    assert f"resuming: " in stdout and f"(from {out})" in stdout, stdout
    assert f"{len(first)} findings" in stdout.split("resuming:")[1].splitlines()[0]

    module_target.write_text(module_target.read_text() + "\n# a fix\n")  # the code changes
    rc, stdout, err = _fuzz(capsys, out)
    assert rc == 2
    assert err.strip().splitlines() == [
        f"kernel-oracle fuzz: error: {out} holds a campaign of other code (target sources changed since it ran); "
        f"pass --fresh to start afresh or another --out"]

    old_ids = {f["id"] for f in _findings(out)}
    rc, stdout, err = _fuzz(capsys, out, "--fresh")
    line = next(x for x in stdout.splitlines() if x.startswith("starting afresh"))
    assert line.startswith(f"starting afresh in {out} (--fresh): the earlier campaign's ")
    assert f"and {len(old_ids)} findings were removed" in line
    summary = json.loads((out / "summary.json").read_text())
    executed = summary["campaign"]["executed"]
    # the same seed and code, from nothing: what the first campaign ran (its budget, shrinks and minimisation),
    # not that plus the resumed runs'
    assert executed == first_executed, "the fresh campaign counted the earlier one's cases"
    state = json.loads((out / "state.json").read_text())
    assert state["executed"] == executed


def _state(out, **identity):
    base = {"target": "triton", "op": "lora", "seed": 0, "code": "c1", "suite": "s1"}
    return CampaignState.open(out, target="triton", op="lora", seed=0, identity={**base, **identity})


def _one_finding(state):
    state.append_finding({"id": state.next_finding_id("mismatch", "step_a_v"), "target": "triton",
                          "op": "step_a_v", "kind": "mismatch", "message": "m", "repro": "r"},
                         __import__("kernel_oracle.fuzz.state", fromlist=["GroupKey"]).GroupKey(
                             "triton", "step_a_v", "float32", "small"))
    state.executed = 5
    state.save()
    state.close()


@pytest.mark.parametrize("changed, why", [({"code": "c2"}, "target sources changed since it ran"),
                                          ({"suite": "s2"}, "the suite's oracle changed since it ran"),
                                          ({"seed": 3}, "another seed: seed=0, not 3")])
def test_state_refuses_another_identity(tmp_path, changed, why):
    _one_finding(_state(tmp_path))
    with pytest.raises(OtherCampaign, match="pass --fresh") as info:
        _state(tmp_path, **changed)
    assert f"other code ({why})" in str(info.value)
    again = _state(tmp_path)  # the same identity resumes
    assert again.opened == "resumed" and again.earlier == (5, 1)
    assert again.opening_line() == f"resuming: 5 cases, 1 findings (from {tmp_path})"
    again.close()


def test_state_without_identity_is_unknown_and_fresh_removes_it(tmp_path):
    _one_finding(_state(tmp_path))
    raw = json.loads((tmp_path / "state.json").read_text())
    del raw["identity"]  # a state.json of the layout without identity
    (tmp_path / "state.json").write_text(json.dumps(raw))
    (tmp_path / "identity.json").unlink()
    (tmp_path / ".hypothesis").mkdir()
    with pytest.raises(OtherCampaign, match=r"other code \(its identity is unknown"):
        _state(tmp_path)
    fresh = CampaignState.open(tmp_path, target="triton", op="lora", seed=0,
                               identity={"target": "triton", "op": "lora", "seed": 0, "code": "c1", "suite": "s1"},
                               fresh=True)
    assert fresh.opened == "afresh" and fresh.findings == [] and fresh.executed == 0
    assert not (tmp_path / "findings.jsonl").exists() and not (tmp_path / ".hypothesis").exists()
    assert fresh.opening_line().endswith("the earlier campaign's 5 cases and 1 findings were removed")
    fresh.save()
    fresh.close()
    assert json.loads((tmp_path / "state.json").read_text())["identity"]["code"] == "c1"


def test_a_finding_record_that_cannot_be_read_is_never_clean(tmp_path, capsys):
    """The probe: a clean campaign, then a finding's line torn (its case files written first, as a campaign
    writes them); the resumed campaign dropped it and said "clean", exit 0.  Now it is incomplete (exit 3,
    naming where the record went) on every resume, until the record is dealt with."""
    out = tmp_path / "campaign"
    argv = ["fuzz", "--targets", "reference", "--op", "step_a_q", "--cases", "3", "--device", DEVICE, "--out", str(out),
            "--limits", "tiny", "--quiet", "--no-isolate"]
    assert cli_main(argv) == 0
    (out / "cases" / "F0001-mismatch-step_a_q-float32.json").write_text("{}\n")
    with open(out / "findings.jsonl", "a") as fh:
        fh.write('{"id": "F0001-mismatch-step_a_q-float32", "kind": "mism')  # cut off: kill -9 or a full disk
    capsys.readouterr()
    note = (f"findings.jsonl held 1 finding record(s) that could not be read (set aside in "
            f"{out / 'findings.jsonl.torn'}, or saved in cases/ with no line): a finding may be lost, so the campaign "
            f"is not clean; read them there, then remove them, or pass --fresh")
    for _ in range(2):  # the record stays lost on the next resume too
        assert cli_main(argv) == 3
        err = capsys.readouterr().err
        assert err.strip().splitlines() == [f"kernel-oracle fuzz: incomplete: {note} (exit 3)"], err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["summary"]["status"] == "incomplete" and note in summary["notes"]
    assert cli_main([*argv, "--fresh"]) == 0


def test_a_saved_case_whose_finding_line_is_gone_is_never_clean(tmp_path, capsys):
    """A finding's case files are written before its line: a case with no line is a finding whose record
    was lost (a kill between the two writes, or the line removed), never a clean campaign."""
    out = tmp_path / "campaign"
    argv = ["fuzz", "--targets", "reference", "--op", "step_a_q", "--cases", "3", "--device", DEVICE, "--out", str(out),
            "--limits", "tiny", "--quiet", "--no-isolate"]
    assert cli_main(argv) == 0
    (out / "cases" / "F0007-mismatch-step_a_q-float32.json").write_text("{}\n")
    capsys.readouterr()
    assert cli_main(argv) == 3
    assert "findings.jsonl held 1 finding record(s) that could not be read" in capsys.readouterr().err
