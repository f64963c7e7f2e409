"""Release identity in the matrix (Note [Release matrix] in ``kernel_oracle.jobs.matrix``): releases that
run the same code are one column, tested once; "introduced in" and "fixed in" fall only where the
code changed; configurations are lanes; ``--releases`` / ``--configurations`` expand the targets."""

from __future__ import annotations

import pytest

from kernel_oracle.harness.family import op_groups
from kernel_oracle.jobs.matrix import build_matrix, expand_targets, plan_columns, run_matrix

from oracle_tests._sglang_releases import release_files


def _finding(fid: str, spec: str, cause: str = "everywhere", count: int = 1) -> dict:
    return {"id": fid, "target": spec, "op": "step_a_q", "dtype": "float32", "shape_class": "prefill",
            "kind": "mismatch", "message": cause, "count": count,
            "bucket": {"kind": "mismatch", "family": "lora", "cause": cause, "frame": "", "config": ["float32"]}}


# spec -> identity of the code its lora campaign would run (as release_identity would say)
IDS = {"sglang==0.5.12": "A", "sglang==0.5.12.post1": "A", "sglang==0.5.13": "A", "sglang==0.5.14": "B",
       "sglang==0.5.15": "B", "sglang==0.5.16": "A", "sglang-trt==0.5.23": "T",
       "sglang-trt==0.5.23@pdl=off": "T", "sglang-trt==0.5.23@cublas=on": "C"}


def _plan(specs, families=("lora",)):
    return plan_columns(specs, list(families), lambda s, f: IDS.get(s))


def test_releases_with_the_same_code_are_one_column_tested_once():
    cols = _plan(["sglang==0.5.14", "sglang==0.5.12.post1", "sglang==0.5.12", "sglang==0.5.13", "sglang==0.5.15"])
    assert [(c.label, c.members, c.tested) for c in cols] == [
        ("sglang==0.5.12-0.5.13", ["sglang==0.5.12", "sglang==0.5.12.post1", "sglang==0.5.13"], "sglang==0.5.12"),
        ("sglang==0.5.14-0.5.15", ["sglang==0.5.14", "sglang==0.5.15"], "sglang==0.5.14")]
    assert all(c.same_as is None for c in cols)


def test_code_that_comes_back_is_a_column_of_its_own_but_not_run_again():
    cols = _plan(["sglang==0.5.12", "sglang==0.5.14", "sglang==0.5.16"])
    assert [c.label for c in cols] == ["sglang==0.5.12", "sglang==0.5.14", "sglang==0.5.16"]
    assert [c.same_as for c in cols] == [None, None, "sglang==0.5.12"]


def test_configurations_are_lanes_and_the_same_code_path_is_run_once():
    cols = _plan(["sglang-trt==0.5.23", "sglang-trt==0.5.23@cublas=on", "sglang-trt==0.5.23@pdl=off"])
    assert [(c.label, c.same_as) for c in cols] == [("sglang-trt==0.5.23", None),
                                                    ("sglang-trt==0.5.23@cublas=on", None),
                                                    ("sglang-trt==0.5.23@pdl=off", "sglang-trt==0.5.23")]
    assert len({c.lane for c in cols}) == 3


def test_history_is_claimed_only_where_the_code_changed():
    """A bucket seen (by sampling) only in 0.5.12.post1, whose code is 0.5.12's: introduced in the range,
    never in 0.5.12.post1 itself; fixed in the first column of other code that ran without it."""
    cols = _plan(["sglang==0.5.12", "sglang==0.5.12.post1", "sglang==0.5.14"])
    runs = [{"spec": c.label, "lane": c.lane, "family": c.family, "tested": c.tested, "members": c.members,
             "available": True, "reason": "", "cases": 30,
             "findings": [_finding("F1", c.tested, count=2)] if c.tested == "sglang==0.5.12" else []} for c in cols]
    m = build_matrix(runs, [])
    (row,) = m["rows"]
    assert row["counts"] == {"sglang==0.5.12-0.5.12.post1": 2, "sglang==0.5.14": 0}
    assert (row["introduced_in"], row["fixed_in"]) == ("sglang==0.5.12-0.5.12.post1", "sglang==0.5.14")
    assert [r["members"] for r in m["releases"]] == [["sglang==0.5.12", "sglang==0.5.12.post1"], ["sglang==0.5.14"]]


