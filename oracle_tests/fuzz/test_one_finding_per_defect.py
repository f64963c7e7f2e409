"""One planted defect in a user's plain-torch module is one finding, and a correct module is clean:
each campaign runs from the module's own folder, as the README's five-minute path does
(oracle_tests/_user_kernels.py plants the bugs).  Before contract findings keyed on the contract, the
missing max_len check was three findings (one per wrong error text); before a malformed sighting joined
the valid input's finding, a dropped segment end was two and an ignored permutation four."""

from __future__ import annotations

import pytest

from kernel_oracle.fuzz.campaign import run_campaign
from kernel_oracle.fuzz.campaign_config import CampaignConfig
from oracle_tests._user_kernels import unique_name, write_user_module


def _campaign(tmp_path, monkeypatch, plant: str, seed: int = 0) -> dict:
    monkeypatch.chdir(tmp_path)
    name = unique_name()
    write_user_module(tmp_path, name, plant)
    return run_campaign(CampaignConfig(target=name, op="lora", budget=400, seed=seed, device="cpu",
                                       out_dir=tmp_path / "out", progress=False))


def test_a_correct_module_is_clean(tmp_path, monkeypatch):
    rec = _campaign(tmp_path, monkeypatch, "")
    assert rec["findings"] == [], [f["headline"] for f in rec["findings"]]
    assert rec["validation_gaps"], "a module without strict validation accepts malformed metadata: gaps, listed"
    # its gaps are not failed cases: every case passed or is a gap (the report said "8919 of 10142 passed")
    cases, passes, gaps = (sum(g[k] for g in rec["groups"]) for k in ("cases", "passes", "gaps"))
    assert gaps == sum(g["count"] for g in rec["validation_gaps"]) and passes + gaps == cases, (cases, passes, gaps)
    from kernel_oracle.reports.model import Result

    model = Result.from_dict(rec)
    assert (model.fuzz_cases, model.passes + model.gaps, model.selfcheck_rows) == (cases, cases, 0)


@pytest.mark.parametrize("plant, kind, op", [("no_max_len_check", "contract", None),
                                             ("drops_segment_end", "mismatch", "step_b_q"),
                                             ("ignores_permutation", "mismatch", "step_b_q"),
                                             ("ignores_scaling", "mismatch", "step_b_q")])
def test_one_planted_defect_is_one_finding(tmp_path, monkeypatch, plant, kind, op):
    rec = _campaign(tmp_path, monkeypatch, plant)
    assert [f["kind"] for f in rec["findings"]] == [kind], [f["headline"] for f in rec["findings"]]
    f = rec["findings"][0]
    if op is not None:
        assert f["op"] == op
    if kind == "contract":
        assert f["bucket"]["cause"] == "contract lora.missing_max_len"
        assert "breaks the upstream contract lora.missing_max_len" in f["headline"]
    problem = f["problem"]["problem"]
    assert f["problem"]["mutation"] is None or kind == "contract", "a mismatch's example needs no mutation"
    assert len(problem["seg_lens"]) <= 2 and problem["H"] == 1, problem
    assert problem["stale_host_ints"] is None and problem["seg_lens_drift"] is None, problem
    if plant == "ignores_permutation":
        assert "it depends on the permutation" in f["headline"], f["headline"]
    if plant == "ignores_scaling":
        assert "it depends on the slot's scaling" in f["headline"], f["headline"]
