"""The csgmv part of ``kernel-oracle selfcheck`` (kernel_oracle/jobs/selfcheck_csgmv.py): the oracle against the
per-token independent formulation (reference/independent_csgmv.py), and the contract rows; each check can fail.

The samples are the OpInfo's hand-picked batches (harness/opinfo_csgmv.py: S <= 12 rows, K <= 32, 1-3 slices)
and random ones of the same size.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from kernel_oracle.harness import opinfo
from kernel_oracle.jobs import selfcheck, selfcheck_csgmv
from kernel_oracle.reference import independent_csgmv as ind

KEYS = {"op", "family", "dtype", "case", "passed", "err", "allowed", "ratio", "message"}


def _rows(cases: int = 0, seed: int = 0) -> list[dict]:
    return list(selfcheck_csgmv.csgmv_rows("cpu", cases, seed))


def test_rows_pass_in_every_dtype_and_are_part_of_the_selfcheck():
    rows = _rows(cases=1, seed=3)
    assert rows and all(set(r) == KEYS and r["family"] == "csgmv" for r in rows)
    assert not [r for r in rows if not r["passed"]], selfcheck.summarize(rows)
    assert {r["dtype"] for r in rows} == {"float16", "bfloat16", "float32", "float64", "-"}
    assert {r["op"] for r in rows} == {"csgmv_shrink", "csgmv_expand"}
    assert any(r["case"].startswith("random-") for r in rows)
    errors = [r for r in rows if r["dtype"] == "-"]
    want = [f"error:{e.contract_id}#{i}" for op in ("csgmv_shrink", "csgmv_expand")
            for i, e in enumerate(opinfo.OP_DB[op].error_inputs("cpu"))]
    assert [r["case"] for r in errors] == want
    whole = [r for r in selfcheck.run_selfcheck("cpu", cases=0) if r["family"] == "csgmv"]
    assert [r["case"] for r in whole] == [r["case"] for r in _rows()]


def test_an_independent_value_off_by_a_little_fails(monkeypatch):
    """Planted defect: the independent value 1e-3 off (relative); the float64 rows fail with ratio > 1."""
    real = ind.csgmv_independent

    def off(op, args, kwargs=None):
        value, defined = real(op, args, kwargs)
        return value * (1 + 1e-3), defined

    monkeypatch.setattr(ind, "csgmv_independent", off)
    rows = [r for r in _rows() if r["dtype"] == "float64"]
    assert any(not r["passed"] and r["ratio"] > 1 for r in rows)
    assert any("defined entries differ" in r["message"] for r in rows)


def test_a_different_defined_region_fails(monkeypatch):
    """Planted defect: the independent formulation leaves every entry undefined; the masks then differ."""
    real = ind.csgmv_independent

    def nothing_defined(op, args, kwargs=None):
        value, defined = real(op, args, kwargs)
        return value, torch.zeros_like(defined)

    monkeypatch.setattr(ind, "csgmv_independent", nothing_defined)
    bad = [r for r in _rows() if r["dtype"] == "float64" and not r["passed"]]
    assert bad and all(r["message"].startswith("defined region differs from the independent formulation: ")
                       for r in bad)


def test_a_dropped_row_in_the_entry_point_fails(monkeypatch):
    """Planted defect: the drop-in shrink leaves its last row NaN; the sample-dtype rows fail."""
    from kernel_oracle.reference import csgmv as ref

    real = ref.chunked_sgmv_lora_shrink_forward

    def dropped(*args, **kwargs):
        out = real(*args, **kwargs)
        out[-1] = float("nan")
        return out

    monkeypatch.setattr(ref, "chunked_sgmv_lora_shrink_forward", dropped)
    rows = [r for r in _rows() if r["op"] == "csgmv_shrink" and r["dtype"] == "float32"]
    assert any(not r["passed"] and "rows differing" in r["message"] for r in rows)


def test_an_error_row_with_the_wrong_text_fails(monkeypatch):
    info = opinfo.OP_DB["csgmv_expand"]
    errs = list(info.error_inputs("cpu"))
    rank = next(e for e in errs if e.contract_id == "csgmv.strict.negative_rank")
    wrong = dataclasses.replace(rank, fields={**rank.fields, "value": -7})
    only = dataclasses.replace(info, sample_inputs=lambda device, dtype: iter(()),
                               error_inputs=lambda device: iter([rank, wrong]))
    monkeypatch.setattr(opinfo, "OP_DB", {"csgmv_expand": only})
    rows = _rows()
    assert [r["passed"] for r in rows] == [True, False]
    assert rows[1]["message"] == (
        "expected ValueError('csgmv batch_info.lora_ranks[0]=-7 is negative; ranks are 0 (slot off) or more'), got "
        "ValueError('csgmv batch_info.lora_ranks[0]=-1 is negative; ranks are 0 (slot off) or more')")


def test_random_samples_are_reproducible():
    info = opinfo.OP_DB["csgmv_expand"]
    a = [s.problem for s in selfcheck_csgmv.random_csgmv_samples(info, torch.float16, 3, seed=5)]
    b = [s.problem for s in selfcheck_csgmv.random_csgmv_samples(info, torch.float16, 3, seed=5)]
    assert a == b and len(a) == 3


def test_the_independent_formulation_names_the_valid_ops():
    with pytest.raises(ValueError) as info:
        ind.csgmv_independent("step_a_q", ())
    assert str(info.value) == "op='step_a_q' is unknown; the only valid values are csgmv_shrink, csgmv_expand"
