"""The campaign's own stream (Note [The campaign's own stream] in ``fuzz/stream.py``): what a time-boxed
campaign runs is what :class:`CampaignStream` predicts, case for case; a precompile child takes its runs of
it round robin before its share of the variant list."""

from __future__ import annotations

import argparse

import pytest

from kernel_oracle.fuzz import campaign as campaign_module
from kernel_oracle.fuzz.campaign import CampaignConfig, CampaignInterrupted, run_campaign
from kernel_oracle.fuzz.stream import TIME_CHUNK_EXAMPLES, CampaignStream, campaign_strategy, predicted_run
from kernel_oracle.fuzz.targets import resolve_target

from oracle_tests.conftest import DEVICE


def _unique(jsons: list) -> list:
    seen: set = set()
    return [j for j in jsons if not (j in seen or seen.add(j))]


@pytest.mark.parametrize("seed", [3, 11])
def test_a_campaign_runs_the_stream_predicted_for_it(tmp_path, monkeypatch, seed):
    """A real time-boxed campaign (the reference target, LoRA, malformed metadata drawn) executes exactly the
    predicted cases, in order, past several of its Hypothesis runs.  The campaign is stopped by case count
    (a stop requested before its next case), not by its clock, so a loaded machine runs the same cases."""
    executed, enough = [], 3 * TIME_CHUNK_EXAMPLES
    original = campaign_module._Search._execute

    def recorded(self, case):
        if len(executed) == enough:
            self.stop.signame = "SIGTERM"  # the campaign stops here, as on a signal, with its record saved
        else:
            executed.append(case.to_json())
        return original(self, case)

    monkeypatch.setattr(campaign_module._Search, "_execute", recorded)
    # in this process, on the session's device (a GPU session compiles Triton: a CPU campaign here is refused)
    with pytest.raises(CampaignInterrupted) as stopped:
        run_campaign(CampaignConfig(target="reference", op="lora", out_dir=tmp_path / "c", time_s=3600.0,
                                    seed=seed, progress=False, isolate=False, device=DEVICE))
    rec = stopped.value.record
    assert not rec["findings"] and len(executed) == enough, (len(executed), rec["findings"][:1])
    stream = CampaignStream(seed, rec["campaign"]["limits"], upstream_contracts_only=False)
    info, predicted, run = resolve_target("reference", DEVICE).to_record(), [], 0
    while len(_unique(predicted)) < len(executed) and run < 10 * len(executed):  # a run's repeats run once
        run += 1
        predicted += [case.to_json() for case in stream.cases(info, "lora", (run,))]
    assert run > 2 and executed == _unique(predicted)[:len(executed)]


def test_the_strategy_follows_the_target_and_the_contracts_switch():
    """Ops the target lacks and dtypes it excludes are not drawn; no strategy when nothing is left."""
    info = {"entry_points": ["step_a_q", "vision"], "excluded_dtypes": {"float32": "no"},
            "excluded_dtypes_by_family": {"lora": {"float16": "no"}}}
    ops, dtypes, strategy = campaign_strategy(info, "lora", "lora", "tiny", upstream_contracts_only=True)
    assert ops == ("step_a_q",) and dtypes == ("bfloat16",) and strategy is not None
    drawn = predicted_run(strategy, 5, 1)
    assert drawn and {c.op for c in drawn} == {"step_a_q"} and {c.dtype for c in drawn} == {"bfloat16"}
    assert all(c.mutation is None or c.mutation.category != "malformed" for c in drawn)
    assert campaign_strategy(info, "lora", "lora", "tiny", upstream_contracts_only=False,
                             wanted_dtypes=("float32",))[2] is None


def test_a_child_compiles_its_runs_of_the_stream_then_its_share_of_the_variants():
    from kernel_oracle.fuzz.precompile import _child_cases
    from kernel_oracle.harness.warmup import variant_cases

    target = resolve_target("triton", "cpu")
    args = argparse.Namespace(stream_seed=7, stream_limits="tiny", stream_runs=5, upstream_only=False,
                              ops="step_a_q", dtypes="float16")
    got = [c.to_json() for c in _child_cases(args, target, 1, 3)]
    stream = CampaignStream(7, "tiny", False, 5)
    runs = [c.to_json() for c in stream.cases(target.to_record(), "lora", (2, 5))]
    variants = [c.to_json() for c in variant_cases(("step_a_q",), ("float16",))[1::3]]
    assert len(runs) == 2 * TIME_CHUNK_EXAMPLES and got == runs + variants
    args.stream_seed = None
    assert [c.to_json() for c in _child_cases(args, target, 1, 3)] == variants


def test_children_run_the_stream_and_exit():
    """:func:`precompile.start_variants` with a stream: the two children run (compile-only) the campaign's
    first two runs, one each, then their shares of the variant cases, and exit by themselves."""
    from kernel_oracle.fuzz import precompile
    from kernel_oracle.harness.warmup import variant_cases

    handle = precompile.start_variants("triton", "cpu", seconds=120.0, dtypes=("float16",), ops=("step_a_v",),
                                       processes=2, stream=CampaignStream(3, "tiny", False, runs=2))
    assert handle.wait(110.0), "the children did not finish"
    done = handle.stop()
    assert done["cases"] == 2 * TIME_CHUNK_EXAMPLES + len(variant_cases(("step_a_v",), ("float16",))), done
