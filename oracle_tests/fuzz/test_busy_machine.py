"""A busy machine makes a case slower, never a hang (Note [Busy machines] in fuzz/cpu_wait.py).

The busy machine is planted through the worker's reading of its waits for a core (``cpu_waits``, an
injected measurement: the worker waited for a core nine tenths of the time, a machine ten times slower),
so the verdicts do not rest on how busy the machine running the suite is; one test burns real CPU time
and is run beside busy processes by test_under_load.py.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

import kernel_oracle.fuzz.worker as W
from kernel_oracle.fuzz.cpu_wait import cpu_waits, waited_s
from kernel_oracle.jobs import main_job_campaigns

from .test_faults_campaign import LORA_ARGS, _one_case, _package, _sleepy


def _slow(root: Path, sleep_s: float) -> str:
    """step_a_q is the reference after ``sleep_s`` seconds: correct, and slow."""
    return _package(root, "slow", "import time\n\nfrom kernel_oracle.reference.lora import step_a_q_fwd as _ref\n\n"
                                  "KERNEL_ORACLE_STRICT = True\n\n"
                                  f"def step_a_q_fwd({LORA_ARGS}):\n"
                                  f"    time.sleep({sleep_s})\n"
                                  f"    return _ref({LORA_ARGS})\n")


def _burning(root: Path, cpu_s: float) -> str:
    """step_a_q is the reference after ``cpu_s`` seconds of its own thread's CPU time: however busy the
    machine, the same work."""
    return _package(root, "burning", "import time\n\nfrom kernel_oracle.reference.lora import step_a_q_fwd as _ref\n\n"
                                     "KERNEL_ORACLE_STRICT = True\n\n"
                                     f"def step_a_q_fwd({LORA_ARGS}):\n"
                                     f"    started = time.thread_time()\n"
                                     f"    while time.thread_time() - started < {cpu_s}:\n"
                                     f"        pass\n"
                                     f"    return _ref({LORA_ARGS})\n")


@pytest.fixture
def busy(monkeypatch):
    """A machine where the worker waits for a core nine tenths of the time (the worker's measurement,
    injected); no first-call allowance, so every call waits its timeout alone."""
    monkeypatch.setattr(W, "cpu_waits", lambda pid: {"1": 0.9 * time.monotonic()})
    monkeypatch.setattr(W, "FIRST_CALL_FACTOR", 0.0)


def test_a_case_slow_only_because_the_machine_is_busy_is_answered(tmp_path, monkeypatch, busy):
    """3 s on the wall clock, 0.3 s of them the worker's own: within the 1-s case timeout."""
    spec = _slow(tmp_path, 3.0)
    monkeypatch.syspath_prepend(str(tmp_path))
    with W.Worker("cpu", case_timeout_s=1.0) as worker:
        worker.describe(spec)
        answer = worker.check(spec, _one_case())
    assert answer.ok, answer
    assert worker.restarts == 0 and worker.slow_answers == 0


def test_a_hang_on_a_busy_machine_is_still_a_hang(tmp_path, monkeypatch, busy):
    """A worker that never answers is a hang: after its timeout of its own time, or, starved of every core,
    after MAX_STRETCH times the timeout on the wall clock."""
    spec = _sleepy(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    with W.Worker("cpu", case_timeout_s=0.2) as worker:
        worker.describe(spec)
        assert worker.check(spec, _one_case()).message == "no answer within 0.2s; worker killed and replaced"
        monkeypatch.setattr(W, "cpu_waits", lambda pid: {"1": time.monotonic()})  # waiting all the time
        monkeypatch.setattr(W, "MAX_STRETCH", 3.0)
        assert worker.check(spec, _one_case()).message == "no answer within 0.2s; worker killed and replaced"
    assert worker.restarts == 2


def test_the_main_jobs_campaign_on_a_busy_machine_finds_no_hang(tmp_path, monkeypatch, busy):
    """A main-job campaign of a 6-s share (case timeout 1.5 s, no time for a retry) of a correct target
    whose cases take 2.5 s on the wall clock, 0.25 s of them its own: no hang finding."""
    spec = _slow(tmp_path, 2.5)
    monkeypatch.syspath_prepend(str(tmp_path))
    with W.Worker("cpu") as worker:
        rec, problem = main_job_campaigns.run_one_campaign(spec, "step_a_q", share_s=6.0, seed=0, device="cpu",
                                                           out_dir=tmp_path / "out", worker=worker)
    assert problem is None and rec["campaign"]["case_timeout_s"] == 1.5, (problem, rec and rec["campaign"])
    assert rec["findings"] == [], [f["message"] for f in rec["findings"]]
    assert rec["campaign"]["executed"] >= 1 and rec["summary"]["hang_retries"] == 0


@pytest.mark.timing
def test_a_case_of_a_second_of_cpu_time_meets_a_two_second_timeout(tmp_path, monkeypatch):
    """Real CPU work, no injected measurement: alone this passes on any machine fast enough to run the suite,
    and beside busy processes (test_under_load.py) only because waits for a core do not count."""
    monkeypatch.setattr(W, "FIRST_CALL_FACTOR", 0.0)
    spec = _burning(tmp_path, 1.0)
    monkeypatch.syspath_prepend(str(tmp_path))
    with W.Worker("cpu", case_timeout_s=2.0) as worker:
        worker.describe(spec)
        answers = [worker.check(spec, _one_case()) for _ in range(2)]
    assert [getattr(a, "ok", a) for a in answers] == [True, True]


def test_a_threads_waits_for_a_core_are_read_and_the_longest_counts():
    waits = cpu_waits(os.getpid())
    if waits is None:
        pytest.skip("this kernel gives no per-thread scheduler statistics (/proc/PID/task/TID/schedstat)")
    assert str(threading.get_native_id()) in waits and all(w >= 0 for w in waits.values())
    assert waited_s({"1": 1.0, "2": 5.0}, {"1": 3.0, "2": 5.5, "3": 0.25}) == 2.0  # the most, not the sum
    assert waited_s({"1": 1.0}, {"1": 1.0, "3": 4.0}) == 4.0  # a thread started meanwhile: all of its wait
    assert waited_s(None, {"1": 3.0}) == waited_s({"1": 1.0}, None) == 0.0  # unreadable: nothing discounted
    assert cpu_waits(None) is None and cpu_waits(2**22 + 12345) is None
