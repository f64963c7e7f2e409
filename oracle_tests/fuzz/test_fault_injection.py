"""Fault injection: the oracle cannot be fooled, and campaigns lose nothing.

Every probe a hostile target or a careless user tried lives here or is named below, so that none
comes back.  Held: the behaviour was right when probed and a test keeps it so; fixed: it was a defect.

| probe | held / fixed | test |
|---|---|---|
| H01 kill -9 mid-campaign, resume: no finding lost, no id reused | held | test_faults_campaign.py::test_kill_9_mid_campaign_then_resume |
| H02 SIGTERM: exit 3, state saved, no orphan worker | held | test_faults_campaign.py::test_a_signal_stops_cleanly_with_exit_3_and_no_orphan[SIGTERM] |
| H03 SIGINT: the same | held | test_faults_campaign.py::test_a_signal_stops_cleanly_with_exit_3_and_no_orphan[SIGINT] |
| H04 a second campaign on a locked --out | held | test_faults_campaign.py::test_a_second_campaign_on_the_same_out_is_refused |
| H05 a torn findings line | held | test_faults_campaign.py::test_a_torn_last_line_is_set_aside_and_no_finding_is_lost |
| H06 a binary findings line | held | test_a_findings_line_that_is_no_finding_is_set_aside[binary] |
| H07 a corrupt state.json | held | test_faults_campaign.py::test_a_corrupt_state_file_is_rebuilt_from_findings_and_case_files |
| H08 malicious pickle: torch zip file | held | test_faults_cli.py::test_malicious_case_file_runs_nothing[torch-zip] |
| H09 malicious pickle: raw pickle | held | test_faults_cli.py::test_malicious_case_file_runs_nothing[raw-pickle] |
| H10 malicious pickle: inside a genuine case | held | test_faults_cli.py::test_malicious_case_file_runs_nothing[inside-case] |
| H11 malicious pickle: a file given to replay | held | test_api.py::test_replay_refuses_files_that_would_run_code |
| H12 malicious pickle: a campaign's own case file | held | test_a_planted_case_file_in_a_campaign_runs_nothing |
| H13 shell metacharacters in repro lines | held | test_repro_lines_quote_shell_metacharacters |
| H14 HTML injection in messages | held | test_reports_escape_control_characters_and_markup |
| H15 Markdown injection in messages | held | test_faults_cli.py::test_markdown_report_renders_as_intended |
| H16 a hang | held | test_faults_campaign.py::test_a_hang_is_a_finding_and_the_worker_is_replaced |
| H17 a segfault | held | test_a_segfault_and_a_huge_allocation_are_findings |
| H18 os._exit | held | test_faults_campaign.py::test_one_crash_across_ops_is_one_finding_with_a_count |
| H19 a huge allocation | held | test_a_segfault_and_a_huge_allocation_are_findings |
| H20 a wrong output shape | held | test_a_wrong_output_shape_is_a_mismatch |
| H21 a wrong output dtype | held | test_api.py::test_wrong_dtype_is_reported_before_values |
| H22 bad options | held | test_faults_campaign.py::test_fuzz_exit_codes, test_faults_cli.py::test_repro_usage_errors |
| D01 assert_matches called without batch info and size passes an always-wrong kernel | fixed | test_assert_matches_binds_its_arguments_first[missing] |
| D02 ... called with no tensors at all | fixed | test_assert_matches_binds_its_arguments_first[nothing] |
| D03 ... with a misspelled keyword (and extra, repeated, misplaced ones) | fixed | test_assert_matches_binds_its_arguments_first, test_an_error_outside_the_contract_table_needs_its_text |
| D04 a target changes torch's global settings (set_float32_matmul_precision) | fixed | test_global_settings_are_restored_and_reported_once_per_setting, test_the_poison_changes_no_verdict, test_assert_matches_fails_a_kernel_that_changes_global_state, test_a_cuda_stream_and_generator_changed_by_a_kernel_are_restored (GPU) |
| D05 a standalone script that runs the data it was given | fixed | test_the_standalone_script_holds_no_data |
| D06 --emit-script overwrites a file and writes through a planted symlink | fixed | test_emit_script_refuses_existing_files_and_symlinks |
| D07 assert_matches's repro directory is a fixed name under the temp dir | fixed | test_repros_go_to_a_private_directory_and_never_through_a_symlink |
| D08 a target clobbers its inputs after computing | fixed | test_a_target_that_writes_its_inputs_is_a_finding, test_a_campaign_finds_input_writes |
| D09 odd return values (meta, nested, sparse, subclass, other device, meta inputs) | fixed | test_odd_outputs_fail_assert_matches, test_odd_outputs_are_findings_and_the_campaign_goes_on, test_meta_inputs_are_a_usage_error, test_odd_output_on_another_device |
| D10 NaN or negative elapsed_s in state.json | fixed | test_state_json_with_bad_numbers_is_rebuilt |
| D11 a findings line that lacks fields | fixed | test_a_findings_line_that_is_no_finding_is_set_aside[lacks-fields] |
| D12 state.json (or another state file) a directory | fixed | test_a_directory_where_a_state_file_belongs_is_exit_2 |
| D13 --case-timeout 1e10 | fixed | test_a_wait_the_platform_cannot_take_is_refused_at_parse_time |
| D14 a full disk loses the finding | fixed | test_a_failed_case_write_keeps_the_finding, test_a_failed_findings_write_ends_with_exit_2_and_a_summary |
| D15 orphans of targets and killed workers; SIGTERM in the first seconds; SIGTERM ignored once; SIGTERM swallowed by an import | fixed | test_fault_signals.py::test_no_process_outlives_the_campaign, test_sigterm_in_the_first_seconds_exits_3, test_a_signal_whose_raise_is_swallowed_still_stops_the_campaign, test_a_sigterm_swallowed_before_the_campaign_still_exits_3 |
| D16 unbounded output, ESC/BEL and 1 MB messages copied into reports | fixed | test_target_output_is_captured_and_bounded, test_reports_escape_control_characters_and_markup |
| D17 a correct case slower than a 1-s case timeout on a loaded host reported as a hang | fixed | test_hang_confirmation.py::test_a_case_slower_than_its_timeout_is_judged_by_its_retry, test_a_true_hang_is_one_finding_whose_message_says_both_waits, test_past_the_retry_limit_a_hang_is_reported_unconfirmed, test_without_time_for_a_retry_a_hang_is_reported_unconfirmed |
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import torch

import kernel_oracle
from kernel_oracle.cli import build_parser, main as cli_main
from kernel_oracle.fuzz.campaign import CampaignConfig, CampaignError, run_campaign
from kernel_oracle.fuzz.state import CampaignState
from kernel_oracle.harness.check import Case, Observed, ExpectedOutcome, check_case, judge, odd_output
from kernel_oracle.harness.problem_lora import LoRAProblem
from kernel_oracle.harness.problem_vision import VisionProblem
from kernel_oracle.harness.targets import Target
from kernel_oracle.reference import lora as ref_lora

from oracle_tests.conftest import DEVICE

# segments (3, 2) -> slots (0, 1): a tiny valid LoRA problem of each op
TINY = dict(seg_lens=(3, 2), weight_indices=(0, 1), lora_ranks=(8, 4), scalings=(1.0, 0.5), H=2, qk=16, vd=16,
            C=32, R=8, dtype="float32", seed=1)


def _call(op: str = "step_a_q", **kw):
    return kernel_oracle.materialize(LoRAProblem(op=op, **{**TINY, **kw}))


def _package(root: Path, name: str, body: str) -> str:
    """``root/<name>_fi/<name>.py`` holding ``body``; its spec ``<name>_fi.<name>``."""
    pkg = root / f"{name}_fi"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / f"{name}.py").write_text(body)
    return f"{name}_fi.{name}"


def _campaign(tmp_path, spec: str, op: str = "step_a_q", **kw) -> dict:
    """A tiny campaign of ``spec``: in this process on the suite's device (conftest ``DEVICE``, whose Triton
    mode this process has), or with ``isolate=True`` in a CPU worker."""
    config = dict(target=spec, op=op, budget=6, seed=0, device="cpu" if kw.get("isolate") else DEVICE,
                  out_dir=tmp_path / "out", progress=False, shrink_allowance=2, isolate=False, limits="tiny")
    return run_campaign(CampaignConfig(**{**config, **kw}))


def _findings(out: Path) -> list:
    return [json.loads(line) for line in (out / "findings.jsonl").read_text().splitlines() if line.strip()]


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _wait_for(path: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)
    time.sleep(0.1)


def _fuzz_cmd(*args) -> list:
    return [sys.executable, "-m", "kernel_oracle", "fuzz", "--device", "cpu", "--quiet", *map(str, args)]


def _env(root: Path) -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}


# ---- D01-D03: assert_matches cannot pass a call that does not bind ---------------------------------

def _always_wrong(q, B, bi, K):
    return torch.zeros(1)


_MISUSES = {  # name -> (args, kwargs) of assert_matches("step_a_q", _always_wrong, ...)
    "missing": (lambda c: ((torch.randn(8, 2, 128), torch.randn(2, 512, 16)), {})),  # the issue's own call
    "nothing": (lambda c: ((), {})),
    "misspelled": (lambda c: (c.args[:3], {"full_K": c.args[3]})),
    "extra": (lambda c: ((*c.args, 5), {})),
    "repeated": (lambda c: (c.args, {"q_nope": c.args[0]})),
    "misplaced": (lambda c: ((c.args[0], c.args[1], c.args[3], c.args[2]), {})),
}


@pytest.mark.parametrize("misuse, names", [("missing", "'batch_info'"), ("nothing", "'q_nope'"),
                                           ("misspelled", "'full_K'"), ("extra", "too many positional"),
                                           ("repeated", "'q_nope'"), ("misplaced", "batch_info is a int")])
def test_assert_matches_binds_its_arguments_first(misuse, names):
    args, kwargs = _MISUSES[misuse](_call())
    with pytest.raises(TypeError) as info:
        kernel_oracle.assert_matches("step_a_q", _always_wrong, *args, repro="", **kwargs)
    text = str(info.value)
    assert names in text and "step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head)" in text, text
    if misuse == "misspelled":
        assert "did you mean 'full_K_per_head'?" in text


def test_keywords_bind_to_their_positions_and_absent_ones_stay_absent():
    call = _call()
    names = ("q_nope", "B_buf", "batch_info", "full_K_per_head")
    verdict = kernel_oracle.assert_matches("step_a_q", ref_lora.step_a_q_fwd, **dict(zip(names, call.args)))
    assert verdict.ok
    vision = kernel_oracle.materialize(VisionProblem(lengths=(3, 2), seed=2, path="kwargs"))
    assert "max_seqlen" in vision.kwargs
    without = {k: v for k, v in vision.kwargs.items() if k != "max_seqlen"}
    from kernel_oracle.reference.vision import flashinfer_cudnn_attention

    # max_seqlen absent (not None) is upstream's contract: the reference raises it, so it passes
    assert kernel_oracle.assert_matches("vision", flashinfer_cudnn_attention, *vision.args, **without).ok


def test_an_error_outside_the_contract_table_needs_its_text():
    """Batch info without weight_indices: the oracle's own AttributeError; a kernel raising another
    AttributeError is wrong, the same one passes (assert_matches and a campaign's judge alike)."""
    call = _call()
    bi = types.SimpleNamespace(**{k: v for k, v in vars(call.args[2]).items() if k != "weight_indices"})
    args = (call.args[0], call.args[1], bi, call.args[3])

    def other_text(q, B, b, K):
        raise AttributeError("no weights")

    with pytest.raises(AssertionError, match=r"raised AttributeError\('no weights'\); expected AttributeError"):
        kernel_oracle.assert_matches("step_a_q", other_text, *args, repro="")
    assert kernel_oracle.assert_matches("step_a_q", ref_lora.step_a_q_fwd, *args).ok
    case = Case(LoRAProblem(op="step_a_q", **TINY))
    expected = ExpectedOutcome("error", "TypeError", "step() missing 1 required positional argument: 'x'")
    wrong = Observed("raise", exc_type="TypeError", message="other() takes 2 positional arguments")
    assert not judge(case, expected, wrong).ok
    same = Observed("raise", exc_type="TypeError", message=expected.message)
    assert judge(case, expected, same).ok
    # a target without our validation (upstream's own Python errors): the type is its contract there
    assert judge(case, expected, wrong, exact_errors=False).ok
    other_type = Observed("raise", exc_type="ValueError", message=expected.message)
    assert not judge(case, expected, other_type, exact_errors=False).ok


# ---- D04: global settings ----------------------------------------------------------------------------

_POISON = """import torch
from kernel_oracle.reference import lora as ref

torch.backends.cudnn.benchmark = True  # at import: caught at the first case

def step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head):
    torch.set_float32_matmul_precision("medium")
    return ref.step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head)
"""


def test_global_settings_are_restored_and_reported_once_per_setting(tmp_path, monkeypatch):
    spec = _package(tmp_path, "poison", _POISON)
    monkeypatch.syspath_prepend(str(tmp_path))
    rec = _campaign(tmp_path, spec, isolate=True, budget=5)
    by_cause = {f["bucket"]["cause"]: f for f in rec["findings"]}
    assert set(by_cause) == {"global state changed: torch.get_float32_matmul_precision()",
                             "global state changed: torch.backends.cudnn.benchmark"}, list(by_cause)
    matmul = by_cause["global state changed: torch.get_float32_matmul_precision()"]
    assert matmul["kind"] == "contract"
    assert matmul["message"].startswith("global state changed: torch.get_float32_matmul_precision() 'highest' -> "
                                        "'medium'; torch.backends.cuda.matmul.allow_tf32 False -> True")
    assert matmul["count"] == rec["campaign"]["executed"]  # every call changed it: one finding, counted
    assert "outside a call" in by_cause["global state changed: torch.backends.cudnn.benchmark"]["message"]
    assert sum(g["passes"] for g in rec["groups"]) == rec["campaign"]["executed"]  # the verdicts themselves pass


def _sloppy(q, B, bi, K):
    """The reference off by 2e-6 relative: fails the fp32 rule by a factor of about 2 to 3."""
    return ref_lora.step_a_q_fwd(q, B, bi, K) * (1 + 2e-6)


def _poisoned_sloppy(q, B, bi, K):
    torch.set_float32_matmul_precision("medium")
    return _sloppy(q, B, bi, K)


def test_the_poison_changes_no_verdict():
    a, b = torch.randn(64, 128), torch.randn(128, 32)
    torch.set_float32_matmul_precision("medium")
    try:
        widened = not torch.equal(a @ b, (a.double() @ b.double()).float()) and \
            ((a @ b).double() - a.double() @ b.double()).abs().max() > 1e-3
    finally:
        torch.set_float32_matmul_precision("highest")
    if not widened:
        pytest.skip("this CPU computes fp32 matmuls the same under 'medium' precision (no bf16 path): the poison "
                    "has nothing to widen here")
    cases = [Case(LoRAProblem(op="step_a_q", **{**TINY, "seg_lens": (3 + i, 2), "seed": i})) for i in range(6)]
    runs = []
    for fn in (_sloppy, _poisoned_sloppy):
        target = Target("sloppy", {"step_a_q": fn}, precision="ieee", strict=True)
        runs.append([(v.ok, v.ratio) for v in (check_case(target, c) for c in cases)])
        assert torch.get_float32_matmul_precision() == "highest"
    assert runs[0] == runs[1] and not any(ok for ok, _ in runs[0])


def test_assert_matches_fails_a_kernel_that_changes_global_state():
    call = _call()

    def seeds(q, B, bi, K):
        torch.manual_seed(1234)
        torch.use_deterministic_algorithms(True, warn_only=True)
        return ref_lora.step_a_q_fwd(q, B, bi, K)

    rng = torch.get_rng_state()
    with pytest.raises(AssertionError, match=r"global state changed: .*torch.are_deterministic_algorithms_enabled"):
        kernel_oracle.assert_matches("step_a_q", seeds, *call.args, repro="")
    assert torch.equal(torch.get_rng_state(), rng) and not torch.are_deterministic_algorithms_enabled()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA's current stream and generator need a CUDA device")
def test_a_cuda_stream_and_generator_changed_by_a_kernel_are_restored():
    call = kernel_oracle.materialize(LoRAProblem(op="step_a_q", **TINY), "cuda")
    stream, rng = torch.cuda.current_stream(), torch.cuda.get_rng_state()

    def switches(q, B, bi, K):
        torch.cuda.set_stream(torch.cuda.Stream())
        torch.cuda.manual_seed(99)
        return ref_lora.step_a_q_fwd(q, B, bi, K)

    with pytest.raises(AssertionError, match=r"global state changed: torch.cuda.current_stream\(\)"):
        kernel_oracle.assert_matches("step_a_q", switches, *call.args, repro="")
    assert torch.cuda.current_stream() == stream and torch.equal(torch.cuda.get_rng_state(), rng)


# ---- D08: inputs are read-only -----------------------------------------------------------------------

def _writes(what: str):
    def fn(q, B, bi, K):
        out = ref_lora.step_a_q_fwd(q, B, bi, K)
        if what == "q_nope":
            q[2, 1, 3] = 7.0
        elif what == "seg_indptr":
            bi.seg_indptr[1] += 1
        else:
            bi.max_len = 0
        return out
    return fn


@pytest.mark.parametrize("what, line", [
    ("q_nope", "wrote its read-only input q_nope: first changed index (2, 1, 3)"),
    ("seg_indptr", "wrote its read-only input batch_info.seg_indptr: first changed index (1,): 3 -> 4"),
    ("max_len", "wrote its read-only input batch_info.max_len: 3 -> 0"),
])
def test_a_target_that_writes_its_inputs_is_a_finding(what, line):
    call = _call()
    with pytest.raises(AssertionError, match="Finding: contract") as info:
        kernel_oracle.assert_matches("step_a_q", _writes(what), *call.args, repro="")
    assert line in str(info.value)


def test_an_in_place_step_may_write_only_its_output():
    call = _call("step_b_q")

    def also_scales(x, A, bi, base):
        ref_lora.step_b_q_fwd(x, A, bi, base)
        bi.scalings.mul_(2)
        return base

    assert kernel_oracle.assert_matches("step_b_q", ref_lora.step_b_q_fwd, *call.args).ok
    with pytest.raises(AssertionError, match=r"wrote its read-only input batch_info.scalings: first changed index"):
        kernel_oracle.assert_matches("step_b_q", also_scales, *call.args, repro="")


def test_a_campaign_finds_input_writes(tmp_path, monkeypatch):
    spec = _package(tmp_path, "clobber", "from kernel_oracle.reference import lora as ref\n\n"
                                         "def step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head):\n"
                                         "    out = ref.step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head)\n"
                                         "    batch_info.weight_indices.fill_(0)\n    B_buf.zero_()\n    return out\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    rec = _campaign(tmp_path, spec)
    (f,) = rec["findings"]
    assert f["kind"] == "contract" and f["bucket"]["cause"] == "wrote its input B_buf"
    assert f["message"].startswith("wrote its read-only input B_buf: first changed index")


# ---- D09: odd outputs ------------------------------------------------------------------------------

class _Sub(torch.Tensor):
    pass


_ODD = {
    "meta": (lambda o: o.to("meta"), "returned a meta tensor (a shape without data)"),
    "nested": (lambda o: torch.nested.nested_tensor([o[0], o[1]]), "returned a nested tensor"),
    "sparse": (lambda o: o.to_sparse(), "returned a tensor of layout torch.sparse_coo"),
    "subclass": (lambda o: o.as_subclass(_Sub), "a torch.Tensor subclass, not a plain tensor"),
    "tuple": (lambda o: (o,), "returned tuple, not a tensor"),
}


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")
@pytest.mark.parametrize("odd", sorted(_ODD))
def test_odd_outputs_fail_assert_matches(odd):
    make, reason = _ODD[odd]
    call = _call()
    with pytest.raises(AssertionError, match="Finding: mismatch") as info:
        kernel_oracle.assert_matches("step_a_q", lambda *a: make(ref_lora.step_a_q_fwd(*a)), *call.args, repro="")
    assert reason in str(info.value)


def test_odd_output_on_another_device():
    assert odd_output(torch.zeros(2), torch.zeros(2, device="meta")) == "returned a tensor on cpu; its inputs are on meta"
    assert odd_output(torch.zeros(2), torch.zeros(2)) is None


def test_odd_outputs_are_findings_and_the_campaign_goes_on(tmp_path, monkeypatch):
    body = ("import torch\nfrom kernel_oracle.reference import lora as ref\n\n"
            "def step_a_q_fwd(*a):\n    return ref.step_a_q_fwd(*a).to('meta')\n\n"
            "def step_a_v_fwd(*a):\n    return ref.step_a_v_fwd(*a).to_sparse()\n")
    spec = _package(tmp_path, "odd", body)
    monkeypatch.syspath_prepend(str(tmp_path))
    rec = _campaign(tmp_path, spec, op="lora", budget=10)
    assert rec["summary"]["status"] == "finished" and rec["campaign"]["executed"] >= 5
    causes = {f["bucket"]["cause"] for f in rec["findings"]}
    assert {"target returned a meta tensor (a shape without data)",
            "target returned a tensor of layout torch.sparse_coo, not a strided one"} <= causes, causes
    assert {f["kind"] for f in rec["findings"]} == {"mismatch"}


def test_meta_inputs_are_a_usage_error():
    call = _call()
    args = tuple(a.to("meta") if isinstance(a, torch.Tensor) else a for a in call.args)
    with pytest.raises(ValueError, match="q_nope is a meta tensor"):
        kernel_oracle.assert_matches("step_a_q", ref_lora.step_a_q_fwd, *args)


def test_a_wrong_output_shape_is_a_mismatch():
    call = _call()
    with pytest.raises(AssertionError, match=r"(?s)shape.*Finding: mismatch"):
        kernel_oracle.assert_matches("step_a_q", lambda *a: ref_lora.step_a_q_fwd(*a)[:, :1], *call.args, repro="")


# ---- D05-D07: repro files are data, written new ----------------------------------------------------

_HOSTILE = '"""\nimport pathlib; pathlib.Path(__file__).with_name("PWNED").touch()\nr"""'


def _cli(capsys, *argv) -> tuple:
    try:
        rc = cli_main([str(a) for a in argv])
    except SystemExit as exc:
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


def _case_file(tmp_path) -> Path:
    from kernel_oracle.harness.check import prepared_call

    case = Case(LoRAProblem(op="step_a_q", **TINY))
    call = prepared_call(case, "cpu")
    path = tmp_path / "F0001-contract-step_a_q-float32.pt"
    torch.save({"case": case.to_dict(), "entry": call.entry, "args": call.args, "kwargs": call.kwargs,
                "inplace": call.inplace, "target": "reference", "device": "cpu"}, path)
    return path


def test_the_standalone_script_holds_no_data(tmp_path, monkeypatch):
    """A spec with ``\"\"\"`` is refused as a spec; an entry point whose name and error text carry
    ``\"\"\"`` and code reach the JSON beside the script only, and running the script runs none of it."""
    from kernel_oracle.harness.targets import TargetError, TargetSpec
    from kernel_oracle.jobs.repro import reproduce
    from kernel_oracle.jobs.repro_script import emit_script

    with pytest.raises(TargetError):
        TargetSpec.parse('reference@x="""')
    spec = _package(tmp_path, "hostile", f"def step_a_q_fwd(*a):\n    raise RuntimeError({_HOSTILE!r})\n\n"
                                         f"step_a_q_fwd.__qualname__ = {_HOSTILE!r}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    rep = reproduce(target=spec, path=str(_case_file(tmp_path)), device=DEVICE, script=True)
    script, _ = emit_script(tmp_path / "s", name="case", case=rep.case, call=rep.call, expected=rep.expected,
                            target=rep.target, target_spec=spec, verdict=rep.verdict)
    text = script.read_text()
    assert "pathlib.Path(__file__)" not in text and "step_a_q" not in text and "hostile" not in text
    data = json.loads((tmp_path / "s" / "case.json").read_text())
    assert data["meta"]["op"] == "step_a_q" and data["target"] == "hostile_fi.hostile"
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=_env(tmp_path))
    assert proc.returncode == 1 and "REPRODUCED" in proc.stdout, proc.stdout + proc.stderr
    assert not (tmp_path / "s" / "PWNED").exists(), "the script ran code it was given as data"


def test_emit_script_refuses_existing_files_and_symlinks(tmp_path, capsys):
    pt = _case_file(tmp_path)
    out = tmp_path / "s"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (out / f"{pt.stem}.py").symlink_to(victim)
    argv = ("repro", pt, "--targets", "reference", "--device", DEVICE, "--emit-script", out)
    rc, stdout, err = _cli(capsys, *argv)
    assert rc == 2 and err.count("\n") == 1 and "exists (a symlink); pass --force" in err, err
    assert victim.read_text() == "keep me" and not (out / f"{pt.stem}.tensors.pt").exists()
    rc, stdout, err = _cli(capsys, *argv, "--force")
    assert rc == 0, err
    assert victim.read_text() == "keep me" and not (out / f"{pt.stem}.py").is_symlink()
    rc, stdout, err = _cli(capsys, *argv)  # the files it wrote are not replaced either
    assert rc == 2 and "exists (a file)" in err
    assert _cli(capsys, "repro", pt, "--targets", "reference", "--force")[0] == 2


def test_repros_go_to_a_private_directory_and_never_through_a_symlink(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.delenv("KERNEL_ORACLE_REPRO_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(kernel_oracle.api, "_private_repro_dir", None)
    (tmp_path / "kernel-oracle-repro").symlink_to(tmp_path / "elsewhere")  # the old fixed name, planted
    call = _call()
    with pytest.raises(AssertionError) as info:
        kernel_oracle.assert_matches("step_a_q", _sloppy, *call.args)
    path = Path(str(info.value).split("replay('")[1].split("'")[0])
    assert path.parent.name.startswith("kernel-oracle-repro-") and path.parent.parent == tmp_path
    assert path.parent.stat().st_mode & 0o777 == 0o700 and not (tmp_path / "elsewhere").exists()
    # a chosen directory: a symlink planted at the file's name is refused, not written through
    chosen = tmp_path / "chosen"
    chosen.mkdir()
    monkeypatch.setenv("KERNEL_ORACLE_REPRO_DIR", str(chosen))
    (chosen / path.name).symlink_to(tmp_path / "target.pt")
    with pytest.raises(AssertionError, match=r"the inputs could not be saved: .* exists and is not this repro"):
        kernel_oracle.assert_matches("step_a_q", _sloppy, *call.args)
    assert not (tmp_path / "target.pt").exists()


# ---- D10-D14: state files, options, a full disk --------------------------------------------------------

def _raising(root: Path) -> str:
    return _package(root, "raising", "def step_a_q_fwd(*args):\n    raise RuntimeError('bad row')\n")


@pytest.mark.parametrize("field, value", [("elapsed_s", float("nan")), ("elapsed_s", -5.0), ("executed", -3),
                                          ("runs", 1.5), ("elapsed_s", 1e300)])
def test_state_json_with_bad_numbers_is_rebuilt(tmp_path, monkeypatch, field, value):
    spec = _raising(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    _campaign(tmp_path, spec, budget=3)
    path = tmp_path / "out" / "state.json"
    raw = json.loads(path.read_text())
    raw[field] = value
    path.write_text(json.dumps(raw))  # NaN as JSON's NaN, which Python reads back
    state = CampaignState.open(tmp_path / "out", target=spec, op="step_a_q")
    try:  # checked before a campaign trusts it (a NaN elapsed_s would never let --time end)
        assert state.elapsed_s == 0.0 and state.executed == 1, (state.elapsed_s, state.executed)
    finally:
        state.close()
    rec = _campaign(tmp_path, spec, budget=None, time_s=2.0)
    # its clock ran from 0, not from the unreadable number: the 2 s and one last case
    assert rec["campaign"]["elapsed_s"] < 2.0 + 10.0 and rec["summary"]["status"] == "finished"
    assert any(n.startswith("state.json was unreadable (ValueError") and field in n for n in rec["notes"]), rec["notes"]
    assert rec["campaign"]["elapsed_s"] >= 0


@pytest.mark.parametrize("line", ['{"id": "F0009-contract-step_a_q-float32", "kind": "contract"}',
                                  '{"id": 7, "target": 1, "op": "x", "kind": "mismatch", "message": "", "repro": ""}',
                                  b"\x00\xff\xfe binary \x1b[2J garbage"], ids=["lacks-fields", "wrong-types", "binary"])
def test_a_findings_line_that_is_no_finding_is_set_aside(tmp_path, monkeypatch, line):
    spec = _raising(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    _campaign(tmp_path, spec, budget=3)
    out = tmp_path / "out"
    (first,) = _findings(out)
    with open(out / "findings.jsonl", "ab") as fh:
        fh.write((line if isinstance(line, bytes) else line.encode()) + b"\n")
    rec = _campaign(tmp_path, spec, budget=5)  # no SchemaError, no traceback: the campaign goes on
    assert [f["id"] for f in rec["findings"]] == [first["id"]] and _findings(out) == [first]
    assert "# set aside by kernel-oracle: unreadable line 2" in (out / "findings.jsonl.torn").read_text(errors="replace")
    assert any("set aside in findings.jsonl.torn" in n for n in rec["notes"])


@pytest.mark.parametrize("name", ["state.json", "findings.jsonl", "summary.json", "cases"])
def test_a_directory_where_a_state_file_belongs_is_exit_2(tmp_path, capsys, name):
    out = tmp_path / "out"
    out.mkdir()
    if name == "cases":
        (out / name).write_text("")
    else:
        (out / name).mkdir()
    rc, stdout, err = _cli(capsys, "fuzz", "--targets", "reference", "--op", "step_a_q", "--cases", 1, "--device",
                           DEVICE, "--no-isolate", "--quiet", "--out", out)
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{name} is" in err and "move it away or pass another --out" in err


@pytest.mark.parametrize("option, value, ok", [("--case-timeout", "1e10", False), ("--case-timeout", "3e6", False),
                                               ("--warm-up", "1e10", False), ("--case-timeout", "2e6", True)])
def test_a_wait_the_platform_cannot_take_is_refused_at_parse_time(capsys, option, value, ok):
    argv = ["fuzz", "--targets", "reference", "--op", "lora", "--out", "never", option, value]
    if ok:
        assert build_parser().parse_args(argv).case_timeout_s == float(value)
        return
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "the longest wait this platform takes" in err and err.count("\n") == 1


def _failing_save(original):
    def save(obj, f, *args, **kwargs):
        if "cases" in str(f):
            raise OSError(28, "No space left on device")
        return original(obj, f, *args, **kwargs)
    return save


def test_a_failed_case_write_keeps_the_finding(tmp_path, monkeypatch, capsys):
    spec = _raising(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(torch, "save", _failing_save(torch.save))
    rec = _campaign(tmp_path, spec, budget=4)
    assert rec["summary"]["status"] == "finished" and rec["campaign"]["executed"] >= 2
    (f,) = _findings(tmp_path / "out")
    assert f["note"].startswith("its tensors were not saved (cases/F0001-contract-step_a_q.pt not written: "
                                "OSError: [Errno 28] No space left on device)")
    assert not list((tmp_path / "out" / "cases").glob("*.pt"))
    argv = shlex.split(f["repro"])
    assert argv[:3] == ["kernel-oracle", "repro", "--case-json"]
    monkeypatch.undo()
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _cli(capsys, *argv[1:], "--device", DEVICE)[0] == 1  # the line reproduces it from the seed


def test_a_failed_findings_write_ends_with_exit_2_and_a_summary(tmp_path, monkeypatch):
    spec = _raising(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))

    def full(fd):  # the disk fills once the campaign has started (its identity file written)
        if (tmp_path / "out" / "identity.json").exists():
            raise OSError(28, "No space left on device")
        return real_fsync(fd)

    real_fsync = os.fsync

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(CampaignError, match=r"stopped: .*: cannot (write|append finding F0001) \(No space left"):
        _campaign(tmp_path, spec, budget=4)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["summary"]["status"] == "incomplete" and any("No space left" in n for n in summary["notes"])


# ---- D16: output, control characters, long messages ------------------------------------------------------

_LOUD = """import os, sys

def step_a_q_fwd(*args):
    print("x" * 200_000)
    sys.stdout.flush()
    os.write(2, b"\\x1b[2J C-level \\x07\\n" * 2000)
    raise RuntimeError("\\x1b]0;owned\\x07\\u202e" + "m" * 1_000_000)
"""


def test_target_output_is_captured_and_bounded(tmp_path, monkeypatch, capfd):
    import kernel_oracle.fuzz.worker as W

    monkeypatch.setattr(W, "OUTPUT_LIMIT", 65536)
    spec = _package(tmp_path, "loud", _LOUD)
    monkeypatch.syspath_prepend(str(tmp_path))
    rec = _campaign(tmp_path, spec, isolate=True, budget=3)
    out, err = capfd.readouterr()
    assert "xxxxxxxxxx" not in out + err and "C-level" not in out + err  # nothing reached this process's fds
    log = (tmp_path / "out" / "target-output.log").read_bytes()
    note = b"[kernel-oracle: the target's output past 65536 bytes is not kept]"
    assert len(log) <= 65536 + len(note) + 2 and note in log and log.startswith(b"xxxx")
    assert any("bytes past the 65536 kept in" in n for n in rec["notes"]), rec["notes"]
    (f,) = rec["findings"]
    assert len(f["message"]) < 70_000 and "[cut by kernel-oracle: 1000011 characters, the first 65536 kept]" in \
        f["message"]
    assert not any(c in f["message"] for c in "\x1b\x07\u202e") and "\\x1b]0;owned\\x07\\u202e" in f["message"]


def test_reports_escape_control_characters_and_markup(tmp_path, capsys):
    from kernel_oracle.harness.schema import add_finding, new_record, save

    hostile = "\x1b[31mred\x07 \u202eevil <script>alert(1)</script>" + "y" * 100_000
    rec = new_record("campaign")
    add_finding(rec, {"id": "F0001-mismatch-step_a_q-float32", "target": "t\x1b[0m", "op": "step_a_q",
                      "dtype": "float32", "shape_class": "ragged", "kind": "mismatch", "message": hostile,
                      "figures": {}, "repro": "kernel-oracle repro x.pt --targets t", "problem": None})
    rec["notes"] = ["note \x1b[2J\x00 end"]
    src = save(rec, tmp_path / "hostile.json")
    rc, _, err = _cli(capsys, "report", src, "--out", tmp_path / "r", "--no-plots")
    assert rc == 0, err
    for page in ("hostile.md", "hostile.html"):
        text = (tmp_path / "r" / page).read_text()
        assert not any(c in text for c in "\x1b\x07\x00\u202e"), page
        assert "\\x1b[31mred\\x07 \\u202eevil" in text, page
        assert page.endswith(".md") or "<script>alert" not in text  # Markdown: H15's test checks its code spans
        assert f"[cut by kernel-oracle: {len(hostile)} characters, the first 65536 kept]" in text
        assert "y" * 70_000 not in text


# ---- held: crashes, allocations, planted files, shell metacharacters ----------------------------------------------

_CRASHY = """import ctypes, torch

def step_a_q_fwd(*args):
    ctypes.string_at(0)  # SIGSEGV

def step_a_v_fwd(*args):
    return torch.empty(2**62, dtype=torch.uint8)  # a huge allocation: the allocator refuses it
"""


def test_a_segfault_and_a_huge_allocation_are_findings(tmp_path, monkeypatch):
    from kernel_oracle.fuzz.worker import Worker

    spec = _package(tmp_path, "crashy", _CRASHY)
    monkeypatch.syspath_prepend(str(tmp_path))
    with Worker("cpu", case_timeout_s=60) as worker:
        worker.describe(spec)
        crash = worker.check(spec, Case(LoRAProblem(op="step_a_q", **TINY)).to_dict())
        big = worker.check(spec, Case(LoRAProblem(op="step_a_v", **TINY)).to_dict())
    assert crash.kind == "crash" and "SIGSEGV" in crash.message, crash
    assert not big.ok and big.kind == "contract" and "RuntimeError" in big.message, big
    assert worker.restarts == 1


def test_a_planted_case_file_in_a_campaign_runs_nothing(tmp_path, capsys):
    class RunsShell:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    out = tmp_path / "out"
    (out / "cases").mkdir(parents=True)
    torch.save({"case": {}, "entry": "step_a_q_fwd", "args": (RunsShell(),), "kwargs": {}},
               out / "cases" / "F0001-mismatch-step_a_q-float32.pt")
    rc, _, err = _cli(capsys, "repro", out / "cases" / "F0001-mismatch-step_a_q-float32.pt", "--targets", "reference",
                      "--device", DEVICE)
    assert rc == 2 and "was refused" in err and not (tmp_path / "pwned").exists()


def test_repro_lines_quote_shell_metacharacters(tmp_path, monkeypatch):
    spec = _raising(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "o u;$(touch PWN)`touch PWN2`'q\""
    rec = run_campaign(CampaignConfig(target=spec, op="step_a_q", budget=2, device=DEVICE, out_dir=out, progress=False,
                                      shrink_allowance=0, isolate=False, limits="tiny"))
    (f,) = rec["findings"]
    printed = subprocess.run(["sh", "-c", f["repro"].replace("kernel-oracle repro", "printf '%s\\n'", 1)],
                             capture_output=True, text=True, cwd=tmp_path, check=True).stdout.splitlines()
    assert printed[0] == str(out / "cases" / f"{f['id']}.pt") and printed[1:] == ["--targets", spec]
    assert not list(tmp_path.glob("PWN*"))
