"""csgmv as a fuzz family (``--op csgmv``): the problem strategy reaches every shape it promises and only
valid ones, declined features are never drawn, the ``reference`` target passes, the ``sglang-csgmv==X``
target of each release declines its known differences, and campaigns catch planted defects in the real
0.5.23 kernels (a row dropped from the shrink, the expand's scaling doubled) and report nothing on the
kernels as they are.

float32 and float16 only under the interpreter (bf16 runs on raw bit patterns there: docs/csgmv.md)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, find, given, settings
from hypothesis.errors import InvalidArgument

from kernel_oracle.fuzz.campaign import run_campaign
from kernel_oracle.fuzz.campaign_config import CampaignConfig
from kernel_oracle.fuzz.strategies import cases
from kernel_oracle.fuzz.strategies_csgmv import CSGMV_FEATURES, csgmv_problems
from kernel_oracle.fuzz.targets import register_target, resolve_target
from kernel_oracle.harness.check import Case, check_case
from kernel_oracle.harness.targets import Target
from kernel_oracle.reference import csgmv as ref_csgmv

from oracle_tests._sglang_releases import wheel_or_skip
from oracle_tests.conftest import DEVICE

pytestmark = pytest.mark.skipif(DEVICE != "cpu", reason="the CPU interpreter run")
FAST = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)


def _routed_rank0(p) -> bool:
    return any(n and p.lora_ranks[s] == 0 for n, s in zip(p.seg_lens, p.weight_indices))


SHAPES = {
    "rank-0 slot routed": _routed_rank0,
    "rank above R": lambda p: any(n and p.lora_ranks[s] > p.R for n, s in zip(p.seg_lens, p.weight_indices)),
    "zero-length segment": lambda p: 0 in p.seg_lens and sum(p.seg_lens) > 0,
    "unrouted rows": lambda p: p.unrouted_rows > 0,
    "three ragged slices": lambda p: p.num_slices == 3 and len({b - a for a, b in zip(p.slice_offsets,
                                                                                        p.slice_offsets[1:])}) > 1,
    "a full chunk": lambda p: p.max_len in p.seg_lens,
    "permuted rows": lambda p: list(p.permutation) != sorted(p.permutation),
    "chunk 128": lambda p: p.max_len == 128,
    "stale host ints": lambda p: p.stale_host_ints is not None and p.stale_host_ints[1] < len(p.seg_lens),
    "a view base_output": lambda p: p.base == "view",
    "fresh zeros": lambda p: p.base == "none",
    "split_k": lambda p: p.split_k is not None and p.split_k > 1,
    "cpu offsets": lambda p: p.cpu_offsets,
    "float16": lambda p: p.dtype == "float16",
}


@pytest.mark.parametrize("shape", SHAPES)
def test_the_strategy_reaches_every_shape(shape):
    find(csgmv_problems(), SHAPES[shape], settings=settings(max_examples=2000, database=None))


@FAST
@given(csgmv_problems())
def test_every_drawn_problem_is_valid_and_the_reference_passes_it(problem):
    verdict = check_case(resolve_target("reference"), Case(problem))
    assert verdict.ok, verdict.message


@FAST
@given(csgmv_problems(declines=tuple(CSGMV_FEATURES)))
def test_declined_features_are_never_drawn(problem):
    assert problem.stale_host_ints is None and problem.base != "view"
    assert problem.split_k is None and not problem.cpu_offsets


def test_the_strategy_refuses_what_it_does_not_know():
    with pytest.raises(InvalidArgument, match="declines from"):
        csgmv_problems(declines=("gqa",))
    with pytest.raises(InvalidArgument, match="ops from"):
        cases("csgmv", ops=("vision",))


@pytest.mark.parametrize("version, declined", [
    ("0.5.10", {"csgmv.split_k", "csgmv.slice_offsets_cpu", "csgmv.stale_host_ints", "csgmv.output_view"}),
    ("0.5.13", {"csgmv.split_k", "csgmv.slice_offsets_cpu", "csgmv.stale_host_ints"}),
    ("0.5.14", {"csgmv.split_k", "csgmv.slice_offsets_cpu"}),
    ("0.5.23", set()),
])
def test_each_release_declines_its_known_differences(version, declined):
    """Each release declines its known differences and, every one, the unchecked bounds (heap corruption)."""
    declined = declined | {"csgmv.unchecked_bounds"}
    wheel_or_skip(version)
    target = resolve_target(f"sglang-csgmv=={version}", "cpu")
    assert target.available, target.reason
    assert sorted(target.entries) == ["csgmv_expand", "csgmv_shrink"] and not target.strict
    assert set(target.declines) == declined and target.release == version
    assert "bfloat16" in target.excluded_dtypes


def test_an_unknown_release_or_switch_is_said_in_one_line():
    with pytest.raises(ValueError, match=r"configuration key 'pdl' is unknown; the only valid keys are "
                                         r"\['deterministic', 'split_k'\]"):
        resolve_target("sglang-csgmv==0.5.23@pdl=on", "cpu")


# ---- planted defects in the real kernels --------------------------------------------------------------------

def _planted(spec, device, sources) -> Target:
    """sglang-csgmv==0.5.23 with a planted defect (``@defect=...``): the shrink leaves its first routed row
    at zero, or the expand adds its delta twice (the scaling doubled); ``none``: the kernels as they are;
    ``undeclined``: 0.5.12 as it is, without declining its known stale-host-ints difference."""
    defect = spec.option("defect")
    real = resolve_target("sglang-csgmv==0.5.12" if defect == "undeclined" else "sglang-csgmv==0.5.23", device)
    shrink, expand = real.entries["csgmv_shrink"], real.entries["csgmv_expand"]

    def dropped_row(x, weights, batch_info, num_slices, split_k=None):
        out = shrink(x, weights, batch_info, num_slices, split_k)
        if batch_info.permutation.numel():
            out[int(batch_info.permutation[0])] = 0.0
        return out

    def doubled(x, weights, batch_info, slice_offsets, max_slice_size, base_output=None, slice_offsets_cpu=None):
        before = torch.zeros_like(x[:, :1]) if base_output is None else base_output.clone()
        out = expand(x, weights, batch_info, slice_offsets, max_slice_size, base_output, slice_offsets_cpu)
        return out.add_(out - before)

    entries = {"csgmv_shrink": dropped_row if defect == "row" else shrink,
               "csgmv_expand": doubled if defect == "scaling" else expand}
    declines = {k: v for k, v in real.declines.items() if not (defect == "undeclined" and k.endswith("host_ints"))}
    return Target(str(spec), entries, precision="ieee", strict=False, excluded_dtypes=dict(real.excluded_dtypes),
                  declines=declines, release=real.release)


@pytest.fixture
def planted(monkeypatch):
    """The ``csgmv-planted`` target kind, registered for one test only."""
    from kernel_oracle.fuzz.targets import registry

    wheel_or_skip("0.5.23")
    wheel_or_skip("0.5.12")
    monkeypatch.setattr(registry, "_FACTORIES", dict(registry._FACTORIES))
    monkeypatch.setattr(registry, "_CONFIGURATION", dict(registry._CONFIGURATION))
    register_target("csgmv-planted", _planted, configuration={"defect": ("row", "scaling", "none", "undeclined")})


@pytest.mark.parametrize("defect, op", [("row", "csgmv_shrink"), ("scaling", "csgmv_expand"), ("none", None)])
def test_a_campaign_catches_a_planted_defect_and_nothing_else(planted, defect, op, tmp_path):
    rec = run_campaign(CampaignConfig(target=f"csgmv-planted@defect={defect}", op="csgmv", budget=40, seed=2,
                                      device="cpu", out_dir=tmp_path, progress=False, isolate=False))
    found = {(f["kind"], f["op"]) for f in rec["findings"]}
    assert found == ({("mismatch", op)} if op else set()), [f["message"] for f in rec["findings"]]


def test_an_old_release_shows_its_known_difference_where_not_declined(planted, tmp_path):
    """The strategy reaches the stale-host-ints replay: 0.5.12 fails there unless its target declines it."""
    # one long Hypothesis run, whose choices follow the constants of the modules this process has imported: a
    # budget that reaches the replay whatever ran before
    rec = run_campaign(CampaignConfig(target="csgmv-planted@defect=undeclined", op="csgmv", budget=250, seed=2,
                                      device="cpu", out_dir=tmp_path, progress=False, isolate=False))
    assert rec["findings"] and {f["kind"] for f in rec["findings"]} == {"mismatch"}
    assert all(f["problem"]["problem"]["stale_host_ints"] for f in rec["findings"])
