"""A short CPU campaign against ``reference`` and ``triton`` (zero findings, valid outputs), and
campaigns against deliberately broken targets: each finding has the right class and a one-line
repro command that reproduces it from the saved tensors."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from kernel_oracle.fuzz.campaign import CampaignConfig, CampaignError, run_campaign
from kernel_oracle.cli import main as cli_main
from kernel_oracle.harness.device import interpreting
from kernel_oracle.harness.schema import load

from kernel_oracle.fuzz.targets import resolve_target

from oracle_tests.conftest import DEVICE

BUDGET = {"reference": 12, "triton": 10}
# a device="cpu" campaign runs its target in this process only when this process interprets Triton
# kernels (the CPU machine); on a GPU machine it must use a worker, whose environment interprets them
CPU_IN_PROCESS = interpreting()


def _findings(out):
    path = out / "findings.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("op", ["lora", "vision"])
@pytest.mark.parametrize("target", ["reference", "triton"])
def test_short_campaign_finds_nothing(target, op, tmp_path):
    # on this machine's device: a "cpu" campaign on a GPU machine would test its Triton interpreter
    # (3.6 on the H200, not the 3.9 whose defects docs/semantics.md#where-the-triton-interpreter-is-wrong lists and our kernels work around)
    rec = run_campaign(CampaignConfig(target=target, op=op, budget=BUDGET[target], seed=7, device=DEVICE,
                                      out_dir=tmp_path, progress=False))
    assert rec["kind"] == "campaign" and rec["findings"] == [], rec["findings"]
    saved = load(tmp_path / "summary.json")
    assert saved["campaign"]["executed"] >= BUDGET[target] - 2
    assert sum(g["cases"] for g in saved["groups"]) == saved["campaign"]["executed"]
    declared = resolve_target(target, DEVICE)
    assert all(g["precision"] == declared.precision_for(g["op"]) for g in saved["groups"])
    assert saved["targets"][0]["name"] == target and saved["targets"][0]["available"]
    assert _findings(tmp_path) == []


def _reproduce(finding, target=None) -> int:
    """Run the finding's repro command (optionally on another ``target``) where the CPU campaign found
    it: in this process when it interprets Triton kernels, else in a fresh CPU process (on a GPU
    machine an accepted malformed input could fault this session's CUDA context)."""
    argv = shlex.split(finding["repro"])
    assert argv[0] == "kernel-oracle"
    if target is not None:
        argv[argv.index("--targets") + 1] = target
    if CPU_IN_PROCESS:
        return cli_main(argv[1:])
    proc = subprocess.run([sys.executable, "-m", "kernel_oracle", *argv[1:], "--device", "cpu"], capture_output=True,
                          text=True, timeout=600)
    print(proc.stdout, end="")
    print(proc.stderr, end="", file=sys.stderr)
    return proc.returncode


def test_broken_kernel_gives_a_mismatch_that_reproduces(tmp_path, capsys):
    # the tiny preset on every device: the same 10 draws find it on the CPU and on a GPU
    rec = run_campaign(CampaignConfig(target="mutant:lora_scaling_missing", op="step_b_q", budget=10, seed=1,
                                      device=DEVICE, out_dir=tmp_path, progress=False, shrink_allowance=30,
                                      limits="tiny"))
    kinds = {f["kind"] for f in rec["findings"]}
    assert "mismatch" in kinds, rec["findings"]
    f = next(f for f in _findings(tmp_path) if f["kind"] == "mismatch")
    assert f["figures"]["ratio"] > 1 and f["figures"]["where"]["token"] is not None
    assert f["problem"]["problem"]["op"] == "step_b_q"
    assert _reproduce(f) == 1
    assert "REPRODUCED [mismatch]" in capsys.readouterr().out
    # the real kernel passes the same saved case
    assert _reproduce(f, target="triton") == 0


def test_accepting_malformed_metadata_is_a_validation_gap(tmp_path):
    rec = run_campaign(CampaignConfig(target="mutant:vision_skips_strict_validation", op="vision", budget=15, seed=2,
                                      device=DEVICE, out_dir=tmp_path, progress=False, shrink_allowance=10))
    assert "validation-gap" in {f["kind"] for f in rec["findings"]}
    gap = next(f for f in rec["findings"] if f["kind"] == "validation-gap")
    assert _reproduce(gap) == 1
    # --upstream-contracts-only generates no malformed metadata: nothing to find
    rec2 = run_campaign(CampaignConfig(target="mutant:vision_skips_strict_validation", op="vision", budget=10, seed=2,
                                       device=DEVICE, out_dir=tmp_path / "upstream_only", progress=False,
                                       upstream_contracts_only=True))
    assert rec2["findings"] == []
    assert all(g["shape_class"] != "malformed" for g in rec2["groups"])


def test_drifted_message_is_a_contract_finding_and_campaigns_resume(tmp_path):
    kw = dict(target="mutant:lora_drifted_error_message", op="step_a_q", seed=3, device=DEVICE, out_dir=tmp_path,
              progress=False, isolate=not CPU_IN_PROCESS, shrink_allowance=10)
    first = run_campaign(CampaignConfig(budget=25, **kw))
    assert "contract" in {f["kind"] for f in first["findings"]}
    n = len(_findings(tmp_path))
    again = run_campaign(CampaignConfig(budget=35, **kw))  # same --out: continues, keeps what it found
    assert again["campaign"]["executed"] > first["campaign"]["executed"]
    assert len(_findings(tmp_path)) >= n
    ids = [f["id"] for f in _findings(tmp_path)]
    assert len(ids) == len(set(ids))


def test_a_target_that_kills_its_process_is_a_crash(tmp_path, monkeypatch):
    pkg = tmp_path / "crashy_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "crashy.py").write_text("import os\n\ndef step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head):\n"
                                   "    os._exit(7)\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # the spawned worker inherits sys.path
    rec = run_campaign(CampaignConfig(target="crashy_pkg.crashy", op="lora", budget=2, seed=0, device="cpu",
                                      out_dir=tmp_path / "out", progress=False, shrink_allowance=1))
    assert rec["findings"] and all(f["kind"] == "crash" for f in rec["findings"])
    assert rec["targets"][0]["entry_points"] == ["step_a_q"]  # tested on the entry point it has


