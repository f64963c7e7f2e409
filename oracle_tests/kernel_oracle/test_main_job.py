"""``kernel-oracle run``: a real tiny run on the CPU, and the job's bookkeeping with stand-ins
(merging, history never overwritten, latest overwritten, parts that cannot run are never a pass)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import types

import pytest
import torch

from kernel_oracle.cli import main as cli_main
from kernel_oracle.cli import run as run_command
from kernel_oracle.jobs import main_job, main_job_campaigns
from kernel_oracle.harness.schema import add_finding, add_group, load, new_record

from oracle_tests.conftest import HAS_CUDA

BUDGET_S = 20  # the reference target only, both families: the whole test stays under a minute
# the budget is a target: the worker's start (measured, in the record) and a campaign's last case or shrink
# run past it (the selfcheck, however slow, stops at half the campaigns' time)
SLACK_S = 10


@pytest.mark.skipif(HAS_CUDA, reason="a CPU main job's wall-clock budget is a CPU-machine property: on a GPU machine "
                                     "the suite's xdist workers load every core and the main job runs on CUDA")
def test_real_run_on_cpu(tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "kernel_oracle", "run", "--device", "cpu", "--time", str(BUDGET_S),
           "--targets", "reference", "--op", "lora,vision", "--seed", "1", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode in (0, 1, 3), proc.stderr[-3000:]
    for name in ("latest.json", "latest.md", "latest.html"):
        assert (out / name).is_file()
        assert f"{out / name}" in proc.stdout  # it says where the reports are
    (history,) = (out / "history").glob("*.json")
    rec = load(out / "latest.json")
    assert load(history) == rec
    assert rec["kind"] == "main" and rec["environment"]["device"] == "cpu"
    assert rec["environment"]["triton_interpret"] is True
    assert rec["summary"]["time_s"] == BUDGET_S
    targets = {g["target"] for g in rec["groups"]}
    assert "reference" in targets or rec["summary"].get("failed_parts"), "the campaign ran nothing, silently"
    # one worker for the whole job: started once, before the campaigns' clocks, shared by both
    assert len(rec["summary"]["worker"]["startup_s"]) == 1 + rec["summary"]["worker"]["restarts"]
    # the budget holds on the job's own clock (the interpreter's start and the report's rendering aside, which
    # take what this machine needs): past the budget by the worker's start-up at most, and a campaign's last case
    took, startup = rec["summary"]["duration_s"], max(rec["summary"]["worker"]["startup_s"])
    assert took < BUDGET_S + startup + SLACK_S, f"the job took {took:.0f}s on a {BUDGET_S}s budget"
    assert [(c["target"], c["family"]) for c in rec["summary"]["campaigns"]] == [("reference", "lora"),
                                                                                ("reference", "vision")]
    html = (out / "latest.html").read_text()
    failed = rec["summary"].get("failed_parts") or []
    if proc.returncode == 1:
        assert rec["findings"]
    elif proc.returncode == 3:
        assert failed and not rec["findings"]
    else:
        assert not rec["findings"] and not failed
    for text in failed:  # a part that could not run is on the page, not hidden
        assert text.split(":")[0] in html and text in rec["notes"]


def test_cli_imports_no_kernel_before_the_job_sets_the_interpreter():
    code = ("import sys; from kernel_oracle.cli import build_parser; build_parser(); "
            "print(sorted(m for m in sys.modules if m == 'kernels' or m.startswith(('kernels.', 'triton'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr


# ---- stand-ins --------------------------------------------------------------------------------
def _fake_selfcheck(rows):
    """Round 0 (seed 0) returns ``rows``; later rounds the same fixed rows and one passing random row."""
    mod = types.ModuleType("kernel_oracle.jobs.selfcheck")

    def run_selfcheck(device, cases, seed):
        if seed == 0:
            return list(rows)
        fixed = [r for r in rows if not r["case"].startswith("random-")]
        return fixed + [{**rows[0], "case": "random-0", "ratio": 0.2}]
    mod.run_selfcheck = run_selfcheck
    mod.iter_selfcheck = lambda device, cases, seed: iter(mod.run_selfcheck(device, cases, seed))
    return mod


SELFCHECK_ROWS = [
    {"op": "step_a_q", "family": "lora", "dtype": "float32", "case": "single", "passed": True, "err": 1e-7,
     "allowed": 1e-6, "ratio": 0.1, "message": ""},
    {"op": "vision", "family": "vision", "dtype": "float16", "case": "random-3", "passed": False, "err": 0.5,
     "allowed": 0.01, "ratio": 50.0, "message": "reference disagrees\nat token 3"},
    {"op": "vision", "family": "vision", "dtype": "-", "case": "error:vision.missing_max_seqlen#2",
     "passed": True, "err": None, "allowed": None, "ratio": None, "message": ""},
]


def _fake_campaign(target, op, *, share_s, seed, device, out_dir, upstream_contracts_only=False, worker=None,
                   sglang_wheel=None, with_malformed=False, finding_target=None):
    rec = new_record("campaign", seeds={"seed": seed}, device=device)
    add_group(rec, target=target, op="vision" if op == "vision" else "step_b_q", dtype="bfloat16",
              shape_class="prefill", cases=10, passes=9, findings={"contract": 1}, ratios=[0.2, 0.3])
    add_finding(rec, {"id": "f-0001", "target": finding_target or target, "op": "vision", "kind": "contract",
                      "message": "wrong text", "repro": f"kernel-oracle repro {out_dir}/cases/f-0001.pt"})
    return rec, None


@pytest.fixture
def stand_ins(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setitem(sys.modules, "kernel_oracle.jobs.selfcheck", _fake_selfcheck(SELFCHECK_ROWS))
    monkeypatch.setattr(main_job_campaigns, "run_one_campaign", _fake_campaign)
    monkeypatch.setattr(main_job, "launch_worker", lambda device, record: None)
    monkeypatch.setattr(main_job, "REPORT_RESERVE_S", 0.0)


def _run(out, *extra):
    """``kernel-oracle run ...`` through the run command's own parser (the full CLI would import the
    real selfcheck and campaign modules that these tests replace)."""
    parser = argparse.ArgumentParser()
    run_command.add_arguments(parser)
    args = parser.parse_args(["--device", "cpu", "--time", "30", "--targets", "reference", "--out", str(out),
                              "--quiet", *extra])
    return run_command.main(args)


def test_job_merges_parts_and_keeps_history(tmp_path, stand_ins, capsys):
    out = tmp_path / "out"
    assert _run(out) == 1  # findings
    rec = load(out / "latest.json")
    kinds = sorted(f["kind"] for f in rec["findings"])
    assert kinds == ["contract", "contract", "mismatch"]  # selfcheck 1 + one per family
    (sc,) = [f for f in rec["findings"] if f["target"] == "selfcheck"]
    assert sc["shape_class"] == "random" and sc["repro"].startswith("kernel-oracle selfcheck --device cpu")
    groups = {(g["target"], g["op"], g["dtype"], g["shape_class"]) for g in rec["groups"]}
    assert ("selfcheck", "vision", "-", "errors") in groups and ("reference", "vision", "bfloat16", "prefill") in groups
    rounds = rec["summary"]["selfcheck"]["rounds"]
    assert len(rounds) > 1 and [r["seed"] for r in rounds[:2]] == [0, 1000]
    single = [g for g in rec["groups"] if g["target"] == "selfcheck" and g["shape_class"] == "single"]
    assert single[0]["cases"] == 1  # later rounds keep only their random rows
    random = [g for g in rec["groups"] if g["target"] == "selfcheck" and g["shape_class"] == "random"]
    assert sum(g["cases"] for g in random) == len(rounds)
    assert {"campaign:reference:lora", "campaign:reference:vision"} <= set(rec["seeds"])
    assert not rec["summary"].get("failed_parts")
    html = (out / "latest.html").read_text()
    for f in rec["findings"]:
        assert f'id="finding-{f["id"]}"' in html
    first = (out / "latest.json").read_text()
    time.sleep(0.02)
    assert _run(out, "--seed", "5") == 1
    assert len(list((out / "history").glob("*.json"))) == 2  # history is never overwritten
    assert (out / "latest.json").read_text() != first  # latest is
    assert load(out / "latest.json")["seeds"]["seed"] == 5


def test_a_job_whose_findings_are_all_known_exits_0(tmp_path, stand_ins, monkeypatch, capsys):
    """Every finding a known upstream issue (a known-issues file through $KERNEL_ORACLE_KNOWN_ISSUES; known
    issues are of upstream targets, so the campaign stand-in's finding is a release's):
    exit 0, each finding marked known with its link in the record and the reports; with the checked-in
    file the same job exits 1."""
    passing = [r for r in SELFCHECK_ROWS if r["passed"]]
    monkeypatch.setitem(sys.modules, "kernel_oracle.jobs.selfcheck", _fake_selfcheck(passing))
    monkeypatch.setattr(main_job_campaigns, "run_one_campaign",
                        lambda *a, **kw: _fake_campaign(*a, **kw, finding_target="sglang==0.5.23"))
    out = tmp_path / "out"
    assert _run(out, "--op", "vision") == 1  # the campaign's contract finding is new
    known = tmp_path / "known.toml"
    known.write_text('[[issue]]\nid = "wrong-text"\ntitle = "t"\ntarget = "sglang==*"\nop = "vision"\n'
                     'kind = "contract"\nmessage = "^wrong text$"\nupstream = "https://example.org/9"\n'
                     'releases = ["*"]\ndoc = "d"\n')
    monkeypatch.setenv("KERNEL_ORACLE_KNOWN_ISSUES", str(known))
    capsys.readouterr()
    assert _run(out, "--op", "vision") == 0
    rec = load(out / "latest.json")
    assert [(f["known"], f["upstream"]) for f in rec["findings"]] == [("wrong-text", "https://example.org/9")]
    assert (rec["summary"]["new_findings"], rec["summary"]["known_findings"]) == (0, 1)
    text = capsys.readouterr().out
    assert "1 findings (1 known upstream issues)" in text
    assert "known: f-0001 is upstream issue wrong-text: https://example.org/9" in text
    assert '<a href="https://example.org/9">wrong-text</a>' in (out / "latest.html").read_text()
    assert "[wrong-text](<https://example.org/9>)" in (out / "latest.md").read_text()
    known.write_text("[[issue]\n")  # a bad file is a usage error, before any work
    assert _run(tmp_path / "other", "--op", "vision") == 2
    assert f"{known}: not valid TOML" in capsys.readouterr().err and not (tmp_path / "other").exists()


def test_a_selfcheck_slower_than_the_budget_leaves_the_campaigns_their_time(tmp_path, stand_ins, monkeypatch):
    """A selfcheck round that would never end (a loaded machine): it stops between two checks at half the
    time to the campaigns' deadline, an unfinished first round is a failed part, and the campaign runs."""
    mod = _fake_selfcheck(SELFCHECK_ROWS)

    def iter_selfcheck(device, cases, seed):
        for _ in range(600):  # 30 s of checks
            time.sleep(0.05)
            yield {**SELFCHECK_ROWS[0], "case": "random-0"}
    mod.iter_selfcheck = iter_selfcheck
    monkeypatch.setitem(sys.modules, "kernel_oracle.jobs.selfcheck", mod)
    assert _run(tmp_path / "out", "--op", "vision", "--time", "4") == 1  # the campaign's finding
    rec = load(tmp_path / "out" / "latest.json")
    (stopped,) = [p for p in rec["summary"]["failed_parts"] if p.startswith("selfcheck stopped")]
    assert "first round unfinished" in stopped and "pass a larger --time" in stopped
    (round_0,) = rec["summary"]["selfcheck"]["rounds"]
    assert round_0["stopped"] and round_0["rows"] < 600  # stopped, not waited out
    (camp,) = rec["summary"]["campaigns"]  # the selfcheck took half of the 4 s to the deadline, past its 0.6-s share
    assert camp["family"] == "vision" and 1.0 <= camp["share_s"] <= 2.0 and "problem" not in camp


