"""Cases that span the kernels' tiles (Note [Tile-aware sizes], Note [Coverage from the draws]): at the GPU
limits every multi-block class of every tiled dimension holds at least 20 % of a target's cases, measured from
the draws alone on the CPU; at the CPU limits every class is reached; a campaign's record counts what its cases
reach, the same table the draws predict, and the reports show it; the preset governs csgmv's sizes; and a defect
past the first block (our step A_v without its second kv_lora_rank block) is found within the main job's
budget on the CPU."""

from __future__ import annotations

import pytest
from hypothesis import find, settings

from kernel_oracle.fuzz.campaign import run_campaign
from kernel_oracle.fuzz.campaign_config import CampaignConfig
from kernel_oracle.fuzz.coverage import draw_coverage, on_gpu
from kernel_oracle.fuzz.strategies_csgmv import csgmv_problems
from kernel_oracle.fuzz.targets import resolve_target
from kernel_oracle.harness.tile_coverage import CoverageTable, shortfalls

from oracle_tests._sglang_releases import wheel_or_skip
from oracle_tests.conftest import DEVICE

# (target, family) whose blocks are known, each code the suite tests: ours, the three kv_b codes of a release
# (the TRT-LLM-style one with its fused sides), its csgmv files with and without the split-K kernel
TILED = [("triton", "lora"), ("triton", "vision"), ("sglang==0.5.23", "lora"),
         ("sglang-trt==0.5.23@lora_opti=on", "lora"), ("sglang-v2==0.5.23", "lora"),
         ("sglang-csgmv==0.5.23", "csgmv"), ("sglang-csgmv==0.5.23@split_k=on", "csgmv"),
         ("sglang-csgmv==0.5.10", "csgmv")]
# the share each multi-block class must hold at the GPU limits (several blocks, a tail, a split reduction)
GPU_MINIMUM = 0.20
DRAWN = 1000


def _info(spec: str) -> dict:
    if spec.startswith("sglang"):
        wheel_or_skip("0.5.23" if "0.5.23" in spec else "0.5.10")
    target = resolve_target(spec, "cpu")
    assert target.available, target.reason
    return target.to_record()


@pytest.mark.parametrize("spec,family", TILED, ids=[f"{s}-{f}" for s, f in TILED])
def test_the_gpu_limits_reach_past_the_first_block_in_every_class(spec, family):
    """The lead's GPU check, made on the CPU: the cases a GPU campaign draws, classified at the blocks the code
    uses on a Hopper GPU (our compiled configs, the release's tables for that device)."""
    table = draw_coverage(on_gpu(_info(spec)), family, limits="gpu", cases=DRAWN)
    rows = table.to_record()["rows"]
    assert rows and not table.unknown
    assert shortfalls(table, GPU_MINIMUM) == []
    if family == "csgmv" and "0.5.10" not in spec:
        assert any(r["split"] for r in rows), "no split-K reduction with two non-empty parts was drawn"


@pytest.mark.parametrize("spec,family", TILED, ids=[f"{s}-{f}" for s, f in TILED])
def test_the_cpu_limits_reach_every_class_too(spec, family):
    table = draw_coverage(_info(spec), family, limits="tiny", cases=400)
    assert table.to_record()["rows"]
    assert shortfalls(table, 1e-9) == []  # every class of every dimension met at least once


def test_a_target_without_blocks_says_why():
    table = draw_coverage(resolve_target("reference", "cpu").to_record(), "lora", limits="tiny", cases=10)
    assert table.to_record() == {"rows": [], "unknown": {"reference": {
        "lora": "the pure-torch reference computes whole tensors: it has no blocks"}}}


@pytest.mark.skipif(DEVICE != "cpu", reason="the CPU run of a campaign")
def test_a_campaign_record_counts_what_its_cases_reach_and_the_report_shows_it(tmp_path):
    from kernel_oracle.reports.model import Result
    from kernel_oracle.reports.render_md import render_markdown

    record = run_campaign(CampaignConfig(target="triton", op="vision", budget=25, seed=3, device="cpu",
                                         out_dir=tmp_path / "c", progress=False))
    assert not record["findings"]
    executed = sum(g["cases"] for g in record["groups"])
    assert {(r["dim"], r["cases"]) for r in record["coverage"]["rows"]} == {("queries", executed), ("keys", executed)}
    assert all(0 < r["tail"] <= r["several"] < r["cases"] for r in record["coverage"]["rows"])
    page = render_markdown(Result.from_dict(record))
    assert "## Tile coverage" in page and "| triton | vision | keys | 16 |" in page


