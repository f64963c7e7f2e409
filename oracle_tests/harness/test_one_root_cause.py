"""One root cause is one bucket: across dtypes, regions, flags, message lengths and releases."""

from __future__ import annotations

from kernel_oracle.harness.buckets import Bucket, bucket_of, bucket_of_record, normalise_message
from kernel_oracle.harness.headline import headline
from kernel_oracle.jobs.matrix import build_matrix


def _old_record(spec_dtype: str, region: str, flags=(), op="step_b_q") -> dict:
    # a finding line of the older schema: one dtype, the region as the mismatch's cause, flags in config
    return {"id": f"F0001-mismatch-{op}-{spec_dtype}", "target": "t", "op": op, "dtype": spec_dtype,
            "kind": "mismatch", "message": "Tensor-likes are not close!", "repro": "r",
            "bucket": {"kind": "mismatch", "family": "lora", "cause": region, "frame": "",
                       "config": [spec_dtype, *flags]}}


def test_dtype_region_and_flags_do_not_split_a_mismatch():
    keys = {bucket_of_record(_old_record(d, r, fl)) for d in ("float16", "bfloat16", "float32")
            for r in ("tail tile", "segment boundary", "everywhere", "stale graph metadata")
            for fl in ((), ("cuda_graph",), ("permuted",))}
    assert len(keys) == 1, keys


def test_two_ops_are_two_mismatch_buckets():
    assert bucket_of_record(_old_record("float16", "everywhere")) != bucket_of_record(
        _old_record("float16", "everywhere", op="step_a_v"))


def test_a_message_cut_at_another_length_is_one_key():
    full = ("cudnn graph cache: a cached plan for shape (3, 128, 16, 64) was reused for shape (5, 256, 16, 64) "
            "after the workspace of 4096 bytes moved")
    keys = {normalise_message(full[:n]) for n in (90, 120, 160, len(full))}
    keys |= {normalise_message(full.replace("3, 128", "7, 64")[:n] + "...") for n in (100, 140)}
    assert len(keys) == 1, keys
    crash = [Bucket.from_dict({"kind": "crash", "family": "vision", "cause": "RuntimeError: " + full[:n]})
             for n in (95, 130)]
    assert crash[0] == crash[1]
    assert normalise_message("seg_lens[3] is negative") != normalise_message("weight_indices[3] is negative")


def test_matrix_has_one_row_per_root_cause_across_releases():
    runs = [{"spec": f"sglang=={v}", "available": True, "cases": 50, "tested": f"sglang=={v}",
             "findings": [_old_record(d, r, fl) for d, r, fl in findings]}
            for v, findings in (("0.5.12", [("float16", "everywhere", ("cuda_graph",)),
                                            ("bfloat16", "stale graph metadata", ("cuda_graph",)),
                                            ("float32", "tail tile", ())]),
                                ("0.5.13", [("float16", "stale graph metadata", ()), ("float32", "head", ())]),
                                ("0.5.14", []))]
    m = build_matrix(runs, [])
    assert len(m["rows"]) == 1, [r["bucket"] for r in m["rows"]]
    row = m["rows"][0]
    assert row["introduced_in"] == "sglang==0.5.12" and row["fixed_in"] == "sglang==0.5.14"
    assert set(row["dtypes"]) == {"float16", "bfloat16", "float32"}


def test_headline_says_op_rows_dtypes_and_count():
    f = {"op": "step_b_q", "kind": "mismatch", "dtypes": ["float32", "float16", "bfloat16"], "count": 37,
         "regions": ["segment boundary"], "bucket": {"cause": "values"}, "message": "Tensor-likes are not close!"}
    assert headline(f) == ("step_b_q: the first or last row of each segment differs from the reference "
                           "(float16, bfloat16, float32; 37 failing cases)")
    old = {"op": "step_a_v", "kind": "mismatch", "dtype": "float16", "message": "Tensor-likes are not close!",
           "bucket": {"cause": "slot", "config": ["float16"]}}
    assert headline({**old, "bucket": Bucket.from_dict({"kind": "mismatch", **old["bucket"]}).to_dict()}) == (
        "step_a_v: the rows of some slots only differ from the reference (float16; 1 failing case)")


def _values_record(op: str, dtype: str = "float32") -> dict:
    return {"id": "F1", "op": op, "kind": "mismatch", "dtype": dtype, "message": "Tensor-likes are not close!",
            "count": 2, "bucket": {"kind": "mismatch", "family": "lora", "op": op, "cause": "values", "frame": ""}}


