"""Fault injection for the commands that read files and write reports: repro, report, compare,
mutants, selfcheck.

Every bad input a user or a CI artifact can hand these commands -- a case file that would run code,
a truncated or random one, an unwritable output path, a NaN threshold -- must end in exit code 2
and one line on stderr (docs/semantics.md#exit-codes), never a traceback, never an "OK" followed by a
failure.  Also here: a case file written by a real campaign reads back, its standalone script
(``repro --emit-script``) runs without kernel-oracle, and the Markdown report shows hostile text
verbatim instead of interpreting it.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

from oracle_tests.conftest import DEVICE
import torch

from kernel_oracle.cli import main as cli_main
from kernel_oracle.harness.check import Case, prepared_call
from kernel_oracle.harness.mutations import Mutation
from kernel_oracle.harness.problem_lora import LoRAProblem
from kernel_oracle.harness.problem_vision import VisionProblem
from kernel_oracle.harness.schema import add_finding, add_group, new_record, save

HAS_CUDA = torch.cuda.is_available()
TORCH_SITE = str(Path(torch.__file__).resolve().parents[1])


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``kernel-oracle argv`` in this process; argparse's own
    ``SystemExit`` counts as the exit code."""
    try:
        rc = cli_main(list(argv))
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 2
    out, err = capsys.readouterr()
    return rc, out, err


def _usage_error(rc: int, out: str, err: str, *, contains: str = "") -> None:
    """Exit 2, exactly one line on stderr, no traceback, nothing that looks like a verdict on stdout."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2, f"exit code {rc}; stderr: {err!r}"
    assert len(lines) == 1, f"expected one line on stderr, got {lines!r}"
    assert "Traceback" not in err
    assert not re.search(r"^(OK|PASS|REPRODUCED)", out, re.M), f"stdout claims a verdict: {out!r}"
    if contains:
        assert contains in lines[0], lines[0]


# ---- case files ------------------------------------------------------------------------------------

LORA_CASE = Case(LoRAProblem(op="step_a_v", seg_lens=(3, 4), weight_indices=(0, 1), lora_ranks=(16, 8),
                             scalings=(1.0, 0.5), H=2, C=32, R=16, seed=5))


def _save_case(path: Path, case: Case, device: str = "cpu") -> Path:
    """A case file with the payload campaigns write (fuzz/campaign.py ``_record``)."""
    call = prepared_call(case, device)
    torch.save({"case": case.to_dict(), "entry": call.entry, "args": call.args, "kwargs": call.kwargs,
                "inplace": call.inplace, "target": "reference", "device": device}, path)
    return path


class _RunsShell:
    """Unpickling this calls ``os.system`` (what a malicious case file would do)."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol:UserWarning")  # torch notes the raw pickle's protocol
@pytest.mark.parametrize("form", ["torch-zip", "raw-pickle", "inside-case"])
def test_malicious_case_file_runs_nothing(tmp_path, capsys, form):
    marker = tmp_path / "pwned"
    evil = _RunsShell(f"touch {marker}")
    path = tmp_path / "F0001-mismatch-step_a_v-float32.pt"
    if form == "torch-zip":
        torch.save({"payload": evil}, path)
    elif form == "raw-pickle":
        path.write_bytes(pickle.dumps(evil))
    else:  # a genuine case whose kwargs smuggle the object in
        call = prepared_call(LORA_CASE, "cpu")
        torch.save({"case": LORA_CASE.to_dict(), "entry": call.entry, "args": call.args,
                    "kwargs": {"x": evil}, "inplace": None}, path)
    assert not marker.exists()
    rc, out, err = _cli(capsys, "repro", str(path), "--targets", "reference", "--device", DEVICE)
    _usage_error(rc, out, err, contains="was refused")
    assert not marker.exists(), "unpickling the case file ran os.system"


