"""A silent case is a hang finding only once a retry with a longer wait is silent too (Note [Confirmed
hangs] in fuzz/hangs.py): a correct case that is merely slow on a loaded host is judged by its retry.

The targets are tiny user modules (the helpers of test_faults_campaign.py); the retry's numbers are the
campaign process's (fuzz.hangs), so a test shortens them with monkeypatch.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kernel_oracle.fuzz.campaign import CampaignConfig, run_campaign

from .test_faults_campaign import LORA_ARGS, _package, _sleepy


def _slow(root: Path, sleep_s: float) -> str:
    """step_a_q is the reference after ``sleep_s`` seconds: correct, and slow (as on a loaded host)."""
    return _package(root, "slow", "import time\n\nfrom kernel_oracle.reference.lora import step_a_q_fwd as _ref\n\n"
                                  "KERNEL_ORACLE_STRICT = True\n\n"
                                  f"def step_a_q_fwd({LORA_ARGS}):\n"
                                  f"    time.sleep({sleep_s})\n"
                                  f"    return _ref({LORA_ARGS})\n")


def _campaign(root: Path, spec: str, **kw) -> dict:
    kw.setdefault("budget", 1)
    return run_campaign(CampaignConfig(target=spec, op="step_a_q", seed=0, device="cpu", out_dir=root / "out",
                                       progress=False, case_timeout_s=0.5, **kw))


def test_a_case_slower_than_its_timeout_is_judged_by_its_retry(tmp_path, monkeypatch):
    """1.5 s against a 0.5-s case timeout: the retry (5 s) answers, the case passes, no finding; the
    summary counts one slow case and a note says the machine was too slow for the timeout."""
    import kernel_oracle.fuzz.hangs as H

    monkeypatch.setattr(H, "RETRY_MIN_S", 5.0)
    monkeypatch.syspath_prepend(str(tmp_path))
    rec = _campaign(tmp_path, _slow(tmp_path, 1.5))
    assert rec["findings"] == [], [f["message"] for f in rec["findings"]]
    assert rec["summary"]["slow_cases"] == 1 and rec["summary"]["hang_retries"] == 1
    assert [(g["cases"], g["passes"]) for g in rec["groups"]] == [(1, 1)]
    (note,) = [n for n in rec["notes"] if "slow_cases" in n]
    assert "too busy for the case timeout of 0.5s" in note, note


def test_a_true_hang_is_one_finding_whose_message_says_both_waits(tmp_path, monkeypatch):
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


def test_past_the_retry_limit_a_hang_is_reported_unconfirmed(tmp_path, monkeypatch):
    """The campaign's retries are spent on a slow case: the next silent case is a hang, labeled
    unconfirmed, not dropped."""
    import kernel_oracle.fuzz.hangs as H

    monkeypatch.setattr(H, "RETRY_MIN_S", 5.0)
    monkeypatch.setattr(H, "MAX_HANG_RETRIES", 1)
    monkeypatch.syspath_prepend(str(tmp_path))
    rec = _campaign(tmp_path, _slow(tmp_path, 1.5), budget=2)
    assert rec["summary"]["slow_cases"] == 1 and rec["summary"]["hang_retries"] == 1
    (f,) = rec["findings"]
    assert f["kind"] == "hang"
    assert f["message"] == ("target hung: no answer within 0.5s (unconfirmed: the campaign's retries (1) are spent); "
                            "worker killed and replaced")


def test_without_time_for_a_retry_a_hang_is_reported_unconfirmed(tmp_path, monkeypatch):
    """A retry (10 s and a fresh worker) would overrun the campaign's time plus its shrink slack (none
    here): no retry, and the hang is a finding that says so; the campaign keeps its time."""
    monkeypatch.syspath_prepend(str(tmp_path))
    started = time.monotonic()
    rec = _campaign(tmp_path, _sleepy(tmp_path), budget=None, time_s=1.5, shrink_slack_s=0.0)
    took = time.monotonic() - started
    (f,) = rec["findings"]
    assert f["message"] == ("target hung: no answer within 0.5s (unconfirmed: no time left for a retry); "
                            "worker killed and replaced")
    assert rec["summary"]["hang_retries"] == 0
    assert took < rec["campaign"]["startup_s"] + 1.5 + 0.5 + 15.0, took  # no 10-s retry


@pytest.mark.parametrize("case_timeout_s, first_wait_s, wait_s", [
    (0.5, 0.5, 10.0), (1.0, 1.0, 10.0), (5.0, 5.0, 20.0), (30.0, 30.0, 120.0), (60.0, 60.0, 120.0),
    (1.0, 30.0, 30.0),  # a compiling worker waited 30 s (its compile grace): the retry waits as long
    (120.0, 120.0, None), (120.0, 480.0, None),  # the longest case timeout: no longer wait to retry with
])
def test_the_retry_waits_four_times_the_timeout_within_bounds(case_timeout_s, first_wait_s, wait_s):
    from kernel_oracle.fuzz.hangs import retry_wait_s

    assert retry_wait_s(case_timeout_s, first_wait_s) == wait_s
