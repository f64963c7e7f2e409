"""Note [Needed features]: a failure's bucket names the features of SGLang's vision call it needs, so two
defects of two features (GQA, the window) are two findings, not one."""

from __future__ import annotations

import dataclasses
import textwrap

import pytest

from kernel_oracle.fuzz.campaign import run_campaign
from kernel_oracle.fuzz.campaign_config import CampaignConfig
from kernel_oracle.harness.buckets import Bucket
from kernel_oracle.harness.check import Case
from kernel_oracle.harness.features import features_of, needed_features, without_feature
from kernel_oracle.harness.headline import headline
from kernel_oracle.harness.problem_vision import VisionProblem

ALL = VisionProblem(lengths=(3, 5), H=4, H_kv=2, window=(2, 1), sinks="normal", softmax_scale=0.3, gaps=(1, 0))
VALUES = Bucket("mismatch", "vision", "values", "", "vision")


class _Verdict:
    def __init__(self, ok: bool):
        self.ok = ok


def _runner(fails):
    """A stand-in for the campaign's run (memoised, as the campaign's is): ``fails(problem)`` says whether
    the case fails (in VALUES)."""
    ran, memo = [], {}

    def run(case):
        key = case.to_json()
        if key not in memo:
            ran.append(case.problem)
            memo[key] = (_Verdict(True), None) if not fails(case.problem) else (
                _Verdict(False), dataclasses.replace(VALUES, needs=needed_features(case, VALUES, run)))
        return memo[key]
    return run, ran


def test_features_of_and_without_each():
    assert features_of(ALL) == ("gqa", "window", "sinks", "softmax_scale", "gaps")
    assert features_of(VisionProblem(lengths=(3,), H=4, H_kv=4, window=(-1, -1))) == ()  # H_kv = H: no GQA
    assert without_feature(ALL, "gqa").H_kv is None and without_feature(ALL, "gaps").gaps == ()
    assert without_feature(ALL, "window").window is None and without_feature(ALL, "sinks").sinks is None
    assert without_feature(VisionProblem(lengths=(3,)), "gqa") is None
    with pytest.raises(ValueError, match="unknown feature 'pdl'"):
        without_feature(ALL, "pdl")


@pytest.mark.parametrize("fails, needs", [
    (lambda p: p.H_kv is not None, ("gqa",)),  # a GQA defect, whatever else the case has
    (lambda p: p.window is not None, ("window",)),
    (lambda p: p.H_kv is not None and p.sinks is not None, ("gqa", "sinks")),  # needs both
    (lambda p: True, ()),  # a defect of every call
])
def test_needed_features_keeps_exactly_what_the_failure_needs(fails, needs):
    run, ran = _runner(fails)
    assert needed_features(Case(ALL), VALUES, run) == needs
    assert len(ran) <= 16  # distinct cases run: within the 2**4 subsets of the four features past the first


def test_a_failure_of_another_kind_still_fails():
    """GQA offsets read wrong keys with gaps (values) and past k's end without them (a raise): the gaps
    are not needed, whatever the symptom."""
    oob = Bucket("contract", "vision", "IndexError: sequence # of k_cache spans elements", "engine:_window")

    def run(case):
        p = case.problem
        if p.H_kv is None:
            return _Verdict(True), None
        got = VALUES if p.gaps else oob
        return _Verdict(False), dataclasses.replace(got, needs=needed_features(case, got, run))
    assert needed_features(Case(ALL), VALUES, run) == ("gqa",)


def test_another_defect_behind_a_feature_does_not_take_the_attribution():
    """GQA's read past k's end, in a case with sinks that are also ignored: without GQA the case still fails
    (the sinks' wrong values), but that failure needs the sinks, so the read stays GQA's."""
    oob = Bucket("contract", "vision", "IndexError: sequence # of k_cache spans elements", "engine:_window")

    def run(case):
        p = case.problem
        if p.H_kv is None and p.sinks is None:
            return _Verdict(True), None
        got = oob if p.H_kv is not None else VALUES
        return _Verdict(False), dataclasses.replace(got, needs=needed_features(case, got, run))
    assert needed_features(Case(ALL), oob, run) == ("gqa",)


