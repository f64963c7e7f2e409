"""Note [Replayed absences]: a column whose campaign missed a bucket is replayed before the matrix says "fixed"."""

from __future__ import annotations

import dataclasses

from kernel_oracle.harness.buckets import Bucket
from kernel_oracle.harness.check import Case
from kernel_oracle.harness.problem_vision import VisionProblem
from kernel_oracle.jobs.matrix import build_matrix
from kernel_oracle.jobs.matrix_replay import replay_absences

WINDOWED = Case(VisionProblem(lengths=(3, 5), H=2, window=(1, 1), dtype="float16"))
VALUES = Bucket("mismatch", "vision", "values", "", "vision")


def _run(spec: str, findings=(), declines=None) -> dict:
    return {"spec": spec, "tested": spec, "family": "vision", "lane": "sglang vision", "available": True,
            "cases": 100, "ran": True, "findings": list(findings), "declines": declines or {}}


def _finding() -> dict:
    return {"id": "F0001-mismatch-vision", "op": "vision", "kind": "mismatch", "dtype": "float16", "count": 4,
            "problem": WINDOWED.to_dict(), "bucket": dataclasses.replace(VALUES, needs=("window",)).to_dict()}


def test_a_missed_bucket_that_fails_on_replay_is_present_and_not_fixed():
    asked = []

    def check(spec, case_dict):  # 0.5.16 ignores the window like 0.5.11; 0.5.17 honours it
        asked.append(spec)
        return VALUES if spec == "sglang==0.5.16" and case_dict["problem"]["window"] is not None else None

    runs = [_run("sglang==0.5.10", declines={"window_size": "never passed"}), _run("sglang==0.5.11", [_finding()]),
            _run("sglang==0.5.16"), _run("sglang==0.5.17")]
    assert replay_absences(runs, check=check) == 2  # on 0.5.16 and 0.5.17 (the variant without the window aside)
    assert "sglang==0.5.10" not in asked  # its callers never pass a window: not its case
    assert runs[2]["replayed"] == [{"bucket": "mismatch | vision | vision | values | needs window",
                                    "from": "sglang==0.5.11", "id": "F0001-mismatch-vision"}]
    assert "replayed" not in runs[3]
    row, = build_matrix(runs, [])["rows"]
    assert row["counts"]["sglang==0.5.16"] == 0 and row["replayed"] == {"sglang==0.5.16": "sglang==0.5.11"}
    # without the replay the campaign's miss would read "fixed in 0.5.16"
    assert (row["introduced_in"], row["fixed_in"]) == ("sglang==0.5.11", "sglang==0.5.17")


def test_a_replay_that_fails_for_another_feature_is_not_the_bucket():
    def check(spec, case_dict):  # fails whatever the window: a defect of every call, not the window's
        return VALUES

    runs = [_run("sglang==0.5.11", [_finding()]), _run("sglang==0.5.16")]
    replay_absences(runs, check=check)
    assert "replayed" not in runs[1]  # its needs on 0.5.16 are (), not ("window",)


def test_a_metadata_case_replays_as_keywords_where_callers_pass_no_forward_metadata():
    asked = []

    def check(spec, case_dict):
        asked.append((spec, case_dict["problem"]["path"]))
        return None

    f = _finding()
    f["problem"]["problem"].update(path="metadata", window=None, H=4, H_kv=2)
    f["bucket"]["needs"] = ["gqa"]
    runs = [_run("sglang==0.5.11", declines={"forward_metadata": "never passed"}), _run("sglang==0.5.16", [f]),
            _run("sglang==0.5.10", declines={"forward_metadata": "never passed", "gqa": "no num_kv_heads"})]
    replay_absences(runs, check=check)
    assert asked == [("sglang==0.5.11", "kwargs")]  # 0.5.10's callers never give GQA: not replayed there
