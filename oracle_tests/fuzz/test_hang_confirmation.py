"""A silent case is a hang finding only once a retry with a longer wait is silent too (Note [Confirmed
hangs] in fuzz/hangs.py): a correct case that is merely slow on a loaded host is judged by its retry.

The targets are tiny user modules (the helpers of test_faults_campaign.py); the retry's numbers are the
campaign process's (fuzz.hangs), so a test shortens them with monkeypatch.  No verdict here rests on how
fast the machine is: a slow case is one that blocks until its retry (a call counter in a file), a hang
one that never answers, and the first-call allowance (Note [Workers] in fuzz/worker.py, tested on its
own below) is switched off where a test is about the retry.  The tests marked ``timing`` run again
beside busy processes (test_under_load.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel_oracle.fuzz.campaign import CampaignConfig, run_campaign

from .test_faults_campaign import LORA_ARGS, _one_case, _package, _sleepy



def _blocking(root: Path, calls: tuple) -> str:
    """step_a_q is the reference, except that its n-th call (counted across processes in ``root/calls``)
    never answers for n in ``calls``: a case slower than any timeout, whose retry answers at once."""
    return _package(root, "blocking", "import time\n\nfrom kernel_oracle.reference.lora import step_a_q_fwd as _ref\n\n"
                                      "KERNEL_ORACLE_STRICT = True\n\n"
                                      f"def step_a_q_fwd({LORA_ARGS}):\n"
                                      f"    path = {str(root / 'calls')!r}\n"
                                      f"    with open(path, 'a+') as fh:\n"
                                      f"        fh.write('.')\n"
                                      f"    with open(path) as fh:\n"
                                      f"        n = len(fh.read())\n"
                                      f"    while n in {tuple(calls)!r}:\n"
                                      f"        time.sleep(1)\n"
                                      f"    return _ref({LORA_ARGS})\n")


def _campaign(root: Path, spec: str, **kw) -> dict:
    kw.setdefault("budget", 1)
    return run_campaign(CampaignConfig(target=spec, op="step_a_q", seed=0, device="cpu", out_dir=root / "out",
                                       progress=False, case_timeout_s=0.5, **kw))


@pytest.fixture
def no_first_call_allowance(monkeypatch):
    """These tests are about the retry: a first call waits its timeout, as every other call."""
    import kernel_oracle.fuzz.worker as W

    monkeypatch.setattr(W, "FIRST_CALL_FACTOR", 0.0)


@pytest.mark.timing
def test_a_case_slower_than_its_timeout_is_judged_by_its_retry(tmp_path, monkeypatch, no_first_call_allowance):
    """Silent past the 0.5-s case timeout, answered on the retry: the case passes, no finding; the summary
    counts one slow case and a note says the case timeout is too short for the target here."""
    monkeypatch.syspath_prepend(str(tmp_path))
    rec = _campaign(tmp_path, _blocking(tmp_path, (1,)))
    assert rec["findings"] == [], [f["message"] for f in rec["findings"]]
    assert rec["summary"]["slow_cases"] == 1 and rec["summary"]["hang_retries"] == 1
    assert [(g["cases"], g["passes"]) for g in rec["groups"]] == [(1, 1)]
    (note,) = [n for n in rec["notes"] if "slow_cases" in n]
    assert "the case timeout of 0.5s is too short for this target's cases on this machine" in note, note


def test_a_true_hang_is_one_finding_whose_message_says_both_waits(tmp_path, monkeypatch, no_first_call_allowance):
    """Silent past the case timeout and past the retry's wait: one hang finding, its message says both
    waits; the next silent case is one more hit of it, with no retry."""
    import kernel_oracle.fuzz.hangs as H

    monkeypatch.setattr(H, "RETRY_MIN_S", 2.0)
    monkeypatch.syspath_prepend(str(tmp_path))
    rec = _campaign(tmp_path, _sleepy(tmp_path), budget=4)
    (f,) = rec["findings"]
    assert f["kind"] == "hang" and f["count"] == rec["campaign"]["executed"] >= 2, (f, rec["campaign"])
    assert f["message"] == "target hung: no answer within 0.5s, nor within 2s on a retry; worker killed and replaced"
    assert rec["summary"]["hang_retries"] == 1 and rec["summary"]["slow_cases"] == 0


def test_past_the_retry_limit_a_hang_is_reported_unconfirmed(tmp_path, monkeypatch, no_first_call_allowance):
    """The campaign's retries are spent on a slow case: the next silent case is a hang, labeled
    unconfirmed, not dropped."""
    import kernel_oracle.fuzz.hangs as H

    monkeypatch.setattr(H, "MAX_HANG_RETRIES", 1)
    monkeypatch.syspath_prepend(str(tmp_path))
    rec = _campaign(tmp_path, _blocking(tmp_path, (1, 3)), budget=2)
    assert rec["summary"]["slow_cases"] == 1 and rec["summary"]["hang_retries"] == 1
    (f,) = rec["findings"]
    assert f["kind"] == "hang"
    assert f["message"] == ("target hung: no answer within 0.5s (unconfirmed: the campaign's retries (1) are spent); "
                            "worker killed and replaced")


@pytest.mark.timing
def test_without_time_for_a_retry_a_hang_is_reported_unconfirmed(tmp_path, monkeypatch, no_first_call_allowance):
    """A retry (10 s and a fresh worker) would overrun the campaign's time plus its shrink slack (none
    here): no retry, and the hang is a finding that says so."""
    monkeypatch.syspath_prepend(str(tmp_path))
    rec = _campaign(tmp_path, _sleepy(tmp_path), budget=None, time_s=1.5, shrink_slack_s=0.0)
    (f,) = rec["findings"]
    assert f["message"] == ("target hung: no answer within 0.5s (unconfirmed: no time left for a retry); "
                            "worker killed and replaced")
    assert rec["summary"]["hang_retries"] == 0  # no 10-s retry ran


# ---- a worker's first call (Note [Workers] in fuzz/worker.py) -----------------------------------------------

def _slow_first_call(root: Path, first_s: float) -> str:
    """step_a_q is the reference, after ``first_s`` seconds on the first call in each process (a lazy import)."""
    return _package(root, "slow_first", "import time\n\n"
                                        "from kernel_oracle.reference.lora import step_a_q_fwd as _ref\n\n"
                                        "KERNEL_ORACLE_STRICT = True\n_WARM = []\n\n"
                                        f"def step_a_q_fwd({LORA_ARGS}):\n"
                                        f"    if not _WARM:\n"
                                        f"        time.sleep({first_s})\n"
                                        f"        _WARM.append(True)\n"
                                        f"    return _ref({LORA_ARGS})\n")


@pytest.mark.timing
def test_a_target_slow_only_on_its_first_call_is_neither_a_hang_nor_a_slow_case(tmp_path, monkeypatch):
    """The first call's warm-up (3 s) is past the 0.5-s case timeout but within the first call's allowance
    (here many times the worker's start-up, on any machine): no retry, no slow case, no note blaming the
    machine, and every later case is judged against the timeout alone."""
    import kernel_oracle.fuzz.worker as W

    monkeypatch.setattr(W, "FIRST_CALL_FACTOR", 1000.0)
    monkeypatch.syspath_prepend(str(tmp_path))
    rec = _campaign(tmp_path, _slow_first_call(tmp_path, 3.0), budget=3)
    assert rec["findings"] == [], [f["message"] for f in rec["findings"]]
    assert rec["summary"]["hang_retries"] == 0 and rec["summary"]["slow_cases"] == 0, rec["summary"]
    assert not [n for n in rec["notes"] if "slow_cases" in n], rec["notes"]
    assert rec["campaign"]["executed"] == 3 and rec["campaign"]["worker_restarts"] == 0


def test_a_target_silent_from_its_first_call_pays_the_allowance_once(tmp_path, monkeypatch):
    """A first call silent through its allowance is a hang whose message says so; the next fresh worker's
    first call of the op gets no allowance (a hanging target would pay it on every case)."""
    import kernel_oracle.fuzz.worker as W

    monkeypatch.setattr(W, "FIRST_CALL_FACTOR", 0.5)
    spec = _sleepy(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    with W.Worker("cpu", case_timeout_s=0.5) as worker:
        worker.describe(spec)
        first, second = worker.check(spec, _one_case()), worker.check(spec, _one_case())
    assert first.kind == second.kind == "hang" and worker.restarts == 2
    assert first.message.startswith("no answer within 0.5s (a first call, given ") and \
        first.message.endswith("s more to warm up); worker killed and replaced"), first.message
    assert second.message == "no answer within 0.5s; worker killed and replaced"


@pytest.mark.parametrize("case_timeout_s, first_wait_s, wait_s", [
    (0.5, 0.5, 10.0), (1.0, 1.0, 10.0), (5.0, 5.0, 20.0), (30.0, 30.0, 120.0), (60.0, 60.0, 120.0),
    (1.0, 30.0, 30.0),  # a compiling worker waited 30 s (its compile grace): the retry waits as long
    (120.0, 120.0, None), (120.0, 480.0, None),  # the longest case timeout: no longer wait to retry with
])
def test_the_retry_waits_four_times_the_timeout_within_bounds(case_timeout_s, first_wait_s, wait_s):
    from kernel_oracle.fuzz.hangs import retry_wait_s

    assert retry_wait_s(case_timeout_s, first_wait_s) == wait_s
