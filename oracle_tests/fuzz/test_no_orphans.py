"""No process a target starts outlives its campaign (Note [Worker processes] in fuzz/process_tree.py), also
after ``kill -9`` of the campaign, and for a daemon in its own session with an empty environment; and the
worker passes the target nothing that says it is under test.  Before, such a daemon (found only by a
token in its environment) and every child of a campaign killed by SIGKILL outlived the run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from oracle_tests.fuzz.test_faults_campaign import LORA_ARGS, _alive, _env, _fuzz_cmd, _package, _wait_for

# step_a_q starts, once, a plain child and a daemon (forked twice, its own session, an empty environment),
# writes their pids, then hangs or answers
_SPAWNS = """import os, subprocess, sys, time

DAEMON = '''import os, sys, time
if os.fork():
    os._exit(0)
os.setsid()
with open(sys.argv[1], "w") as fh:
    fh.write(str(os.getpid()))
time.sleep(600)
'''

def step_a_q_fwd({args}):
    root = {root!r}
    if not os.path.exists(os.path.join(root, "pids")):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        subprocess.run([sys.executable, "-c", DAEMON, os.path.join(root, "daemon")], env={{}},
                       start_new_session=True, close_fds=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while not os.path.exists(os.path.join(root, "daemon")) or not open(os.path.join(root, "daemon")).read():
            time.sleep(0.01)
        with open(os.path.join(root, "pids.tmp"), "w") as fh:
            fh.write(f"{{child.pid}} {{open(os.path.join(root, 'daemon')).read()}}")
        os.replace(os.path.join(root, "pids.tmp"), os.path.join(root, "pids"))
    {then}
"""


def _spawner(root: Path, then: str) -> str:
    return _package(root, "spawns", _SPAWNS.format(args=LORA_ARGS, root=str(root), then=then))


def _gone(pids: list, within: float = 15.0) -> list:
    """The pids still alive after ``within`` seconds."""
    deadline = time.monotonic() + within
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


def _kill_all(pids: list) -> None:
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


def test_kill_9_of_the_campaign_ends_what_its_target_started(tmp_path):
    spec = _spawner(tmp_path, "time.sleep(600)")
    proc = subprocess.Popen(_fuzz_cmd("--targets", spec, "--op", "step_a_q", "--time", "120", "--case-timeout",
                                      "100", "--out", tmp_path / "out"), env=_env(tmp_path),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait_for(tmp_path / "pids")
        pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
        assert all(_alive(p) for p in pids)
        proc.send_signal(signal.SIGKILL)  # the campaign alone: nothing of it can clean up
        proc.wait(timeout=30)
        left = _gone(pids)
    finally:
        if proc.poll() is None:
            proc.kill()
        _kill_all([int(p) for p in (tmp_path / "pids").read_text().split()] if (tmp_path / "pids").exists() else [])
    assert not left, "a process the target started (the daemon: own session, empty environment) outlived kill -9"


def test_a_daemon_in_its_own_session_with_an_empty_environment_ends_with_the_campaign(tmp_path):
    spec = _spawner(tmp_path, "raise RuntimeError('done')")
    done = subprocess.run(_fuzz_cmd("--targets", spec, "--op", "step_a_q", "--cases", "3", "--out", tmp_path / "out"),
                          env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    left = _gone(pids)
    _kill_all(left)
    assert done.returncode == 1, done.stdout + done.stderr
    assert not left, "the daemon outlived the campaign"


def test_the_target_sees_nothing_that_says_it_is_tested(tmp_path):
    """A target right only when the worker's token variable is set was clean: the token is gone."""
    spec = _package(tmp_path, "dieselgate", f"import os\nfrom kernel_oracle.reference.lora import step_a_q_fwd as _ref\n\n"
                                            f"def step_a_q_fwd({LORA_ARGS}):\n"
                                            f"    out = _ref({LORA_ARGS})\n"
                                            f"    tested = any(k.startswith('KERNEL_ORACLE') for k in os.environ)\n"
                                            f"    return out if tested else out * 1.25\n")
    done = subprocess.run(_fuzz_cmd("--targets", spec, "--op", "step_a_q", "--cases", "6", "--out", tmp_path / "out"),
                          env={k: v for k, v in _env(tmp_path).items() if not k.startswith("KERNEL_ORACLE")},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    findings = json.loads((tmp_path / "out" / "summary.json").read_text())["findings"]
    assert [f["kind"] for f in findings] == ["mismatch"], findings


def test_the_worker_environment_carries_no_kernel_oracle_variable(monkeypatch):
    from kernel_oracle.fuzz.worker import Worker

    for k in [k for k in os.environ if k.startswith("KERNEL_ORACLE")]:
        monkeypatch.delenv(k)
    with Worker("cpu") as worker:
        worker.start()
        serving = worker._proc.pid
        children = Path(f"/proc/{serving}/task/{serving}/children").read_text().split()
        env = Path(f"/proc/{children[0]}/environ").read_bytes().split(b"\0") if children else []
    assert children and not [v for v in env if v.startswith(b"KERNEL_ORACLE")], env
    assert sys.platform.startswith("linux")


def test_without_isolation_the_campaign_ends_what_its_target_started(tmp_path):
    spec = _spawner(tmp_path, "raise RuntimeError('done')")
    done = subprocess.run(_fuzz_cmd("--targets", spec, "--op", "step_a_q", "--cases", "3", "--no-isolate",
                                    "--out", tmp_path / "out"), env=_env(tmp_path), capture_output=True, text=True,
                          timeout=300)
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    left = _gone(pids)
    _kill_all(left)
    assert done.returncode == 1, done.stdout + done.stderr
    assert not left, "a process the target started outlived the in-process campaign"
