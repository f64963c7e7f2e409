"""A finding that a corpus entry's own case shows names the entry (Note [Known cases]): the README's
``fuzz --targets sglang==0.5.12`` names PR #28371 on its findings, not only the matrix."""

from __future__ import annotations

from kernel_oracle.fuzz.campaign import run_campaign
from kernel_oracle.fuzz.campaign_config import CampaignConfig
from kernel_oracle.harness.check import Case
from kernel_oracle.harness.problem_lora import LoRAProblem
from kernel_oracle.jobs.bug_corpus import known_cases_for
from oracle_tests._user_kernels import unique_name, write_user_module

# a case that a dropped segment end shows, and one (a rank-0 slot: nothing to add) that it does not, in any op
_SHOWS = LoRAProblem("step_b_q", seg_lens=(3, 2), weight_indices=(0, 1), lora_ranks=(16, 16), scalings=(1., 2.),
                     H=1, qk=16, vd=16, C=24, R=16, seed=1)
_HIDES = LoRAProblem("step_a_q", seg_lens=(3,), weight_indices=(0,), lora_ranks=(0,), scalings=(1.,),
                     H=1, qk=16, vd=16, C=24, R=16, seed=1)


def test_a_finding_names_the_entry_whose_case_shows_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name = unique_name()
    write_user_module(tmp_path, name, "drops_segment_end")
    shows = {"id": "drops-segment-end", "title": "the last row of each segment", "upstream": "https://example.org/1"}
    other = {"id": "something-else", "title": "a bug of step_a_q", "upstream": "https://example.org/2"}
    rec = run_campaign(CampaignConfig(target=name, op="step_b_q", budget=120, seed=0, device="cpu",
                                      out_dir=tmp_path / "out", progress=False,
                                      known_cases=((shows, Case(_SHOWS)), (other, Case(_HIDES)))))
    assert len(rec["findings"]) == 1
    assert rec["findings"][0]["corpus"] == [shows]


def test_the_corpus_cases_of_a_release_are_its_targets_entries():
    ids = {label["id"] for label, _ in known_cases_for("sglang==0.5.12")}
    assert "sglang-pr-28371" in ids
    assert not any(i.startswith("sglang-trt") for i in ids), "another target's entries stay out"
    assert known_cases_for("triton") == ()