def test_unavailable_parts_are_never_a_pass(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setitem(sys.modules, "kernel_oracle.jobs.selfcheck", None)  # import fails
    monkeypatch.setitem(sys.modules, "kernel_oracle.fuzz.campaign", None)
    monkeypatch.setattr(main_job, "launch_worker", lambda device, record: None)
    out = tmp_path / "out"
    assert _run(out) == 3  # incomplete: not a pass, and not findings either
    rec = load(out / "latest.json")
    notes = "\n".join(rec["notes"])
    assert "selfcheck unavailable: ModuleNotFoundError" in notes and "fuzz campaign unavailable: ModuleNotFoundError" in notes
    assert len(rec["summary"]["failed_parts"]) == 2
    assert "incomplete" in capsys.readouterr().out
    html = (out / "latest.html").read_text()
    assert "selfcheck unavailable" in html and "status-incomplete" in html


def test_a_failing_campaign_is_reported(tmp_path, stand_ins, monkeypatch):
    monkeypatch.setattr(main_job_campaigns, "run_one_campaign", lambda *a, **k: (None, "exited with status 3: boom"))
    assert _run(tmp_path / "out", "--op", "vision") == 1
    rec = load(tmp_path / "out" / "latest.json")
    assert rec["summary"]["failed_parts"] == ["campaign reference x vision: exited with status 3: boom"]


def _exit(argv) -> int:
    """The exit code of ``kernel-oracle argv`` in this process (argparse's own SystemExit included)."""
    try:
        return cli_main(argv)
    except SystemExit as exc:
        return exc.code


def test_usage_errors(tmp_path, capsys):
    assert _exit(["run", "--time", "0", "--out", str(tmp_path)]) == 2
    assert "positive, finite number of seconds" in capsys.readouterr().err
    assert cli_main(["run", "--op", "lora,audio", "--out", str(tmp_path)]) == 2
    if not torch.cuda.is_available():
        assert cli_main(["run", "--device", "cuda", "--out", str(tmp_path)]) == 2
        assert "torch sees no CUDA device" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nothing written on a usage error
    assert _exit(["run", "--time", "nan", "--out", str(tmp_path)]) == 2
    assert "positive, finite number of seconds" in capsys.readouterr().err
    (tmp_path.parent / "a_file").write_text("x")
    assert cli_main(["run", "--triton-cache", str(tmp_path.parent / "a_file"), "--out", str(tmp_path)]) == 2
    assert "--triton-cache" in (err := capsys.readouterr().err) and "is a file, not a directory" in err
    assert "TRITON_CACHE_DIR" not in os.environ or os.environ["TRITON_CACHE_DIR"] != str(tmp_path.parent / "a_file")
    (tmp_path / "file").write_text("x")
    assert cli_main(["run", "--device", "cpu", "--out", str(tmp_path / "file")]) == 2
    assert capsys.readouterr().err == (f"kernel-oracle run: --out {tmp_path / 'file'}: is a file, not a directory; "
                                       f"pass a directory\n")
    assert cli_main(["run", "--device", "cpu", "--out", "/proc/kernel-oracle-test"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kernel-oracle run: --out /proc/kernel-oracle-test: cannot write there")
    assert err.count("\n") == 1


def test_salvage_reads_a_killed_campaign_through_its_state(tmp_path):
    from kernel_oracle.fuzz.state import CampaignState, GroupKey

    state = CampaignState.open(tmp_path, target="reference", op="lora", seed=3)
    key = GroupKey("reference", "step_a_q", "float32", "prefill")
    state.count_case(key, passed=True, ratio=0.25)
    state.count_case(key, passed=False, ratio=None)
    state.append_finding({"id": "F0001-contract-step_a_q-float32", "target": "reference", "op": "step_a_q",
                          "dtype": "float32", "shape_class": "prefill", "kind": "contract", "message": "m",
                          "repro": "r"}, key)
    state.save()
    state.close()  # what a killed child leaves: no summary.json
    rec = main_job_campaigns.salvage("reference", tmp_path, seed=3, device="cpu")
    (g,) = rec["groups"]
    assert (g["target"], g["op"], g["dtype"], g["shape_class"], g["cases"], g["passes"]) == (
        "reference", "step_a_q", "float32", "prefill", 2, 1)
    assert g["findings"]["contract"] == 1 and [f["id"] for f in rec["findings"]] == ["F0001-contract-step_a_q-float32"]
    assert main_job_campaigns.salvage("reference", tmp_path / "absent", seed=3, device="cpu") is None