def test_the_preset_governs_csgmv_sizes():
    """``--limits`` sets csgmv's sizes as it does the other families' (tiny stays under the interpreter's
    budget; full reaches serving widths)."""
    assert find(csgmv_problems(ops=("csgmv_shrink",), limits="full"), lambda p: p.K >= 4096,
                settings=settings(database=None, max_examples=500)).K >= 4096
    with pytest.raises(Exception):
        find(csgmv_problems(limits="tiny"), lambda p: p.K > 600 or p.R > 64,
             settings=settings(database=None, max_examples=300))


def _main_job_lora_clock() -> float:
    """The clock of the triton x lora campaign of the main job on the CPU with its default budget: the time left
    after the selfcheck and the report's reserve, shared by every target x family pair, its campaign share."""
    from kernel_oracle.fuzz.time_budget import default_time_s
    from kernel_oracle.harness.family import default_family_names
    from kernel_oracle.harness.schema import new_record
    from kernel_oracle.jobs.main_job import REPORT_RESERVE_S, SELFCHECK_SHARE
    from kernel_oracle.jobs.main_job_campaigns import CAMPAIGN_SHARE, discover_targets

    budget = default_time_s("run", "cpu")
    pairs = [(n, f) for n, _, fams in discover_targets(new_record("main"), "cpu", None, lambda *_: None)
             for f in fams if f in default_family_names()]
    assert ("triton", "lora") in pairs
    return CAMPAIGN_SHARE * (budget - REPORT_RESERVE_S - SELFCHECK_SHARE * budget) / len(pairs)


@pytest.mark.skipif(DEVICE != "cpu", reason="the CPU interpreter run of the main job's campaign")
def test_a_dropped_second_k_block_is_found_within_the_main_jobs_budget(tmp_path):
    """Our step A_v without its second kv_lora_rank block (mutant:lora_drops_second_k_block) computes right
    whenever kv_lora_rank fits one BLOCK_K (128): only cases past the first block show it."""
    clock = _main_job_lora_clock()
    record = run_campaign(CampaignConfig(target="mutant:lora_drops_second_k_block", op="lora", time_s=clock,
                                         seed=0, device="cpu", out_dir=tmp_path / "c", progress=False))
    found = [f for f in record["findings"] if f["op"] == "step_a_v" and f["kind"] == "mismatch"]
    assert found, f"not found in {record['campaign']['executed']} cases ({clock:.0f}s): {record['findings']}"
    assert found[0]["problem"]["problem"]["C"] > 128  # the smallest example still needs the second block
    table = CoverageTable.from_record(record["coverage"]).to_record()
    assert any(r["op"] == "step_a_v" and r["dim"] == "K=C" and r["several"] for r in table["rows"])


def test_a_campaigns_coverage_survives_its_state_and_a_corrupt_one_is_set_aside(tmp_path):
    """A resumed or salvaged campaign keeps the coverage of the cases it ran; an unreadable table in state.json
    makes the state unreadable like any bad field (Note [Validated state])."""
    import json

    from kernel_oracle.fuzz.state import CampaignState
    from kernel_oracle.harness.tile_coverage import TiledDim

    state = CampaignState.open(tmp_path, target="triton", op="lora")
    state.coverage.add("triton", [TiledDim("step_a_v", "K=C", 300, 128)])
    state.save()
    state.close()
    assert CampaignState.read(tmp_path).coverage.to_record() == state.coverage.to_record()
    assert CampaignState.read(tmp_path).to_record(device="cpu")["coverage"]["rows"][0]["several"] == 1
    raw = json.loads((tmp_path / "state.json").read_text())
    raw["coverage"] = {"rows": [{"target": "t", "op": "o", "dim": "d", "cases": 1, "several": 5}]}
    (tmp_path / "state.json").write_text(json.dumps(raw))
    reopened = CampaignState.open(tmp_path, target="triton", op="lora")
    reopened.close()
    assert (tmp_path / "state.json.corrupt").is_file() and reopened.coverage.to_record()["rows"] == []
