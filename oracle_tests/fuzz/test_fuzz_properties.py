"""Hypothesis properties of every selected target (``--oracle-target``; default reference and triton).

One property per family x case category (fuzz/strategies.py, Note [Strategies]):

* ``valid``     -- the output matches the float64 oracle within the tolerance rule (baseline: the
  faithful oracle in the target's dtype and fp32 precision); unrouted in-place rows bit-identical;
* ``partial``   -- dropped / None optional metadata: the reference's outcome (a result or the exact
  upstream error);
* ``upstream``  -- SGLang's contracts: exact type and text;
* ``malformed`` -- strict validation rejects with the exact text.

A target named with ``--oracle-target`` is judged by the campaign ``kernel-oracle fuzz`` runs on it (Note
[One campaign underneath] in kernel_oracle/pytest/campaigns.py): each property fails on its new findings
of its category, so the two commands agree on every module, one wrong only on some draws included.  The
suite's own run draws its own examples.  A target without strict validation is judged as ``kernel-oracle
fuzz`` judges it (Note [Malformed consequences]): accepted malformed metadata that is ``harmless`` or drops rows is a validation gap,
not a failure (:func:`harness.malformed.in_gap_table`, the campaign's own rule); one that changes
rows the valid input defines, or crashes, fails.

Problem sizes follow the target's cost, as in a campaign (``fuzz.strategies.default_limits``):
``tiny`` limits for Triton under the CPU interpreter, ``small`` for the reference on the CPU, ``gpu``
on a GPU (small, tile-edge-heavy problems with one in seven realistic ones: ``full`` for every case
made this file alone take minutes there).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings

from kernel_oracle.harness.check import check_case
from kernel_oracle.harness.malformed import in_gap_table
from kernel_oracle.pytest.campaigns import campaign_findings, categories_of, failure_text
from kernel_oracle.pytest.plugin import examples_for
from kernel_oracle.fuzz.strategies import ALL_DTYPES, cases, default_limits

FAMILIES = ("lora", "vision")
CATEGORIES = ("valid", "partial", "upstream", "malformed")
HAS_CUDA = torch.cuda.is_available()
DEVICE = "cuda" if HAS_CUDA else "cpu"


def limits_for(target) -> str:
    return default_limits(DEVICE, target.name)


def repro_line(target, case) -> str:
    return f"kernel-oracle repro --case-json '{case.to_json()}' --targets {target.name} --device {DEVICE}"


@pytest.mark.parametrize("category", CATEGORIES)
@pytest.mark.parametrize("family", FAMILIES)
def test_property(fuzz_target, family, category, record_property, request, tmp_path_factory):
    target = fuzz_target
    ops = target.ops(family)
    if not ops:
        pytest.skip(f"target {target.name!r} has no {family} entry point: {target.notes}")
    if request.config.getoption("--oracle-target"):  # Note [One campaign underneath]: judged as fuzz judges it
        found = campaign_findings(request.config, request.getfixturevalue("oracle_target_name"), family,
                                  DEVICE, tmp_path_factory.mktemp(f"fuzz-{family}"))
        mine = [f for f in found if category in categories_of(f)]
        assert not mine, failure_text(target.name, family, mine)
        return
    dtypes = target.dtypes(ALL_DTYPES)
    record_property("op", family)
    record_property("shape_class", category)
    strategy = cases(family, categories=(category,), dtypes=dtypes, ops=ops if family == "lora" else None,
                     limits=limits_for(target))
    ratios = []

    @settings(max_examples=examples_for(target.name))
    @given(strategy)
    def prop(case):
        verdict = check_case(target, case, DEVICE, repro=repro_line(target, case))
        if verdict.ratio is not None:
            ratios.append(verdict.ratio)
        assert verdict.ok or in_gap_table(verdict, target.strict), (f"[{verdict.kind}] {target.name} {case.op} {case.dtype}: {verdict.message}\n"
                            f"case: {case!r}\nreproduce: {repro_line(target, case)}")

    prop()
    if ratios:
        record_property("error_ratio", max(ratios))