def test_ops_failing_in_exactly_the_same_releases_are_one_matrix_row():
    """PR #28371 in every kv_b op from 0.5.12 to 0.5.13 (absent in 0.5.14): one row naming the four ops;
    a fifth op failing in every release that ran stays its own row, and so does one with another history."""
    stale = ["step_a_q", "step_b_q", "step_a_v", "step_b_v"]
    per_release = {"0.5.12": stale + ["q_side_fused", "v_side_fused"], "0.5.13": stale + ["q_side_fused"],
                   "0.5.14": ["q_side_fused"]}
    runs = [{"spec": f"sglang=={v}", "available": True, "cases": 50, "tested": f"sglang=={v}",
             "findings": [_values_record(op) for op in ops]} for v, ops in per_release.items()]
    rows = {r["bucket"]: r for r in build_matrix(runs, [])["rows"]}
    assert set(rows) == {"mismatch | lora | step_a_q, step_a_v, step_b_q, step_b_v | values",
                         "mismatch | lora | q_side_fused | values", "mismatch | lora | v_side_fused | values"}, set(rows)
    merged = rows["mismatch | lora | step_a_q, step_a_v, step_b_q, step_b_v | values"]
    assert (merged["introduced_in"], merged["fixed_in"]) == ("sglang==0.5.12", "sglang==0.5.14")
    assert merged["counts"] == {"sglang==0.5.12": 8, "sglang==0.5.13": 8, "sglang==0.5.14": 0}
    assert rows["mismatch | lora | v_side_fused | values"]["fixed_in"] == "sglang==0.5.13"


def test_a_matrix_report_lists_what_failed_once_per_row():
    """The report of a release matrix leads with one line per row (one root cause), not one per finding of
    each column: PR #28371 in four ops of two releases is eight findings and one line, which says where it
    was introduced and fixed; a finding of no row keeps a line of its own."""
    from kernel_oracle.harness.schema import new_record
    from kernel_oracle.jobs.matrix import tag_rows
    from kernel_oracle.reports.model import Result
    from kernel_oracle.reports.render_md import render_markdown

    stale = ["step_a_q", "step_b_q", "step_a_v", "step_b_v"]
    record = new_record("main", seeds={"seed": 0}, device="cpu")
    runs = []
    for v, ops in {"0.5.12": stale, "0.5.13": stale, "0.5.14": []}.items():
        found = [{**_values_record(op), "id": f"F{v}-{op}", "target": f"sglang=={v}", "repro": "r",
                  "headline": f"{op}: values differ"} for op in ops]
        record["findings"].extend(found)
        runs.append({"spec": f"sglang=={v}", "available": True, "cases": 50, "tested": f"sglang=={v}",
                     "findings": found})
    record["findings"].append({**_values_record("step_a_q"), "id": "F-other", "target": "mine", "repro": "r",
                               "bucket": {"kind": "contract", "family": "lora", "cause": "x", "frame": ""}})
    record["release_matrix"] = build_matrix(runs, [])
    tag_rows(record)
    (line,) = Result.from_dict(record).headlines[:1]
    assert line.findings == 8 and line.where == "introduced in 0.5.12, fixed in 0.5.14"
    md = render_markdown(Result.from_dict(record))
    what = md[md.index("## What failed"):md.index("## By target and op")]
    items = [ln for ln in what.splitlines() if ln[:1].isdigit()]
    assert len(items) == 2, what
    assert items[0].endswith("(introduced in 0.5.12, fixed in 0.5.14; 8 findings)") and "F-other" in items[1]


def test_ops_in_the_same_columns_whose_examples_need_other_flags_are_two_rows():
    """0.5.13's cuBLAS paths (every slot, no flag needed) and the stale host ints of a CUDA-graph batch
    (their examples need ``cuda_graph``), met by sampling in exactly the same columns: two root causes,
    two rows; two ops of the same flags still fold into one."""
    def found(op, flags):
        f = _values_record(op)
        return {**f, "bucket": {**f["bucket"], "flags": flags}}

    per_release = {"0.5.13": [found("step_a_q", []), found("step_a_v", []), found("step_b_v", ["cuda_graph"])],
                   "0.5.14": []}
    runs = [{"spec": f"sglang-trt=={v}", "available": True, "cases": 50, "tested": f"sglang-trt=={v}",
             "findings": fs} for v, fs in per_release.items()]
    rows = {r["bucket"] for r in build_matrix(runs, [])["rows"]}
    assert rows == {"mismatch | lora | step_a_q, step_a_v | values", "mismatch | lora | step_b_v | values"}, rows