def test_a_row_counts_only_in_its_familys_columns_and_keeps_each_lanes_history():
    cols = _plan(["sglang==0.5.12", "sglang==0.5.14"], families=("lora", "vision"))
    assert [c.label for c in cols] == ["sglang==0.5.12 lora", "sglang==0.5.14 lora", "sglang==0.5.12 vision",
                                       "sglang==0.5.14 vision"]
    runs = [{"spec": c.label, "lane": c.lane, "family": c.family, "tested": c.tested, "available": True,
             "reason": "", "cases": 9, "findings": [_finding("F", c.tested)] if c.label == "sglang==0.5.12 lora"
             else []} for c in cols]
    (row,) = build_matrix(runs, [])["rows"]
    assert row["counts"] == {"sglang==0.5.12 lora": 1, "sglang==0.5.14 lora": 0}
    assert row["history"] == {"sglang lora": {"introduced_in": "sglang==0.5.12 lora",
                                              "fixed_in": "sglang==0.5.14 lora"}}


def test_targets_expand_to_releases_and_configurations():
    have = {"sglang==0.5.12", "sglang==0.5.23", "sglang-trt==0.5.23"}
    got = expand_targets(["sglang", "sglang-trt", "triton"], releases=["0.5.12", "0.5.23"], configurations=True,
                         available=lambda s: s in have)
    assert got == ["sglang==0.5.12", "sglang==0.5.12@engine=0.7.4", "sglang==0.5.23", "sglang==0.5.23@engine=0.7.4",
                   "sglang-trt==0.5.23", "sglang-trt==0.5.23@lora_opti=on",
                   "sglang-trt==0.5.23@cublas=on,lora_opti=on", "sglang-trt==0.5.23@cublas_kv_b=on,lora_opti=on",
                   "sglang-trt==0.5.23@cublas=on,lora_opti=off", "sglang-trt==0.5.23@pdl=off",
                   "sglang-trt==0.5.23@pdl=on", "triton"]
    assert expand_targets(["sglang-trt==0.5.23@pdl=off"], configurations=True) == ["sglang-trt==0.5.23@pdl=off"]


@pytest.mark.parametrize("op, families", [("lora", ["lora"]), ("step_b_v", ["lora"]),
                                          ("lora,vision", ["lora", "vision"]), ("vision", ["vision"]),
                                          ("step_b_v,vision,step_a_q", ["lora", "vision"])])
def test_op_families(op, families):
    assert list(op_groups(op)) == families


def test_an_unknown_op_names_the_valid_ones():
    with pytest.raises(ValueError) as info:
        op_groups("lora,bogus")
    assert str(info.value) == ("'lora,bogus' names ['bogus'], which no family has; the only valid values are the "
                               "families ['lora', 'vision', 'csgmv'] and their ops ['step_a_q', 'step_b_q', "
                               "'step_a_v', 'step_b_v', 'q_side_fused', 'v_side_fused', 'csgmv_shrink', "
                               "'csgmv_expand'], comma-separated")


def test_the_matrix_runs_each_distinct_code_once(tmp_path):
    """0.5.15 and 0.5.16 run the same kv_b code (0.5.16 moved the file), 0.5.12 and 0.5.15 the same vision
    wrapper: two campaigns per family for three releases, the corpus entries judged per column."""
    from kernel_oracle.jobs.bug_corpus import load_corpus

    for v in ("0.5.12", "0.5.15", "0.5.16"):
        release_files(v)  # skips without the wheels
    entries = [e for e in load_corpus() if e.id in ("sglang-pr-28371", "sglang-vision-0-5-10-ignores-softmax-scale")]
    # on the CPU on every host: the corpus entries are CPU entries, judged only by a matrix of their device
    record = run_matrix(["sglang==0.5.16", "sglang==0.5.12", "sglang==0.5.15"], entries=entries, op="lora,vision",
                        budget=4, device="cpu", out=tmp_path, quiet=True)
    m = record["release_matrix"]
    labels = [c["spec"] for c in m["releases"]]
    assert labels == ["sglang==0.5.12 lora", "sglang==0.5.15-0.5.16 lora", "sglang==0.5.12-0.5.15 vision",
                      "sglang==0.5.16 vision"]
    assert record["summary"]["campaigns"] == 4 and all(c["cases"] for c in m["releases"]), \
        (m["releases"], record.get("notes"))
    pr = next(c for c in m["corpus"] if c["id"] == "sglang-pr-28371")
    assert pr["results"]["sglang==0.5.12 lora"] == {"outcome": "fails: mismatch", "expected": "fails",
                                                    "as_expected": True}
    assert pr["results"]["sglang==0.5.15-0.5.16 lora"]["as_expected"] is True
    scale = next(c for c in m["corpus"] if c["id"] == "sglang-vision-0-5-10-ignores-softmax-scale")
    assert scale["results"]["sglang==0.5.12-0.5.15 vision"]["outcome"] == "passes"
    assert (tmp_path / "matrix.md").read_text().count("sglang==0.5.15-0.5.16 lora") >= 1