def test_usage_errors(tmp_path):
    with pytest.raises(CampaignError, match="the only valid values are"):
        run_campaign(CampaignConfig(target="reference", op="conv", budget=1, out_dir=tmp_path))
    with pytest.raises(CampaignError, match="the only built-in targets are"):
        run_campaign(CampaignConfig(target="refrence", op="lora", budget=1, out_dir=tmp_path))
    # --no-isolate runs the target in this process: on this machine's device (a "cpu" one would flip
    # this GPU session's Triton switch, or be refused once kernels are imported compiled)
    assert cli_main(["fuzz", "--targets", "reference", "--op", "lora", "--cases", "1", "--out", str(tmp_path / "x"),
                     "--device", DEVICE, "--quiet", "--no-isolate"]) == 0
    assert cli_main(["fuzz", "--targets", "sglang", "--op", "lora", "--cases", "1", "--out", str(tmp_path / "y"),
                     "--quiet"]) == (0 if "sglang" in sys.modules else 2)


# ---- the device switch never leaks into the caller -------------------------------------------------

def test_a_campaign_leaves_its_callers_environment_alone(tmp_path, monkeypatch):
    # the caller compiles (no TRITON_INTERPRET, as a GPU session would); a cpu campaign's worker must
    # interpret anyway, and the caller's environment must come back exactly as it was
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    before = dict(os.environ)
    rec = run_campaign(CampaignConfig(target="triton", op="vision", budget=2, seed=0, device="cpu", out_dir=tmp_path,
                                      progress=False))
    assert dict(os.environ) == before
    assert rec["campaign"]["interpreter"] is True and rec["campaign"]["executed"] >= 1
    assert rec["environment"]["triton_interpret"] is True  # the record says where the target ran