def test_findings_of_one_known_issue_are_one_line_of_what_failed():
    """Two findings the known-issues file names as one upstream issue (FlashInfer's empty batch in two
    dtypes, the ignored sinks with and without a softmax_scale) are one line; another known issue and a
    new finding keep lines of their own, and new findings are never folded."""
    from kernel_oracle.harness.schema import new_record
    from kernel_oracle.reports.model import Result

    record = new_record("main", seeds={"seed": 0}, device="cpu")
    for fid, known in (("F1", "empty-batch"), ("F2", None), ("F3", "empty-batch"), ("F4", "graph-cache"),
                       ("F5", None)):
        record["findings"].append({**_values_record("step_a_q"), "id": fid, "target": "t", "repro": "r",
                                   "headline": f"{fid} fails", **({"known": known} if known else {})})
    lines = Result.from_dict(record).headlines
    assert [(h.id, h.findings, h.tail) for h in lines] == [("F1", 2, " (2 findings)"), ("F2", 1, ""),
                                                           ("F4", 1, ""), ("F5", 1, "")]


def test_a_broken_contract_is_one_bucket_whatever_the_target_did_instead():
    """A module without the missing-max_len check: no error in one case, an IndexError of its own loop in
    another, a RuntimeError of torch.arange in a third; one root cause (the missing check), one bucket."""
    from kernel_oracle.harness.check import Case, Observed, ExpectedOutcome, Verdict
    from kernel_oracle.harness.problem_lora import LoRAProblem

    case = Case(LoRAProblem("step_a_q", (3, 2), (0, 1), (4, 4), (1.0, 1.0), with_max_len=False, with_seg_lens=False))
    expected = ExpectedOutcome("upstream", "ValueError", "LoRA batch_info must provide max_len or seg_lens.",
                       "lora.missing_max_len")
    did = [Observed("ok"), Observed("raise", exc_type="IndexError", message="list index out of range", frame="m:f"),
           Observed("raise", exc_type="IndexError", message="index 47 is out of bounds for dimension 0 with size 47",
                    frame="m:g"),
           Observed("raise", exc_type="RuntimeError", message="upper bound and lower bound inconsistent with step sign")]
    keys = {bucket_of(case, Verdict(False, "contract", "-"), observed=o, expected=expected) for o in did}
    assert keys == {Bucket("contract", "lora", "contract lora.missing_max_len")}, keys
    # records written while buckets keyed on the wrong error's text read as the same root cause
    exp = "ValueError('LoRA batch_info must provide max_len or seg_lens.') [upstream contract lora.missing_max_len]"
    old = [{"kind": "contract", "op": "step_a_q", "expected": exp,
            "bucket": {"kind": "contract", "family": "lora", "cause": cause, "frame": "m:f"}}
           for cause in ("no error: expected lora.missing_max_len", "IndexError: list index out of range")]
    assert {bucket_of_record(f) for f in old} == keys
    # a contract finding of another kind keeps its own key (a read-only input written while raising right)
    wrote = {**old[0], "bucket": {"kind": "contract", "family": "lora", "cause": "wrote its input q_nope"}}
    assert bucket_of_record(wrote).cause == "wrote its input q_nope"


def test_an_error_on_a_valid_input_keys_on_what_was_raised():
    from kernel_oracle.harness.check import Case, Observed, ExpectedOutcome, Verdict
    from kernel_oracle.harness.problem_lora import LoRAProblem

    case = Case(LoRAProblem("step_a_q", (3,), (0,), (4,), (1.0,)))
    keys = {bucket_of(case, Verdict(False, "contract", "-"), expected=ExpectedOutcome("result"),
                      observed=Observed("raise", exc_type=t, message=m, frame="m:f"))
            for t, m in (("IndexError", "index 3 is out of bounds"), ("TypeError", "bad operand"))}
    assert len(keys) == 2


def test_a_contract_headline_names_the_contract_and_every_op_it_showed_in():
    f = {"op": "step_a_q", "ops": ["step_a_q", "step_b_q"], "kind": "contract", "dtypes": ["float32"], "count": 9,
         "message": "no error raised; expected ValueError('LoRA batch_info must provide max_len or seg_lens.') "
                    "[upstream contract lora.missing_max_len]",
         "expected": "ValueError('LoRA batch_info must provide max_len or seg_lens.') "
                     "[upstream contract lora.missing_max_len]",
         "bucket": {"kind": "contract", "cause": "contract lora.missing_max_len"}}
    assert headline(f) == ("step_a_q, step_b_q: breaks the upstream contract lora.missing_max_len, "
                           "ValueError('LoRA batch_info must provide max_len or seg_lens.'): no error raised "
                           "(float32; 9 failing cases)")