def test_a_stateful_cause_is_not_attributed():
    hazard = Bucket("contract", "vision", "GraphCacheHazard: would replay the cuDNN graph", "m:f")
    run, ran = _runner(lambda p: False)
    assert needed_features(Case(ALL), hazard, run) == () and ran == []


def test_needs_is_part_of_the_key_label_record_and_headline():
    gqa, window = (dataclasses.replace(VALUES, needs=(n,)) for n in ("gqa", "window"))
    assert gqa != window and gqa != VALUES
    assert gqa.label == "mismatch | vision | vision | values | needs gqa"
    assert Bucket.from_dict(gqa.to_dict()) == gqa
    f = {"op": "vision", "kind": "mismatch", "dtypes": ["bfloat16"], "count": 3, "regions": ["everywhere"],
         "bucket": gqa.to_dict()}
    assert headline(f) == ("vision: every row differs from the reference with k/v of fewer heads than q (GQA/MQA) "
                           "(bfloat16; 3 failing cases)")


PLANTED = '''
import torch
from kernel_oracle.reference.vision import flashinfer_cudnn_attention as _reference


def _roll_heads(x):
    """x with its heads rolled by one, in a tensor of x's strides (its element offsets stay right)."""
    y = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
    return y.copy_(x.roll(1, dims=-2))


def flashinfer_cudnn_attention(q, k, v, cu_seqlens, bsz, seq_len, softmax_scale=None, forward_metadata=None,
                               **kwargs):
    kwargs.pop("window_size", None)  # defect 1: the window is ignored
    heads, kv_heads = q.shape[-2], k.shape[-2]
    if 1 < kv_heads < heads:  # defect 2: GQA reads the key/value heads rolled by one
        k, v = _roll_heads(k), _roll_heads(v)
    return _reference(q, k, v, cu_seqlens, bsz, seq_len, softmax_scale, forward_metadata, **kwargs)
'''


def test_two_defects_of_two_features_are_two_findings(tmp_path, monkeypatch):
    """The planted wrapper ignores the window and maps GQA heads wrongly: one finding each, named by what it
    needs (before needs joined the key, both were the one bucket ``mismatch | vision | vision | values``)."""
    (tmp_path / "planted_wrapper.py").write_text(textwrap.dedent(PLANTED))
    monkeypatch.syspath_prepend(str(tmp_path))
    rec = run_campaign(CampaignConfig(target="planted_wrapper", op="vision", budget=400, seed=3, device="cpu",
                                      dtypes=("float16",), out_dir=tmp_path / "out", progress=False))
    mismatches = [f for f in rec["findings"] if f["kind"] == "mismatch"]
    needs = sorted(tuple(f["bucket"]["needs"]) for f in mismatches)
    assert needs == [("gqa",), ("window",)], [f["bucket"] for f in rec["findings"]]


def test_a_crash_its_reruns_do_not_repeat_stays_with_the_feature_that_fails_alone():
    """A read past k's end crashes only where it lands outside every allocation: a case with GQA and an
    ignored window crashed, and its reruns (a fresh worker) give GQA's wrong values instead.  Without GQA
    the case still fails, on the window alone; but GQA alone fails too, so the crash is not the window's."""
    crash = Bucket("crash", "vision", "the target left the CUDA context broken", "")
    both = VisionProblem(lengths=(3, 5), H=4, H_kv=2, window=(2, 1))

    def run(case):
        p = case.problem
        if p.H_kv is None and p.window is None:
            return _Verdict(True), None
        return _Verdict(False), dataclasses.replace(VALUES, needs=needed_features(case, VALUES, run))
    assert needed_features(Case(both), crash, run) == ("gqa", "window")
