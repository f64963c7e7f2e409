"""Fault injection, processes and signals (row D15 of the table in ``test_fault_injection.py``): no process a
target starts outlives its campaign, and SIGTERM at any moment exits 3 with one line (Note [Stopping a
campaign] in ``fuzz/stopping.py``), even where its raise is swallowed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from oracle_tests.fuzz.test_fault_injection import _alive, _env, _fuzz_cmd, _package


_SPAWNER = """import os, subprocess, sys, time

def step_a_q_fwd(*args):
    root = {root!r}
    if not os.path.exists(os.path.join(root, "pids")):
        sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
        kept = subprocess.Popen(sleeper)  # in the worker's group: an orphan once the worker dies
        gone = subprocess.Popen(sleeper, start_new_session=True)  # detached: a session of its own
        with open(os.path.join(root, "pids.tmp"), "w") as fh:
            fh.write(f"{{kept.pid}} {{gone.pid}}")
        os.replace(os.path.join(root, "pids.tmp"), os.path.join(root, "pids"))
    time.sleep(600)  # a hang: the worker is killed and replaced
"""


def test_no_process_outlives_the_campaign(tmp_path):
    spec = _package(tmp_path, "spawner", _SPAWNER.format(root=str(tmp_path)))
    proc = subprocess.run(_fuzz_cmd("--targets", spec, "--op", "step_a_q", "--time", "3", "--case-timeout", "1",
                                    "--out", tmp_path / "out"), env=_env(tmp_path), capture_output=True, text=True,
                          timeout=300)
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if _alive(p)], "a process the target started outlived the campaign"
    assert proc.returncode == 1 and "-hang-step_a_q" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("delay", [0.5, 1.0, 2.5])
def test_sigterm_in_the_first_seconds_exits_3(tmp_path, delay):
    """From the command's first import on (Python's own start-up, before any of our code runs, is
    the one moment a signal still ends the process the default way)."""
    out = tmp_path / "out"
    proc = subprocess.Popen(_fuzz_cmd("--targets", "reference", "--op", "lora", "--time", "60", "--out", out),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        time.sleep(delay)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 3, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "interrupted by SIGTERM" in lines[0], err
    if (out / "summary.json").exists():
        assert json.loads((out / "summary.json").read_text())["summary"]["status"] == "interrupted"


def test_a_signal_whose_raise_is_swallowed_still_stops_the_campaign(monkeypatch):
    """SIGTERM's raise lands in a garbage-collector callback, which swallows it (as one of 16 runs did,
    leaving SIGTERM ignored): the campaign's next case stops it, and nothing is printed about it."""
    import gc

    from kernel_oracle.fuzz.stopping import CampaignInterrupted, sigterm_interrupts

    def callback(phase, info):
        if phase == "start":
            gc.callbacks.remove(callback)
            os.kill(os.getpid(), signal.SIGTERM)
            sum(range(10_000))  # the handler runs here, inside the callback

    reported = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)  # what Python would print
    with sigterm_interrupts() as stop:
        gc.callbacks.append(callback)
        gc.collect()
        assert stop.signame == "SIGTERM"
        with pytest.raises(CampaignInterrupted):
            stop.check()
    assert reported == []


# a command line whose SIGTERM lands inside a library's broad ``except`` (as torch's, numpy's and triton's imports
# have), at the moment ``where`` names; ``then_fail``: the half-imported library fails what comes next
_SWALLOWED = """import importlib, os, signal, sys, time, types
import kernel_oracle.cli as cli
import kernel_oracle.fuzz.campaign as campaign
where, then_fail = sys.argv[1], sys.argv[2] == "1"

def swallow():
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises in here
    except BaseException:
        pass
    if then_fail:
        raise ImportError("cannot load module more than once per process")

def importing(name, *args):
    if where == "import" and name == "kernel_oracle.cli.fuzz":
        swallow()
    return importlib.import_module(name, *args)

def starting(*args, **kwargs):
    swallow()
    return run_campaign(*args, **kwargs)

cli.importlib = types.SimpleNamespace(import_module=importing)
if where == "campaign":
    run_campaign, campaign.run_campaign = campaign.run_campaign, starting
sys.exit(cli.main(sys.argv[3:]))
"""


@pytest.mark.parametrize("where, then_fail", [("import", False), ("import", True), ("campaign", False),
                                              ("campaign", True)])
def test_a_sigterm_swallowed_before_the_campaign_still_exits_3(tmp_path, where, then_fail):
    """The command line's own raise is swallowed: the command still exits 3 with the one interrupt line, soon,
    and a campaign it reaches stops before its first case with its state saved (Note [Stopping a campaign])."""
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-c", _SWALLOWED, where, str(int(then_fail)), "fuzz", "--device", "cpu",
                           "--quiet", "--targets", "reference", "--op", "lora", "--time", "60", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 3, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "interrupted by SIGTERM" in lines[0], proc.stderr[-2000:]
    if (out / "summary.json").exists():  # soon: no case ran (the 60-s campaign did not go on)
        assert json.loads((out / "summary.json").read_text())["campaign"]["executed"] == 0
    if where == "campaign" and not then_fail:
        summary = json.loads((out / "summary.json").read_text())["summary"]
        assert summary["status"] == "interrupted" and "after 0 cases" in lines[0], (summary, lines)