@pytest.mark.parametrize("damage", ["truncated", "random", "empty", "json-in-pt", "wrong-shape"])
def test_damaged_case_file_is_refused(tmp_path, capsys, damage):
    good = _save_case(tmp_path / "good.pt", LORA_CASE).read_bytes()
    path = tmp_path / "F0002.pt"
    if damage == "truncated":
        path.write_bytes(good[: len(good) // 2])
    elif damage == "random":
        path.write_bytes(bytes(torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(1),
                                             dtype=torch.uint8).tolist()))
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "json-in-pt":
        path.write_text(json.dumps(LORA_CASE.to_dict()))
    else:  # a valid torch file that is not a case
        torch.save({"weights": torch.zeros(3)}, path)
    rc, out, err = _cli(capsys, "repro", str(path), "--targets", "reference", "--device", DEVICE)
    _usage_error(rc, out, err, contains=str(path))


def test_case_file_as_campaigns_write_it_reproduces(tmp_path, capsys):
    path = _save_case(tmp_path / "F0003.pt", LORA_CASE)
    rc, out, err = _cli(capsys, "repro", str(path), "--targets", "reference", "--device", DEVICE)
    assert rc == 0, err
    assert "PASS on reference" in out


@pytest.mark.parametrize("argv, contains", [
    (["repro", "--targets", "reference"], "pass DIR/cases/<id>.pt or --case-json JSON"),
    (["repro", "x.pt", "--case-json", "{}", "--targets", "reference"], "not both"),
    (["repro", "--case-json", "{not json", "--targets", "reference"], "--case-json is not JSON"),
    (["repro", "--case-json", '{"problem": {"family": "lora", "op": "step_a_v", "bogus": 1}}', "--targets", "reference"],
     "not a valid case"),
    (["repro", "--case-json", json.dumps(LORA_CASE.to_dict()), "--targets", "no_such_target"], "no_such_target"),
    (["repro", "--case-json", json.dumps(LORA_CASE.to_dict()), "--targets", "reference", "--device", "tpu"], "--device"),
    (["repro", "/nonexistent/F1.pt", "--targets", "reference"], "no such case file"),
    (["repro", "/nonexistent/F1.json", "--targets", "reference"], "no such case file"),
    (["repro"], "--targets"),
], ids=["no-case", "both", "bad-json", "bad-case", "unknown-target", "bad-device", "missing-pt", "missing-json",
        "no-target"])
def test_repro_usage_errors(capsys, argv, contains):
    rc, out, err = _cli(capsys, *argv)
    _usage_error(rc, out, err, contains=contains)


@pytest.mark.skipif(HAS_CUDA, reason="checks the refusal of --device cuda on a machine without a GPU")
def test_repro_cuda_without_gpu(tmp_path, capsys):
    path = _save_case(tmp_path / "F0004.pt", LORA_CASE)
    rc, out, err = _cli(capsys, "repro", str(path), "--targets", "reference", "--device", "cuda")
    _usage_error(rc, out, err, contains="--device cpu")


# ---- a real campaign's finding, and its standalone script ---------------------------------------------

_TARGET_SOURCE = '''
"""A pure-torch step_a_v_fwd (out[t, h, :r] = x[t, h] @ A[w, :r].T) for the standalone-repro tests.
{what}"""
import torch


def step_a_v_fwd(attn_output, A_buf, batch_info):
    S, H, C = attn_output.shape
    R = A_buf.shape[1]
    out = torch.zeros(S, H, R, dtype=attn_output.dtype, device=attn_output.device)
    n = int(batch_info.num_segments or batch_info.bs)
    ind = batch_info.seg_indptr.tolist()
    perm = batch_info.permutation
    for b in range(n - {skip}):
        w = int(batch_info.weight_indices[b])
        r = min(R, int(batch_info.lora_ranks[w]))
        for i in range(ind[b], ind[b + 1]):
            t = int(perm[i]) if perm is not None else i
            out[t, :, :r] = (attn_output[t].double() @ A_buf[w, :r].double().T).to(out.dtype)
    return out
'''


def target_package(tmp_path, monkeypatch, package: str, *, good: bool = True) -> Path:
    """``tmp_path/targets/<package>`` with ``buggy.py`` (last segment skipped) and, with ``good``, a
    correct ``good.py`` step_a_v, importable here and in spawned workers; returns the package folder."""
    root = tmp_path / "targets"
    pkg = root / package
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "buggy.py").write_text(_TARGET_SOURCE.format(what="BUG: the last segment is skipped.", skip=1))
    if good:
        (pkg / "good.py").write_text(_TARGET_SOURCE.format(what="Correct.", skip=0))
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    return pkg