def test_without_the_replays_no_row_claims_a_fix():
    """An absence is a fix only once the finding's example passes there (Note [Replayed absences]): a matrix
    whose replays did not run keeps "introduced in" and claims no "fixed in"."""
    cols = _plan(["sglang==0.5.12", "sglang==0.5.14"])
    runs = [{"spec": c.label, "lane": c.lane, "family": c.family, "tested": c.tested, "members": c.members,
             "available": True, "reason": "", "cases": 30,
             "findings": [_finding("F1", c.tested)] if c.tested == "sglang==0.5.12" else []} for c in cols]
    (row,) = build_matrix(runs, [], replayed=False)["rows"]
    assert (row["introduced_in"], row["fixed_in"]) == ("sglang==0.5.12", None)
    assert build_matrix(runs, [])["rows"][0]["fixed_in"] == "sglang==0.5.14"


@pytest.mark.parametrize("stop_in", ["campaign", "replays"])
def test_an_interrupted_matrix_writes_the_columns_that_ran(tmp_path, monkeypatch, stop_in):
    """SIGTERM in the second column's campaign, or in the replays after every column: the matrix of the
    columns that ran is written (the finding of the first kept, no fix claimed, a note saying so) and the
    interruption still reaches the caller.  One column at a time (a CPU): the newest release's first."""
    import json

    from kernel_oracle.fuzz.campaign import CampaignInterrupted
    from kernel_oracle.jobs import matrix as matrix_job
    from kernel_oracle.jobs import matrix_columns, matrix_replay

    monkeypatch.setattr(matrix_job, "plan_columns", lambda specs, families, identity, applies=None: _plan(specs))
    started = []

    def campaign(tested, op, config, out_dir, known_cases=()):
        started.append(tested)
        if len(started) == 2 and stop_in == "campaign":
            raise CampaignInterrupted("SIGTERM")
        return {"tested": tested, "first": len(started) == 1}

    def column_run(record, rec, column):
        return {"available": True, "reason": "", "declines": {}, "cases": 9,
                "findings": [_finding("F1", column.tested)] if rec["first"] else [],
                "known_cases": 0, "known_skipped": 0, "validation_gaps": 0}

    def replays(runs, **kw):
        raise CampaignInterrupted("SIGTERM")

    monkeypatch.setattr(matrix_columns, "campaign_record", campaign)
    monkeypatch.setattr(matrix_job, "_column_run", column_run)
    monkeypatch.setattr(matrix_replay, "replay_absences", replays)
    with pytest.raises(CampaignInterrupted) as exc:
        run_matrix(["sglang==0.5.12", "sglang==0.5.14"], entries=[], budget=9, device="cpu", out=tmp_path,
                   quiet=True)
    written = json.loads((tmp_path / "matrix.json").read_text())
    ran = 1 if stop_in == "campaign" else 2
    # the newest release's column runs first (Note [Matrix budget]); the columns are written in version order
    assert [r["spec"] for r in written["release_matrix"]["releases"]] == \
        (["sglang==0.5.14"] if ran == 1 else ["sglang==0.5.12", "sglang==0.5.14"])
    (row,) = written["release_matrix"]["rows"]
    assert (row["introduced_in"], row["fixed_in"]) == ("sglang==0.5.14", None)
    assert any(f"{ran} of 2 columns ran" in n and "no row claims a fix" in n for n in written["notes"]), \
        written["notes"]
    assert exc.value.record["release_matrix"] == written["release_matrix"]
