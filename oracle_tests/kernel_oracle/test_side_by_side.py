"""Campaigns side by side (Note [Campaigns side by side]): the runner's contract, and the main job with
its campaigns in child processes, each given the whole window (stand-in campaigns: what is measured is
the orchestration; the GPU check measures the real campaigns, docs/BENCHMARKS.md)."""

from __future__ import annotations

import dataclasses
import os
import time

import pytest

from kernel_oracle.harness.schema import add_group, load, new_record
from kernel_oracle.jobs import main_job_campaigns, side_by_side
from kernel_oracle.jobs.side_by_side import ChildCall, run_side_by_side, slots

from oracle_tests.kernel_oracle.test_main_job import _run, stand_ins  # noqa: F401 - the fixture, used by name


def pid_after(seconds: float, fail: bool = False) -> int:
    """Sleep, then return this process's pid (or raise)."""
    time.sleep(seconds)
    if fail:
        raise ValueError("planted")
    return os.getpid()


def dies() -> None:
    os._exit(7)


def pid_once_told(path: str) -> int:
    """Wait until ``path`` exists (another call creates it), then return this process's pid; raise when
    no one says so within two minutes (the other call did not run at the same time)."""
    deadline = time.monotonic() + 120.0
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError("never told")
        time.sleep(0.05)
    return os.getpid()


def pid_telling(path: str) -> int:
    """Create ``path``, then return this process's pid."""
    open(path, "w").close()
    return os.getpid()


def test_calls_run_at_once_in_other_processes_and_come_back_in_order(tmp_path):
    told = str(tmp_path / "told")
    calls = [ChildCall("slow", pid_once_told, {"path": told}), ChildCall("fast", pid_telling, {"path": told}),
             ChildCall("raises", pid_after, {"seconds": 0.1, "fail": True}), ChildCall("dies", dies)]
    ended = []
    done = run_side_by_side(calls, at_once=4, on_done=lambda d: ended.append(d.key))
    assert [d.key for d in done] == ["slow", "fast", "raises", "dies"]  # the order of the calls
    assert ended.index("fast") < ended.index("slow")  # reported as each one ends
    (slow, fast, raises, died) = done
    assert slow.problem is None and fast.problem is None  # slow waited for fast: side by side, not in a row
    assert len({slow.result, fast.result, os.getpid()}) == 3  # two children, neither of them this process
    # what it raised and where: a record that keeps only this line still names the raising line
    assert raises.result is None and raises.problem.startswith("raised ValueError: planted (at test_side_by_side.py:")
    assert " in pid_after <- side_by_side.py:" in raises.problem, raises.problem
    assert died.result is None and died.problem == "its process ended without an answer (exit status 7)"


def test_at_once_bounds_the_running_children_and_before_start_replaces_the_call():
    seen = []

    def before_start(call, started, pending):
        seen.append((call.key, started, pending))
        return ChildCall(call.key, call.fn, {**call.kwargs, "seconds": 0.0})

    done = run_side_by_side([ChildCall(k, pid_after, {"seconds": 30.0}) for k in "abc"], at_once=2,
                            before_start=before_start)
    assert [d.problem for d in done] == [None, None, None]  # the replacement's 0 s ran, not the 30 s
    assert seen == [("a", 0, 3), ("b", 1, 2), ("c", 2, 1)]  # c waited for a free slot
    with pytest.raises(ValueError, match=r"Expected at_once >= 1 but got at_once=0"):
        run_side_by_side([], at_once=0)


@pytest.mark.parametrize(("device", "cores", "expected"), [
    ("cpu", 16, 1),   # the interpreter keeps each campaign's core busy
    ("cuda", 2, 1),   # no core to spare
    ("cuda", 16, 8),  # the H200 machine
    ("cuda", 1, 1),
])
def test_slots(device, cores, expected):
    assert slots(device, cores) == expected


def campaign_with_pid(target, op, *, share_s, seed, device, out_dir, upstream_contracts_only=False, worker=None,
                      warm_up_share=None, sglang_wheel=None, with_malformed=False, ends_at=None, shares_gpu=False):
    """A stand-in campaign that records the process it ran in, when it started and how long its clock
    may run (until ``ends_at``)."""
    rec = new_record("campaign", seeds={"seed": seed}, device=device)
    add_group(rec, target=target, op="vision" if op == "vision" else "step_b_q", dtype="float32",
              shape_class="prefill", cases=10, passes=10, findings={}, ratios=[0.2])
    now = time.monotonic()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    (out_dir.parent / f"started-{os.getpid()}").touch()
    rec["notes"].append(f"pid {os.getpid()} started {now:.3f} clock {ends_at - now:.1f} share {share_s:.1f} "
                        f"shares_gpu {shares_gpu}")
    return rec, None