@pytest.fixture
def user_targets(tmp_path, monkeypatch):
    """A package ``ko_fault_targets`` with a buggy (last segment skipped) and a correct step_a_v."""
    return target_package(tmp_path, monkeypatch, "ko_fault_targets").parent


def _standalone(script: Path, target_root: Path, *extra: str) -> subprocess.CompletedProcess:
    """Run ``script`` with torch and the target package importable, and kernel-oracle not: ``-S``
    keeps site-packages' .pth files (the editable install) out, PYTHONPATH holds torch's site dir
    and the target's folder only."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(script.parent),
           "PYTHONPATH": os.pathsep.join([TORCH_SITE, str(target_root)])}
    probe = subprocess.run([sys.executable, "-S", "-c", "import kernel_oracle"], env=env, cwd=script.parent,
                           capture_output=True, text=True, timeout=120)
    assert probe.returncode != 0 and "No module named 'kernel_oracle'" in probe.stderr, (
        "the standalone environment can import kernel_oracle, so it proves nothing")
    return subprocess.run([sys.executable, "-S", str(script), *extra], env=env, cwd=script.parent,
                          capture_output=True, text=True, timeout=300)


def test_campaign_finding_reproduces_and_runs_standalone(tmp_path, capsys, user_targets):
    from kernel_oracle.fuzz.campaign import CampaignConfig, run_campaign

    out = tmp_path / "campaign"
    run_campaign(CampaignConfig(target="ko_fault_targets.buggy", op="step_a_v", budget=12, seed=0, device=DEVICE,
                                out_dir=out, progress=False, isolate=False, limits="tiny"))
    findings = [json.loads(line) for line in (out / "findings.jsonl").read_text().splitlines() if line.strip()]
    mismatch = next(f for f in findings if f["kind"] == "mismatch")
    pt = next((out / "cases").glob(f"{mismatch['id']}*.pt"))

    # the file the campaign wrote reads back (weights-only) and reproduces
    rc, stdout, err = _cli(capsys, "repro", str(pt), "--targets", "ko_fault_targets.buggy", "--device", DEVICE,
                           "--emit-script", str(tmp_path / "script"))
    assert rc == 1, err
    assert "REPRODUCED [mismatch]" in stdout
    script = tmp_path / "script" / f"{pt.stem}.py"
    assert script.is_file() and (tmp_path / "script" / f"{pt.stem}.tensors.pt").is_file()
    assert "kernel_oracle" not in re.sub(r'""".*?"""', "", script.read_text(), flags=re.S).split("TARGET =")[0]

    proc = _standalone(script, user_targets)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "REPRODUCED: not close" in proc.stdout


def test_standalone_script_of_a_clean_case(tmp_path, capsys, user_targets):
    """A clean case: the script passes on the correct kernel and, with the float64 expectation and the
    tolerance inlined, still catches the buggy one (``--targets``)."""
    path = _save_case(tmp_path / "clean.pt", LORA_CASE)
    rc, stdout, err = _cli(capsys, "repro", str(path), "--targets", "ko_fault_targets.good", "--device", DEVICE,
                           "--emit-script", str(tmp_path / "s"))
    assert rc == 0, err
    proc = _standalone(tmp_path / "s" / "clean.py", user_targets)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASS: within the tolerance" in proc.stdout
    proc = _standalone(tmp_path / "s" / "clean.py", user_targets, "--targets", "ko_fault_targets.buggy")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "REPRODUCED: not close" in proc.stdout


def test_standalone_script_of_an_error_contract(tmp_path, capsys, user_targets):
    """Neither max_len nor seg_lens: upstream's exact ValueError is expected; a kernel that runs anyway
    reproduces the finding in the script too."""
    case = Case(LORA_CASE.problem, Mutation("lora", "drop_max_len_and_seg_lens"))
    path = _save_case(tmp_path / "contract.pt", case)
    rc, stdout, err = _cli(capsys, "repro", str(path), "--targets", "ko_fault_targets.good", "--device", DEVICE,
                           "--emit-script", str(tmp_path / "s"))
    assert rc == 1 and "REPRODUCED [contract]" in stdout, stdout + err
    proc = _standalone(tmp_path / "s" / "contract.py", user_targets)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "no error raised; expected ValueError('LoRA batch_info must provide max_len or seg_lens.')" in proc.stdout


def test_standalone_script_rebuilds_vision_metadata_and_views(tmp_path, capsys):
    """Vision on the metadata path with v a strided view into a qkv buffer: the script rebuilds the
    metadata object and keeps the view's strides (offsets count from each tensor's pointer)."""
    case = Case(VisionProblem(lengths=(3, 5), seed=4, path="metadata", layout="v_strided", v_shift=1))
    path = _save_case(tmp_path / "vision.pt", case)
    rc, stdout, err = _cli(capsys, "repro", str(path), "--targets", "reference", "--device", DEVICE,
                           "--emit-script", str(tmp_path / "s"))
    assert rc == 0, stdout + err
    script = tmp_path / "s" / "vision.py"
    data = json.loads((tmp_path / "s" / "vision.json").read_text())
    assert data["target"] == "kernel_oracle.reference.vision:flashinfer_cudnn_attention"
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tensors = torch.load(tmp_path / "s" / "vision.tensors.pt", weights_only=True)
    v = tensors["arg2"]
    assert v.stride(0) == 3 * v.shape[1] * v.shape[2], "v lost its interleaved-qkv layout"


def test_emit_script_into_an_unwritable_place(tmp_path, capsys):
    path = _save_case(tmp_path / "F5.pt", LORA_CASE)
    rc, out, err = _cli(capsys, "repro", str(path), "--targets", "reference", "--device", DEVICE,
                        "--emit-script", "/proc/x")
    _usage_error(rc, out, err, contains="/proc/x")


# ---- report ------------------------------------------------------------------------------------------

@pytest.fixture
def record(tmp_path) -> Path:
    rec = new_record("campaign")
    add_group(rec, target="t", op="step_a_v", dtype="float32", shape_class="ragged", cases=3, passes=3, ratios=[0.1])
    return save(rec, tmp_path / "r.json")


@pytest.mark.parametrize("make_args, contains", [
    (lambda d, r: [str(r), "--out", "/proc/x"], "/proc/x"),
    (lambda d, r: [str(r), "--out", str(r)], "is a file"),
    (lambda d, r: [str(d / "absent.json")], "no such result file"),
    (lambda d, r: [str(r), "--name", "../escape"], "--name"),
    (lambda d, r: ["/bin/sh"], "not a text file"),
    (lambda d, r: [str(r), "--bogus"], "unrecognized arguments"),
], ids=["proc-out", "out-is-file", "missing", "name-with-path", "binary", "bad-option"])
def test_report_io_and_usage_errors(tmp_path, capsys, record, make_args, contains):
    if not Path("/bin/sh").is_file() and "/bin/sh" in make_args(tmp_path, record):
        pytest.skip("needs a binary file at /bin/sh")
    rc, out, err = _cli(capsys, "report", *make_args(tmp_path, record))
    _usage_error(rc, out, err, contains=contains)


def test_report_of_a_bad_record_is_refused(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "kernel-oracle-result", "version": 1, "groups": [')  # torn JSON
    rc, out, err = _cli(capsys, "report", str(bad))
    _usage_error(rc, out, err, contains="not valid JSON")


# ---- compare -----------------------------------------------------------------------------------------

def test_compare_unwritable_json_prints_no_verdict(tmp_path, capsys, record):
    rc, out, err = _cli(capsys, "compare", str(record), str(record), "--json", "/proc/x/y")
    _usage_error(rc, out, err, contains="/proc/x/y")
    assert out == "", "compare printed a verdict before failing to write --json"


@pytest.mark.parametrize("option", ["--max-ratio-growth", "--ratio-floor", "--max-slowdown"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999", "NaN%"])
def test_compare_refuses_non_finite_thresholds(capsys, record, option, value):
    rc, out, err = _cli(capsys, "compare", str(record), str(record), f"{option}={value}")
    _usage_error(rc, out, err, contains=option)


@pytest.mark.parametrize("which", ["baseline", "current"])
def test_compare_missing_or_torn_file(tmp_path, capsys, record, which):
    torn = tmp_path / "torn.json"
    torn.write_text(record.read_text()[:40])
    argv = [str(torn), str(record)] if which == "baseline" else [str(record), str(torn)]
    rc, out, err = _cli(capsys, "compare", *argv)
    _usage_error(rc, out, err, contains=str(torn))


def test_compare_json_written_on_success(tmp_path, capsys, record):
    rc, out, err = _cli(capsys, "compare", str(record), str(record), "--json", str(tmp_path / "c.json"))
    assert rc == 0 and out.startswith("OK"), out + err
    assert json.loads((tmp_path / "c.json").read_text())["regressed"] is False


# ---- mutants and selfcheck ---------------------------------------------------------------------------

@pytest.mark.parametrize("argv, contains", [
    (["mutants", "no_such_mutant"], "no_such_mutant"),
    (["mutants", "--cases", "0"], "expected at least 1 case but got '0'"),
    (["mutants", "--cases", "nan"], "--cases"),
    (["mutants", "--json", "/proc/x/table.json"], "/proc/x"),
    (["mutants", "--op", "audio"], "--op"),
    (["selfcheck", "--cases", "-1"], "argument --cases: expected 0 or more but got '-1'"),
    (["selfcheck", "--cases", "inf"], "--cases"),
    (["selfcheck", "--seed", "nan"], "--seed"),
    (["selfcheck", "--device", "tpu"], "--device"),
], ids=["unknown-mutant", "zero-examples", "nan-examples", "json-in-proc", "bad-family", "negative-cases",
        "inf-cases", "nan-seed", "bad-device"])
def test_mutants_and_selfcheck_usage_errors(capsys, argv, contains):
    rc, out, err = _cli(capsys, *argv)
    _usage_error(rc, out, err, contains=contains)


@pytest.mark.skipif(HAS_CUDA, reason="checks the refusal of --device cuda on a machine without a GPU")
@pytest.mark.parametrize("command", ["mutants", "selfcheck"])
def test_cuda_without_gpu(capsys, command):
    rc, out, err = _cli(capsys, command, "--device", "cuda")
    _usage_error(rc, out, err, contains="--device cpu")


# ---- escaping in the Markdown report -----------------------------------------------------------------

HOSTILE = "boom <script>alert(1)</script> & <img src=x onerror=alert(2)>\n```\n# not a heading\n````"


def _hostile_record(tmp_path) -> Path:
    rec = new_record("campaign")
    add_group(rec, target="evil`<b>t</b>|x", op="step_a_v", dtype="float32", shape_class="ragged", cases=1,
              passes=0, findings={"mismatch": 1}, ratios=[2.0])
    add_finding(rec, {"id": "F0001-<i>x</i>", "target": "evil`<b>t</b>|x", "op": "step_a_v", "dtype": "float32",
                      "shape_class": "ragged", "kind": "mismatch", "message": HOSTILE,
                      "figures": {"max_abs": 1.0, "max_rel": 1.0, "ratio": 2.0, "where": {}},
                      "repro": "kernel-oracle repro 'F```1.pt' --target '<t>'", "problem": None})
    rec["notes"] = ["<iframe src=x></iframe> note | with pipe"]
    return save(rec, tmp_path / "hostile.json")


def _outside_code(md: str) -> str:
    """The Markdown with fenced blocks and code spans removed (what a renderer interprets as text)."""
    text = re.sub(r"^(`{3,})[^\n]*\n.*?\n\1$", "", md, flags=re.S | re.M)
    return re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", text)


def test_markdown_report_escapes_html_and_fences(tmp_path, capsys):
    src = _hostile_record(tmp_path)
    rc, out, err = _cli(capsys, "report", str(src), "--out", str(tmp_path / "out"), "--no-plots")
    assert rc == 0, err
    md = (tmp_path / "out" / "hostile.md").read_text()
    prose = _outside_code(md)
    for tag in ("<script", "<img", "<iframe", "<b>", "<i>"):
        assert tag not in prose, f"raw HTML {tag!r} reaches the Markdown renderer"
    assert "&lt;script&gt;" not in md.split("`````text")[1], "the message inside its fence must stay verbatim"
    # the message sits verbatim inside a fence longer than its longest backtick run (4)
    assert f"`````text\n{HOSTILE}\n`````\n" in md
    assert "````bash\nkernel-oracle repro 'F```1.pt' --target '<t>'\n````\n" in md
    # the target (a backtick, HTML, a pipe) in a code span that its backtick cannot close
    assert "target ``evil`<b>t</b>|x``" in md


def test_markdown_report_renders_as_intended(tmp_path):
    """With a CommonMark renderer: the hostile message comes out as one code block, no live tags."""
    markdown_it = pytest.importorskip("markdown_it", reason="markdown-it-py (installed with import-linter's rich) "
                                                             "renders the Markdown")
    from kernel_oracle.reports.model import load_result
    from kernel_oracle.reports.render_md import render_markdown

    md = render_markdown(load_result(_hostile_record(tmp_path)))
    html = markdown_it.MarkdownIt("commonmark").enable("table").render(md)
    for tag in ("<script", "<img", "<iframe", "<b>t", "<i>x"):
        assert tag not in html, f"{tag!r} became a live tag"
    import html as html_lib

    assert f'<code class="language-text">{html_lib.escape(HOSTILE, quote=False)}\n</code>' in html
    assert "<h1>not a heading" not in html


# ---- on the GPU: the standalone script of our Triton kernels -------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="runs the emitted script with --device cuda on our Triton kernels")
@pytest.mark.parametrize("case", [
    LORA_CASE,
    Case(LoRAProblem(op="step_b_q", seg_lens=(5, 0, 9), weight_indices=(1, 0, 1), lora_ranks=(16, 4),
                     scalings=(1.0, -0.5), permute=True, extra_rows=3, dtype="bfloat16", seed=11)),
    Case(VisionProblem(lengths=(7, 16, 3), seed=4, path="metadata", layout="v_strided", dtype="float16")),
], ids=["step_a_v-fp32", "step_b_q-bf16-inplace", "vision-fp16-metadata"])
def test_standalone_script_on_the_gpu(tmp_path, capsys, case):
    path = _save_case(tmp_path / "gpu.pt", case, device="cuda")
    rc, stdout, err = _cli(capsys, "repro", str(path), "--targets", "triton", "--device", "cuda",
                           "--emit-script", str(tmp_path / "s"))
    assert rc == 0, stdout + err
    proc = subprocess.run([sys.executable, str(tmp_path / "s" / "gpu.py"), "--device", "cuda"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASS" in proc.stdout


@pytest.mark.parametrize("argv, contains", [
    (["fuzz", "--op", "lora", "--out", "/tmp/never-written"], "the following arguments are required: --target"),
    (["fuzz", "--targets", "reference", "--op", "lora", "--out", "/tmp/never-written", "--cases", "0"], "--cases"),
    (["fuzz", "--targets", "reference", "--op", "lora", "--out", "/tmp/never-written", "--time", "nan"], "--time"),
    (["run", "--device", "tpu"], "--device"),
    (["run", "--time", "soon"], "--time"),
    (["matrix", "--op", "lora"], "the following arguments are required: --target"),
    (["bench", "--device", "tpu"], "--device"),
    (["bench", "--cases", "many"], "--cases"),
], ids=["fuzz-no-target", "fuzz-zero-budget", "fuzz-nan-time", "run-bad-device", "run-bad-budget",
        "matrix-no-target", "bench-bad-device", "bench-bad-warmup"])
def test_argparse_errors_of_fuzz_run_matrix_and_bench_are_one_line(capsys, argv, contains):
    rc, out, err = _cli(capsys, *argv)
    _usage_error(rc, out, err, contains=contains)
    assert err.startswith(f"kernel-oracle {argv[0]}: error: ")
    assert err.rstrip().endswith("--help)")