def test_in_process_campaigns_need_the_device_mode_already(tmp_path, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(CampaignError, match=r"isolate=False runs the target in this process, whose Triton kernels "
                                            r"are not interpreted \(TRITON_INTERPRET=1\) as device='cpu' needs"):
        run_campaign(CampaignConfig(target="reference", op="lora", budget=1, device="cpu", out_dir=tmp_path,
                                    isolate=False))
    assert "TRITON_INTERPRET" not in os.environ


# ---- buckets: one root cause, one finding -----------------------------------------------------------

def _mutant_campaign(tmp_path, name: str, budget: int, op: str = "lora") -> dict:
    # tiny problems on every device: this is about buckets, not sizes
    return run_campaign(CampaignConfig(target=f"mutant:{name}", op=op, budget=budget, seed=1, device=DEVICE,
                                       out_dir=tmp_path, progress=False, shrink_allowance=20, limits="tiny"))


def test_one_planted_bug_is_one_finding_across_dtypes(tmp_path):
    # step B_q leaves each segment's last row unchanged: one defect, whichever dtype, size or flags show it
    rec = _mutant_campaign(tmp_path, "lora_step_b_q_drops_segment_end", 60, op="step_b_q")
    mismatches = [f for f in rec["findings"] if f["kind"] == "mismatch"]
    assert len(mismatches) == 1, ([f["headline"] for f in mismatches], rec["notes"], rec["campaign"]["executed"])
    f = mismatches[0]
    assert f["op"] == "step_b_q" and f["id"].endswith("-mismatch-step_b_q")
    assert len(f["dtypes"]) >= 2 and set(f["dtypes"]) <= {"float16", "bfloat16", "float32"}, f["dtypes"]
    failing = sum(g["cases"] - g["passes"] for g in rec["groups"] if g["op"] == "step_b_q")
    assert f["count"] == failing > len(f["dtypes"])  # every failing case of the op counted in the one finding
    assert "segment boundary" in f["regions"], f["regions"]
    assert f["headline"].startswith("step_b_q: the first or last row of each segment differs from the reference")
    assert f"; {f['count']} failing cases)" in f["headline"]
    assert "dtype" not in f["bucket"] and "config" not in f["bucket"]


def test_two_planted_bugs_in_two_ops_are_two_findings(tmp_path):
    # step B_q leaves each segment's last row unchanged and step A_v ignores the permutation
    # a budgeted campaign draws in one long Hypothesis run, whose choices follow the constants of the modules this
    # process has imported: a budget that reaches both ops' defects whatever ran before
    rec = _mutant_campaign(tmp_path, "lora_two_planted_bugs", 450, op="lora")
    mismatches = [f for f in rec["findings"] if f["kind"] == "mismatch"]
    assert sorted(f["op"] for f in mismatches) == ["step_a_v", "step_b_q"], [f["headline"] for f in mismatches]
    for f in mismatches:
        assert f["headline"].startswith(f"{f['op']}: ") and f["count"] >= 1


def _lora_case(**kw):
    from kernel_oracle.harness.check import Case
    from kernel_oracle.harness.problem_lora import LoRAProblem

    base = dict(op="step_b_q", seg_lens=(20, 3), weight_indices=(0, 1), lora_ranks=(4, 4), scalings=(1.0, 0.5),
                H=2, qk=16, vd=16, C=32, R=16, seed=5)
    base.update(kw)
    return Case(LoRAProblem(**base))


@pytest.mark.parametrize("rows, heads, region", [
    (range(16, 20), (0, 1), "tail tile"),          # the partial last 16-row tile of segment 0 (20 rows)
    ((0, 19), (0, 1), "segment boundary"),         # its first and last rows
    (range(0, 23), (1,), "head"),                  # every row, head 1 only
    (range(20, 23), (0, 1), "slot"),               # segment 1 = slot 1 only, both heads
    (range(0, 23), (0, 1), "everywhere"),
])
def test_mismatch_region_holds_every_failing_element(rows, heads, region):
    from kernel_oracle.harness.buckets import mismatch_region
    from kernel_oracle.harness.check import prepared_call, expected_outcome

    case = _lora_case()
    call = prepared_call(case, "cpu")
    exp = expected_outcome(case, "cpu", call=call)
    out = exp.value.clone()
    for r in rows:
        for h in heads:
            out[r, h, :] += 1.0
    figures = {"max_abs": 1.0, "ratio": 10.0}
    assert mismatch_region(case, call, out, exp.value, exp.defined, figures) == region


def test_reading_past_the_rank_is_its_own_region():
    from kernel_oracle.harness.buckets import mismatch_region
    from kernel_oracle.harness.check import prepared_call, expected_outcome

    # slot 0 has rank 4 < R=16 and NaN planted in its columns 4..15: a kernel that reads them
    # turns every row of segment 0 (and only those) into NaN
    case = _lora_case(lora_ranks=(4, 16), poison_beyond_rank="nan")
    call = prepared_call(case, "cpu")
    exp = expected_outcome(case, "cpu", call=call)
    out = exp.value.clone()
    out[0:20] = float("nan")
    assert mismatch_region(case, call, out, exp.value, exp.defined, {"max_abs": float("inf"),
                                                                      "ratio": float("inf")}) == "beyond rank"
    out = exp.value.clone()
    out[0:20] += 1.0  # the same rows without the poison planted: nothing says "rank"
    plain = _lora_case(lora_ranks=(4, 16))
    assert mismatch_region(plain, prepared_call(plain, "cpu"), out, exp.value, exp.defined,
                           {"max_abs": 1.0, "ratio": 10.0}) == "slot"


def test_bucket_of_a_stale_graph_write_and_the_config_signature():
    from kernel_oracle.harness.buckets import bucket_of, config_signature
    from kernel_oracle.harness.check import Observed, Verdict, prepared_call, expected_outcome

    case = _lora_case(seg_lens=(4, 0), cuda_graph_pad_to=4, permute=True, lora_ranks=(4, 0), weight_indices=(0, 1),
                      extra_rows=2)
    assert config_signature(case.problem) == ("float32", "cuda_graph", "permuted", "empty_segment")
    assert config_signature(_lora_case(seg_lens=(4, 2), lora_ranks=(4, 0)).problem) == ("float32", "rank0")
    call = prepared_call(case, "cpu")
    exp = expected_outcome(case, "cpu", call=call)
    verdict = Verdict(False, "mismatch", "rows routed by no segment changed (must stay bit-identical): rows [4]")
    b = bucket_of(case, verdict, observed=Observed("ok", output=exp.value), expected=exp, call=call)
    # the region and flags describe the case; the key is the op and the failure mode
    assert (b.kind, b.family, b.cause, b.op, b.where, b.flags) == (
        "mismatch", "lora", "values", "step_b_q", "stale graph metadata", ("cuda_graph", "permuted", "empty_segment"))


def test_bucket_identity_and_cover():
    from kernel_oracle.harness.buckets import Bucket, bucket_of_record, mask_numbers

    assert mask_numbers("seg_lens[3] = 17 at 0x7ffe: float16 -1.5e-3 step_a_q (12.5%)") == \
        "seg_lens[#] = # at #: float16 # step_a_q (#%)"
    known = Bucket("mismatch", "lora", "values", "", "step_b_q", "everywhere", ("permuted",))
    # region and flags are attributes: a case of the op in another region or config is the same root cause
    assert known.covers(Bucket("mismatch", "lora", "values", "", "step_b_q", "tail tile", ("rank0",)))
    assert not known.covers(Bucket("mismatch", "lora", "values", "", "step_a_v", "everywhere"))  # another op
    assert not known.covers(Bucket("mismatch", "lora", "output", "", "step_b_q", "output"))  # a wrong shape
    assert not known.covers(Bucket("mismatch", "vision", "values", "", "step_b_q"))
    crash = Bucket("contract", "lora", "RuntimeError: bad row #", "pkg.mod:fn")
    assert crash.covers(Bucket.from_dict(crash.to_dict())) and not crash.covers(
        Bucket("contract", "lora", "RuntimeError: bad row #", "pkg.mod:other"))
    # a stored finding carries its bucket; an older record gets the one its fields imply
    assert bucket_of_record({"kind": "contract", "op": "step_a_q", "bucket": crash.to_dict()}) == crash
    assert bucket_of_record({"kind": "contract", "op": "vision", "contract": "vision.missing_max_seqlen",
                             "message": "x 1"}) == Bucket("contract", "vision", "contract vision.missing_max_seqlen")


def test_target_frame_is_the_innermost_frame_of_the_targets_code(tmp_path, monkeypatch):
    from kernel_oracle.harness.buckets import target_frame

    pkg = tmp_path / "frames_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "outer.py").write_text("import torch\n\ndef entry(x):\n    return helper(x)\n\n"
                                  "def helper(x):\n    return torch.cat([x, 'no'])\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import torch
    from frames_pkg.outer import entry

    with pytest.raises(TypeError) as exc:
        entry(torch.zeros(1))
    assert target_frame(exc.value.__traceback__) == "frames_pkg.outer:helper"  # not torch's frame, not ours


def test_a_harness_error_stops_the_campaign_and_is_never_a_finding(tmp_path, monkeypatch, capsys):
    import kernel_oracle.harness.check as check

    def broken(target, case, device="cpu", *, repro=""):
        raise ValueError(f"materialize failed for {case.op}")
    monkeypatch.setattr(check, "check_case", broken)
    rec = run_campaign(CampaignConfig(target="reference", op="lora", budget=5, device=DEVICE, out_dir=tmp_path / "a",
                                      progress=False, isolate=False))
    assert rec["findings"] == [] and rec["summary"]["status"] == "incomplete"
    assert rec["notes"][-1].startswith("harness error (a bug of kernel-oracle, not of the target), campaign stopped: "
                                       "ValueError: materialize failed for ")
    assert cli_main(["fuzz", "--targets", "reference", "--op", "lora", "--cases", "5", "--device", DEVICE,
                     "--no-isolate", "--quiet", "--out", str(tmp_path / "b")]) == 3
    assert capsys.readouterr().err.startswith("kernel-oracle fuzz: incomplete: harness error")