def waiting_selfcheck(out, marks: list):
    """The stand-in selfcheck, whose first round waits (up to 60 s) until two campaigns have started
    (``started-<pid>`` files beside their directories); ``marks`` gets the selfcheck's end."""
    from oracle_tests.kernel_oracle.test_main_job import SELFCHECK_ROWS, _fake_selfcheck

    mod = _fake_selfcheck(SELFCHECK_ROWS)
    fast = mod.run_selfcheck

    def run_selfcheck(device, cases, seed):
        deadline = time.monotonic() + 60
        while len(list(out.glob("runs/*/started-*"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        marks[:] = [time.monotonic()]
        return fast(device, cases, seed)
    mod.run_selfcheck = run_selfcheck
    return mod


@pytest.mark.usefixtures("stand_ins")
def test_the_main_job_runs_its_campaigns_side_by_side_each_with_the_window(tmp_path, monkeypatch):
    """Two campaigns at once: each in a child process of its own, started while the selfcheck runs in
    the job's process, each clock running to the job's deadline less the shrink slack and the finish
    (one after another, each had half of the window; after the selfcheck, the window less it), and both
    merged into the one record after the selfcheck's rows."""
    import sys

    marks: list = []
    out = tmp_path / "out"
    monkeypatch.setitem(sys.modules, "kernel_oracle.jobs.selfcheck", waiting_selfcheck(out, marks))
    monkeypatch.setattr(side_by_side, "slots", lambda device, cores=None: 2)
    monkeypatch.setattr(main_job_campaigns, "run_one_campaign", campaign_with_pid)
    monkeypatch.setattr(main_job_campaigns, "CHILD_STARTUP_S", 1.0)
    assert _run(out, "--op", "lora,vision", "--time", "60") == 1  # the stand-in selfcheck has findings
    rec = load(out / "latest.json")
    assert rec["summary"]["campaigns_at_once"] == 2
    rows = rec["summary"]["campaigns"]
    assert [(r["target"], r["family"], r["cases"]) for r in rows] == [("reference", "lora", 10),
                                                                     ("reference", "vision", 10)]
    notes = [n for n in rec["notes"] if n.startswith("pid ")]
    pids = {int(n.split()[1]) for n in notes}
    assert len(pids) == 2 and os.getpid() not in pids
    started_at, (selfcheck_end,) = [float(n.split()[3]) for n in notes], marks
    assert max(started_at) < selfcheck_end, "the campaigns waited for the selfcheck"
    slack = main_job_campaigns.SHRINK_SLACK_SHARE * 60 + main_job_campaigns.FINISH_S
    for n in notes:  # --time 60, no report reserve: each clock may run to 60 s less the slack, less its start
        clock = float(n.split()[5])
        assert 60 / 2 < clock <= 60 - slack, n  # a half share at most, one after another
        assert n.endswith("shares_gpu True"), n  # their workers' waits give up the core
    assert rec["targets"][0]["name"] == "selfcheck" and rec["groups"][0]["target"] == "selfcheck"
    assert rec["summary"]["selfcheck"]["rounds"] and not rec["summary"].get("failed_parts")


def test_a_campaign_clock_stops_at_ends_at_whatever_its_time_s(tmp_path):
    """``CampaignConfig.ends_at`` caps the clock, which starts once the worker is ready."""
    from kernel_oracle.fuzz.campaign import CampaignConfig, run_campaign

    started = time.monotonic()
    config = CampaignConfig(target="reference", op="step_a_q", out_dir=tmp_path / "c", time_s=120.0, seed=3,
                            device="cpu", progress=False, ends_at=started + 2.0)  # a worker: any host's mode
    assert config.clock_s(started) == 2.0 and config.clock_s(started + 10.0) == 1.0  # at least 1 s
    assert config.clock_s(started, elapsed=5.0) == 7.0
    assert dataclasses.replace(config, ends_at=None).clock_s(started) == 120.0
    rec = run_campaign(config)  # the worker's start-up comes off the 2 s, down to the 1-s floor
    assert rec["campaign"]["time_s"] <= 2.0 and rec["campaign"]["executed"] > 0
    assert rec["campaign"]["elapsed_s"] < rec["campaign"]["time_s"] + 10.0  # its clock, and one last case


def test_the_variants_compile_beside_side_by_side_campaigns_on_cuda_only(monkeypatch):
    """Side by side on CUDA our LoRA campaign gets no warm-up: one compiling child per core runs beside
    the campaigns at the lowest priority, the campaign's own stream first; on the CPU, or without our LoRA
    campaign, none starts."""
    from kernel_oracle.fuzz import precompile
    from kernel_oracle.fuzz.stream import CampaignStream
    from kernel_oracle.fuzz.targets import resolve_target

    started = []
    monkeypatch.setattr(precompile, "start_variants", lambda *a, **k: started.append((a, k)) or "handle")
    triton = resolve_target("triton", "cpu")
    targets = [("triton", triton, ("lora", "vision")), ("reference", resolve_target("reference", "cpu"), ("lora",))]
    pairs = [("triton", "lora"), ("triton", "vision"), ("reference", "lora")]
    beside = main_job_campaigns.precompile_beside
    assert beside(targets, pairs, "cpu", 90.0, print) is None
    assert beside(targets, [p for p in pairs if p != ("triton", "lora")], "cuda", 90.0, print) is None
    assert not started
    assert beside(targets, pairs, "cuda", 90.0, print, seed=5) == "handle"
    (args, kwargs), = started
    assert args == ("triton", "cuda") and kwargs["seconds"] == 90.0
    assert kwargs["processes"] == (os.cpu_count() or 1) and kwargs["nice"] == precompile.BESIDE_NICE == 19
    assert set(kwargs["ops"]) == set(triton.entries) - {"vision"}
    # the children first compile what the LoRA campaign of the job's seed will run (Note [The campaign's own stream])
    assert kwargs["stream"] == CampaignStream(5, "gpu", upstream_contracts_only=False)


@pytest.mark.usefixtures("stand_ins")
def test_a_child_that_dies_is_a_failed_part_not_a_pass(tmp_path, monkeypatch):
    monkeypatch.setattr(side_by_side, "slots", lambda device, cores=None: 2)
    monkeypatch.setattr(main_job_campaigns, "run_one_campaign", campaign_dies)
    monkeypatch.setattr(main_job_campaigns, "CHILD_STARTUP_S", 1.0)
    out = tmp_path / "out"
    assert _run(out, "--op", "lora,vision") in (1, 3)
    rec = load(out / "latest.json")
    failed = rec["summary"]["failed_parts"]
    assert any("campaign reference x lora: its process ended without an answer (exit status 9)" in f for f in failed)
    assert any("campaign reference x vision" in f for f in failed)


def campaign_dies(target, op, **kwargs):
    os._exit(9)


def mark_on_sigterm(directory: str) -> None:
    """Say "started", then wait; SIGTERM writes "stopped" (a campaign saves its state there)."""
    import signal
    from pathlib import Path

    def stop(signum, frame):
        Path(directory, "stopped").write_text("")
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    Path(directory, "started").write_text("")
    time.sleep(60)


def test_a_child_whose_job_is_killed_is_told_to_stop(tmp_path):
    """``kill -9`` of the job: each child gets SIGTERM from Linux (PR_SET_PDEATHSIG) and saves what it has,
    instead of running on orphaned until its clock ends."""
    import subprocess
    import sys

    job = subprocess.Popen([sys.executable, "-c",
                            "from kernel_oracle.jobs.side_by_side import ChildCall, run_side_by_side\n"
                            "from oracle_tests.kernel_oracle.test_side_by_side import mark_on_sigterm\n"
                            f"run_side_by_side([ChildCall('c', mark_on_sigterm, {{'directory': {str(tmp_path)!r}}})],"
                            " at_once=1)\n"],
                           cwd=os.getcwd())
    deadline = time.monotonic() + 60
    while not (tmp_path / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert (tmp_path / "started").exists()
    job.kill()
    job.wait(10)
    while not (tmp_path / "stopped").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert (tmp_path / "stopped").exists()
