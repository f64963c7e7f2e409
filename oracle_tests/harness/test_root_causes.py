"""One root cause, one finding, across ops (Note [One root cause across ops] in harness/root_causes.py), and
the smallest example of a defect that needs stale CUDA-graph host ints (Note [Minimal examples])."""

from __future__ import annotations

import dataclasses

from kernel_oracle.harness.headline import headline, upstream_names
from kernel_oracle.harness.problem_lora import lora_feature_variants, lora_simplifications
from kernel_oracle.harness.problem_lora import LoRAProblem
from kernel_oracle.harness.root_causes import fold_findings

PR = {"id": "sglang-pr-28371", "title": "kv_b LoRA kernels skip segments at CUDA-graph replay",
      "upstream": "https://github.com/sgl-project/sglang/pull/28371"}


def _mismatch(n: int, op: str, depends_on=(), corpus=(), count=3, dtype="float32") -> dict:
    return {"id": f"F{n:04d}-mismatch-{op}", "target": "sglang==0.5.12", "op": op, "ops": [op], "kind": "mismatch",
            "dtype": dtype, "dtypes": [dtype], "count": count, "regions": ["everywhere"], "repro": "r",
            "shape_class": "decode", "problem": {"problem": {"op": op}},
            "examples": [{"op": op, "dtype": dtype, "shape_class": "prefill"}],
            "bucket": {"kind": "mismatch", "family": "lora", "cause": "values", "op": op, "where": "everywhere"},
            **({"depends_on": list(depends_on)} if depends_on else {}), **({"corpus": list(corpus)} if corpus else {})}


def test_a_defect_of_the_shared_routing_is_one_finding_listing_its_ops():
    """SGLang 0.5.12's stale host ints in its four split steps: four findings of the search, one of the record."""
    stale = [_mismatch(i + 1, op, ["stale host ints"], [PR], count=i + 2, dtype=d)
             for i, (op, d) in enumerate([("step_b_q", "float32"), ("step_a_q", "float16"), ("step_a_v", "float32"),
                                          ("step_b_v", "float16")])]
    alone = _mismatch(5, "step_a_q")  # wrong everywhere, no dependence: its op stays in its key
    (folded, other) = fold_findings([*stale, alone])
    assert folded["id"] == "F0001-mismatch-step_b_q" and other["id"] == "F0005-mismatch-step_a_q"
    assert folded["ops"] == ["step_b_q", "step_a_q", "step_a_v", "step_b_v"]
    assert folded["op_counts"] == {"step_b_q": 2, "step_a_q": 3, "step_a_v": 4, "step_b_v": 5}
    assert folded["count"] == 14 and folded["dtypes"] == ["float16", "float32"]
    assert folded["folded"] == ["F0002-mismatch-step_a_q", "F0003-mismatch-step_a_v", "F0004-mismatch-step_b_v"]
    assert [e["op"] for e in folded["examples"][:3]] == ["step_a_q", "step_a_v", "step_b_v"], "each op's own example"
    assert folded["bucket"]["op"] == "" and folded["bucket"]["depends"] == ["stale host ints"]
    assert other["bucket"]["op"] == "step_a_q" and "folded" not in other
    line = headline(folded)
    assert line.startswith("step_b_q, step_a_q, step_a_v, step_b_v: every row differs from the reference; it "
                           "depends on stale host ints"), line
    assert line.endswith("(float16, float32; 14 failing cases); known upstream: sglang PR #28371"), line


def test_findings_one_corpus_entry_names_are_one_even_with_other_dependences():
    a = _mismatch(1, "step_b_q", ["stale host ints"], [PR])
    b = _mismatch(2, "step_a_v", ["stale host ints", "slot"], [PR])
    c = _mismatch(3, "step_b_v", ["slot"])  # another dependence, no entry: another root cause
    rows = fold_findings([a, b, c])
    assert [r["id"] for r in rows] == ["F0001-mismatch-step_b_q", "F0003-mismatch-step_b_v"]
    assert rows[0]["ops"] == ["step_b_q", "step_a_v"] and rows[0]["corpus"] == [PR]


def test_the_headline_names_the_upstream_pull_request_issue_or_entry():
    assert upstream_names({"corpus": [PR], "known": "sglang-pr-28371", "upstream": PR["upstream"]}) == \
        ["sglang PR #28371"]
    assert upstream_names({"known": "flashinfer-x", "upstream": "https://github.com/flashinfer-ai/flashinfer/issues/4146"}) \
        == ["flashinfer issue #4146"]
    code = "https://github.com/sgl-project/sglang/blob/v0.5.23/python/sglang/kernels/ops/lora/dense/kv_b_lora_absorbed.py"
    assert upstream_names({"known": "sglang-empty-batch-max-len-none", "upstream": code}) == \
        ["sglang-empty-batch-max-len-none"]
    assert upstream_names({"op": "step_a_q"}) == []


# 0.5.12's skipped segments: two segments, host ints that count none of them at replay
_STALE = LoRAProblem("step_a_q", seg_lens=(16, 17), weight_indices=(0, 0), lora_ranks=(15, 1), scalings=(1.0, 1.0),
                     H=1, R=15, cuda_graph_pad_to=2, stale_host_ints=(0, 1, 19))


def test_a_smaller_batch_keeps_its_host_ints_stale():
    """A segment dropped or shortened keeps the host ints below the segments left, so a defect that needs them
    still shows (the smallest example had 3 segments of [14, 2, 17] rows while dropping one cleared them)."""
    variants = list(lora_simplifications(_STALE))
    one = next(v for v in variants if v.seg_lens == (16,))
    assert one.stale_host_ints == (0, 0, 19) and one.cuda_graph_pad_to == 2
    shorter = next(v for v in variants if v.seg_lens == (1, 17))
    assert shorter.stale_host_ints == (0, 1, 19)
    assert dataclasses.replace(_STALE, stale_host_ints=(0, 1, 17)) in variants, "the capture-time max_len shrinks"
    for v in filter(None, variants):  # every variant is still a valid problem (None: no change)
        v.materialize("cpu")


def test_stale_host_ints_are_a_feature_a_defect_depends_on():
    variants = lora_feature_variants(_STALE)
    assert variants["stale host ints"] == dataclasses.replace(_STALE, stale_host_ints=None)
    assert variants["cuda graph"] is None, "stale host ints need the graph: their own variant answers"
    plain = dataclasses.replace(_STALE, stale_host_ints=None)
    assert lora_feature_variants(plain)["cuda graph"] == dataclasses.replace(plain, cuda_graph_pad_to=None)
