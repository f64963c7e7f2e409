"""``fuzz.campaign_config.CampaignConfig``: one frozen value per campaign, checked once when built, with
what a campaign derives from it as properties (Note [Campaign config])."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import pytest

from kernel_oracle.fuzz.campaign_config import (DEFAULT_BUDGET, MAX_CASE_TIMEOUT_S, CampaignConfig, CampaignError,
                                                case_timeout_for)
from kernel_oracle.harness.targets import TargetSources, TargetSpec


def test_a_config_parses_its_target_and_derives_the_rest(tmp_path):
    c = CampaignConfig(target="sglang==0.5.23", op="step_a_q", out_dir=str(tmp_path), sglang_wheel="/wheels")
    assert c.target == TargetSpec.parse("sglang==0.5.23") and c.out_dir == Path(tmp_path)
    assert c.family == "lora" and c.case_budget == DEFAULT_BUDGET and c.case_timeout == MAX_CASE_TIMEOUT_S
    assert c.sources == TargetSources(sglang_wheel="/wheels")
    timed = dataclasses.replace(c, time_s=30.0)
    assert timed.case_budget is None and timed.case_timeout == case_timeout_for(30.0)
    assert pickle.loads(pickle.dumps(c)) == c  # it travels to cluster workers as it is
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.seed = 3  # type: ignore[misc]


# keyword -> the one-line error it gives (the same messages run_campaign's callers always saw)
BAD = {
    "op": ("conv", "op='conv' names ['conv'], which no family has; the only valid values are the families "),
    "budget": (-1, "Expected a non-negative int but got budget=-1"),
    "time_s": (float("nan"), "Expected a positive finite number of seconds but got time_s=nan"),
    "case_timeout_s": (0, "Expected a positive finite number of seconds but got case_timeout_s=0"),
    "device": ("mps", "device='mps' is invalid; the only valid values are 'cpu', 'cuda'"),
    "shrink_slack_s": (-1.0, "Expected a non-negative finite number of seconds but got shrink_slack_s=-1.0"),
    "target": ("triton@", "Expected a target spec such as "),
    "sglang_wheel": (3, "Expected sglang_wheel to be a path string or None but got sglang_wheel=3"),
}


@pytest.mark.parametrize("field", sorted(BAD))
def test_a_bad_field_is_a_campaign_error_naming_it(field, tmp_path):
    value, message = BAD[field]
    kw = {"target": "reference", "op": "lora", "out_dir": tmp_path, field: value}
    with pytest.raises(CampaignError) as info:
        CampaignConfig(**kw)
    assert str(info.value).startswith(message), str(info.value)
