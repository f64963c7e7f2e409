"""Known upstream defects as data (harness/known_issues.toml, kernel_oracle.harness.known_issues).

Findings are built the way the harness writes them (harness.check.judge's messages for a target that
raises on a valid input), so a change of that wording that would silently stop the matching fails here.
"""

from __future__ import annotations

import os
import json
import re
import textwrap

import pytest
import torch

from kernel_oracle.harness.known_issues import (DEFAULT_PATH, KnownIssuesError, load_known_issues, match_known,
                                                release_of)
from kernel_oracle.harness.opinfo import FAMILY_OPS
from kernel_oracle.harness.schema import FINDING_KINDS

# exactly what torch raises for SGLang's seg_lens.max() on an empty batch (checked below)
EMPTY_MAX = ("max(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim "
             "with the 'dim' argument.")
GRAPH_HAZARD = ("flashinfer-cudnn: FlashInfer 0.6.18 would replay the cuDNN graph built for an earlier call with "
                "the same cache key (batch 8, max_seqlen 4096, 16 heads, head dim 64, bfloat16, scale 0.125) but "
                "another layout (v strides (64, 64, 1) then (192, 64, 1)): its key omits strides")


def _raised_on_valid(target: str, op: str, exc_type: str, message: str) -> dict:
    """A finding record as the harness writes it when a target raises on a valid input."""
    return {"id": "F0001", "target": target, "op": op, "kind": "contract",
            "message": f"raised {exc_type}({message!r}) on a valid input", "repro": "kernel-oracle repro F0001"}


def test_checked_in_file_loads_and_names_real_ops_kinds_and_docs():
    issues = load_known_issues()
    assert {i.id for i in issues} >= {"flashinfer-cudnn-empty-batch", "flashinfer-cudnn-graph-cache-key",
                                      "sglang-empty-batch-max-len-none"}
    ops = {op for family in FAMILY_OPS.values() for op in family}
    for issue in issues:
        assert issue.op in ops or issue.op in FAMILY_OPS, issue
        assert issue.kind in FINDING_KINDS
        assert issue.upstream.startswith("https://github.com/")


def test_torch_message_of_an_empty_max_is_what_the_sglang_entry_matches():
    with pytest.raises(RuntimeError) as exc:
        torch.empty(0, dtype=torch.int32).max()
    assert str(exc.value) == EMPTY_MAX


@pytest.mark.parametrize("target,op,exc_type,message,release,expected", [
    ("flashinfer-cudnn", "vision", "RuntimeError", "cudnnGraphExecute failed: CUDNN_STATUS_BAD_PARAM_NULL_POINTER",
     None, "flashinfer-cudnn-empty-batch"),
    ("flashinfer-cudnn", "vision", "GraphCacheHazard", GRAPH_HAZARD, "0.6.18", "flashinfer-cudnn-graph-cache-key"),
    ("sglang==0.5.23", "step_a_v", "RuntimeError", EMPTY_MAX, None, "sglang-empty-batch-max-len-none"),
    ("sglang-trt==0.5.23", "q_side_fused", "RuntimeError", EMPTY_MAX, None, "sglang-empty-batch-max-len-none"),
    ("sglang", "step_b_q", "RuntimeError", EMPTY_MAX, "0.5.23", "sglang-empty-batch-max-len-none"),
    # the same message from another release, target or op family is not known
    ("sglang==0.6.0", "step_a_v", "RuntimeError", EMPTY_MAX, None, None),
    ("sglang", "step_a_v", "RuntimeError", EMPTY_MAX, "0.6.1", None),
    ("triton", "step_a_v", "RuntimeError", EMPTY_MAX, None, None),
    ("flashinfer-cudnn", "vision", "GraphCacheHazard", GRAPH_HAZARD, "0.6.19", None),
    ("flashinfer-cudnn", "vision", "RuntimeError", "illegal memory access", None, None),
])
def test_match_known(target, op, exc_type, message, release, expected):
    got = match_known(_raised_on_valid(target, op, exc_type, message), target, release)
    assert (got.id if got else None) == expected


SMEM = ("out of resource: shared memory, Required: 294912, Hardware limit: 232448. Reducing block sizes or "
        "`num_stages` may help.")
NO_MAX_LEN = "no error raised; expected ValueError('LoRA batch_info must provide max_len or seg_lens.')"


@pytest.mark.parametrize("target,op,release,expected", [
    # TRT-LLM-style step_a_v in fp32 past shared memory: every release with the file, every configuration
    ("sglang-trt==0.5.13", "step_a_v", None, "sglang-trt-step-a-v-fp32-shared-memory"),
    ("sglang-trt==0.5.21@pdl=off", "step_a_v", None, "sglang-trt-step-a-v-fp32-shared-memory"),
    ("sglang-trt==0.5.13.post1@cublas=on,lora_opti=on", "step_a_v", None, "sglang-trt-step-a-v-fp32-shared-memory"),
    ("sglang-trt", "step_a_v", "0.5.12", None),  # no TRT-LLM-style file before 0.5.13
    ("sglang==0.5.23", "step_a_v", None, None),  # the default file sizes its tiles otherwise
])
def test_the_trt_step_a_v_shared_memory_entry(target, op, release, expected):
    finding = _raised_on_valid(target, op, "OutOfResources", SMEM)
    got = match_known(finding, target, release)
    assert (got.id if got else None) == expected


@pytest.mark.parametrize("target,op,release,expected", [
    # the csgmv shrink in fp32 past shared memory: every release, every configuration
    ("sglang-csgmv==0.5.10", "csgmv_shrink", None, "sglang-csgmv-fp32-shared-memory"),
    ("sglang-csgmv==0.5.23@split_k=on", "csgmv_shrink", None, "sglang-csgmv-fp32-shared-memory"),
    ("sglang-csgmv", "csgmv_shrink", "0.5.15.post1", "sglang-csgmv-fp32-shared-memory"),
    ("sglang-csgmv==0.5.23", "csgmv_expand", None, None),  # the expand's tiles fit: a raise there is new
    ("sglang-csgmv", "csgmv_shrink", "0.5.9", None),  # no csgmv backend before 0.5.10
    ("sglang-csgmv", "csgmv_shrink", "0.5.24", None),  # a later release is not known to have it
    ("sglang-trt==0.5.23", "csgmv_shrink", None, None),
])
def test_the_csgmv_shrink_shared_memory_entry(target, op, release, expected):
    from triton.runtime.errors import OutOfResources

    finding = _raised_on_valid(target, op, "OutOfResources", str(OutOfResources(245_760, 232_448, "shared memory")))
    got = match_known(finding, target, release)
    assert (got.id if got else None) == expected


@pytest.mark.parametrize("target,op,expected", [
    ("sglang-trt==0.5.13@cublas=on,lora_opti=on", "step_a_q", "sglang-trt-cublas-step-a-q-no-max-len-error"),
    ("sglang-trt==0.5.21@cublas_kv_b=on,lora_opti=on", "step_a_q", "sglang-trt-cublas-step-a-q-no-max-len-error"),
    ("sglang-trt==0.5.14@cublas=on,lora_opti=on", "step_a_v", "sglang-trt-cublas-step-a-v-no-max-len-error"),
    ("sglang-trt==0.5.23@cublas=on,lora_opti=on", "step_b_q", "sglang-trt-cublas-step-b-q-no-max-len-error"),
    ("sglang-trt==0.5.23@cublas=on,lora_opti=on", "step_b_v", None),  # no cuBLAS path: a missed error is new
    ("sglang-trt==0.5.23", "step_a_q", None),  # the Triton path raises it
])
def test_the_cublas_no_max_len_entries(target, op, expected):
    finding = {"id": "F1", "target": target, "op": op, "kind": "contract", "message": NO_MAX_LEN}
    got = match_known(finding, target)
    assert (got.id if got else None) == expected


@pytest.mark.parametrize("target,op,expected", [
    ("sglang-trt==0.5.13@cublas=on,lora_opti=on", "step_a_q", "sglang-trt-0-5-13-cublas-every-slot"),
    ("sglang-trt==0.5.13.post1@cublas_kv_b=on,lora_opti=on", "step_a_v", "sglang-trt-0-5-13-cublas-every-slot"),
    ("sglang-trt==0.5.13@cublas=on,lora_opti=on", "step_b_q", "sglang-trt-cublas-step-b-q-every-row"),  # first
    ("sglang-trt==0.5.13@cublas=on,lora_opti=on", "step_b_v", None),  # no cuBLAS path: another defect
    ("sglang-trt==0.5.14@cublas=on,lora_opti=on", "step_a_q", None),  # 0.5.14 takes it with one slot only
    ("sglang-trt==0.5.13", "step_a_v", None),  # the Triton path
])
def test_the_0_5_13_cublas_every_slot_entry(target, op, expected):
    bucket = {"kind": "mismatch", "family": "lora", "op": op, "cause": "values", "frame": "", "where": "slot",
              "flags": []}
    finding = {"id": "F1", "target": target, "op": op, "kind": "mismatch", "message": "Tensor-likes are not close!",
               "bucket": bucket}
    got = match_known(finding, target)
    assert (got.id if got else None) == expected


def test_a_mismatch_is_never_an_empty_batch_crash():
    finding = {**_raised_on_valid("sglang==0.5.23", "step_a_v", "RuntimeError", EMPTY_MAX), "kind": "mismatch"}
    assert match_known(finding, "sglang==0.5.23") is None


def test_target_name_defaults_to_the_finding_and_release_comes_from_it():
    f = _raised_on_valid("sglang", "step_a_q", "RuntimeError", EMPTY_MAX)
    assert match_known({**f, "release": "0.5.23"}).id == "sglang-empty-batch-max-len-none"
    assert match_known({**f, "release": "0.5.15"}).id == "sglang-empty-batch-max-len-none"
    assert match_known({**f, "release": "0.6.0"}) is None
    assert release_of(f, "sglang-trt==0.5.23") == "0.5.23"
    assert release_of(f, "sglang-trt==0.5.13.post1@cublas=on,lora_opti=on") == "0.5.13.post1"  # a configuration
    assert release_of(f, "sglang") is None


def test_bucket_rule(tmp_path):
    path = tmp_path / "k.toml"
    path.write_text(textwrap.dedent("""
        [[issue]]
        id = "step-b-q-values"
        title = "t"
        target = "sglang*"
        op = "lora"
        kind = "mismatch"
        bucket = '^mismatch \\| lora \\| step_b_q \\|'
        upstream = "https://example.org/1"
        releases = ["*"]
        doc = "d"
    """))
    issues = load_known_issues(path)
    bucket = {"kind": "mismatch", "family": "lora", "op": "step_b_q", "cause": "values", "frame": "",
              "where": "tail tile", "flags": ["cuda_graph"]}
    hit = {"target": "sglang==1.0", "op": "step_b_q", "kind": "mismatch", "message": "m", "bucket": bucket}
    assert match_known(hit, issues=issues).id == "step-b-q-values"
    # the label names the op, not the region: another op is another root cause, another region is not
    assert match_known({**hit, "op": "step_a_q", "bucket": {**bucket, "op": "step_a_q"}}, issues=issues) is None
    assert match_known({**hit, "bucket": {**bucket, "where": "everywhere"}}, issues=issues).id == "step-b-q-values"


GOOD = dict(id="a-b", title="t", target="flashinfer-cudnn", op="vision", kind="contract", message="m",
            upstream="https://example.org", releases=["1.0"], doc="d")


def _toml(**fields) -> str:
    def val(v):
        if isinstance(v, list):
            return "[" + ", ".join(f'"{x}"' for x in v) + "]"
        return f'"{v}"' if isinstance(v, str) else v
    return "[[issue]]\n" + "".join(f"{k} = {val(v)}\n" for k, v in fields.items())


@pytest.mark.parametrize("change,error", [
    (dict(kind="boom"), "kind='boom'; the only valid values are ['mismatch', 'contract', 'validation-gap', 'crash', "
                        "'hang', 'stream']"),
    (dict(op="Step A"), "op='Step A' must be an op name such as 'step_a_q' or 'vision', or a kernel family ('lora': "
                        "every LoRA op); a catch-all could hide a bug of any op"),
    # catch-alls (Note [Known issues]): an entry names an upstream target and an op
    (dict(op="*"), "op='*' must be an op name such as 'step_a_q' or 'vision', or a kernel family"),
    *((dict(target=t), f"target={t!r} must start with an upstream target's name (sglang, sglang-trt, sglang-v2, "
                       f"sglang-csgmv, flashinfer-cudnn, torch-varlen), e.g. 'sglang==*'; a catch-all could hide a bug "
                       f"of any target")
      for t in ("*", "s*", "sgl?ng==*", "sglang_mine", "my_kernels", "[s]glang")),
    (dict(id="A B"), "id='A B' must be lower-case words joined by '-'"),
    (dict(upstream="http://x"), "upstream='http://x' must be an https link"),
    (dict(releases=[]), "Expected releases to be a non-empty list of version strings (or ['*']) but got releases=[]"),
    (dict(message="("), "message='(' is not a regular expression"),
    (dict(message=None), "give a matching rule: message (a regex of the finding's message), bucket"),
    (dict(colour="red"), "unknown fields ['colour']"),
    (dict(doc=None), "missing fields ['doc']"),
])
def test_bad_entries_name_the_entry_and_field(tmp_path, change, error):
    fields = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    path = tmp_path / "k.toml"
    path.write_text(_toml(**fields))
    with pytest.raises(KnownIssuesError, match=re.escape(error)) as exc:
        load_known_issues(path)
    assert str(exc.value).startswith(f"{path} [[issue]] #1")


def test_duplicate_ids_and_bad_toml_are_refused(tmp_path):
    path = tmp_path / "k.toml"
    path.write_text(_toml(**GOOD) + "\n" + _toml(**GOOD))
    with pytest.raises(KnownIssuesError, match=re.escape(f"{path}: id 'a-b' appears twice")):
        load_known_issues(path)
    path.write_text("[[issue]\n")
    with pytest.raises(KnownIssuesError, match=re.escape(f"{path}: not valid TOML")):
        load_known_issues(path)


def test_default_path_is_the_checked_in_file():
    assert DEFAULT_PATH.name == "known_issues.toml" and DEFAULT_PATH.is_file()


# ---- wiring: campaigns, the fuzz CLI, compare (Note [Known issues]) -----------------------------------------------
# a release whose step_a_q raises on every call: each case is a contract finding carrying this text (known
# issues are of upstream targets only, so the raiser is the kv_b file of a made-up SGLang wheel)
_RAISER = ("def step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head):\n"
           "    raise RuntimeError({text!r})\n\n# step_b_v_fwd: not in this release\n")


def _known_file(tmp_path, message: str, target: str = "sglang==*"):
    path = tmp_path / "known.toml"
    path.write_text(_toml(id="frob-rejects-batches", title="the frobnicator rejects every batch",
                          target=target, op="step_a_q", kind="contract", message=message,
                          upstream="https://example.org/frob/issues/7", releases=["*"], doc="this test"))
    return path


def raiser_wheel(folder, version: str, text: str):
    """An SGLang wheel of ``version`` whose kv_b file's step_a_q raises ``RuntimeError(text)``."""
    import zipfile

    wheel = folder / f"sglang-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("sglang/srt/lora/triton_ops/kv_b_lora_absorbed.py", _RAISER.format(text=text))
        z.writestr(f"sglang-{version}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    return wheel


def _fuzz_raiser(tmp_path, monkeypatch, name: str, text: str, known_message: str):
    """``kernel-oracle fuzz`` against a release whose step_a_q raises ``text``, with a known-issues file
    (through $KERNEL_ORACLE_KNOWN_ISSUES) whose one entry matches messages by ``known_message``."""
    from kernel_oracle.cli import main as cli_main
    from oracle_tests.conftest import DEVICE

    version = f"9.9.{abs(hash((name, tmp_path.name))) % 10**6}"  # one release per test: loaded modules are cached
    wheel = raiser_wheel(tmp_path, version, text)
    monkeypatch.setenv("KERNEL_ORACLE_KNOWN_ISSUES", str(_known_file(tmp_path, known_message)))
    out = tmp_path / f"out-{name}"
    code = cli_main(["fuzz", "--targets", f"sglang=={version}", "--sglang-wheel", str(wheel), "--op", "step_a_q",
                     "--cases", "3", "--seed", "1", "--out", str(out), "--device", DEVICE, "--quiet", "--no-isolate"])
    return code, json.loads((out / "summary.json").read_text()), out


def test_a_campaign_whose_findings_are_all_known_exits_0_and_marks_them(tmp_path, monkeypatch, capsys):
    code, rec, _ = _fuzz_raiser(tmp_path, monkeypatch, "knownish_frob", "frobnicator rejects batch 3",
                                "frobnicator rejects batch [0-9]+")
    assert rec["findings"], "the raising target must give findings"
    assert code == 0
    for f in rec["findings"]:
        assert f["kind"] == "contract"
        assert (f["known"], f["upstream"]) == ("frob-rejects-batches", "https://example.org/frob/issues/7")
    assert rec["summary"]["known_findings"] == len(rec["findings"]) and rec["summary"]["new_findings"] == 0
    out = capsys.readouterr().out
    assert "KNOWN F0001-contract-step_a_q" in out and "FINDING " not in out
    assert "known upstream issue frob-rejects-batches: https://example.org/frob/issues/7" in out
    # the file used is named, in the output and the record (not the checked-in one's name)
    known = str(tmp_path / "known.toml")
    assert f"are known upstream issues ({known})" in out and rec["summary"]["known_issues_file"] == known


def test_a_new_finding_still_exits_1(tmp_path, monkeypatch, capsys):
    code, rec, _ = _fuzz_raiser(tmp_path, monkeypatch, "knownish_other", "an unrelated failure",
                                r"frobnicator rejects")
    assert code == 1 and rec["findings"]
    assert not any("known" in f or "upstream" in f for f in rec["findings"])
    assert rec["summary"]["new_findings"] == len(rec["findings"])
    assert "FINDING F0001-contract-step_a_q" in capsys.readouterr().out


def test_a_bad_known_issues_file_is_a_usage_error(tmp_path, monkeypatch, capsys):
    from kernel_oracle.cli import main as cli_main

    bad = tmp_path / "bad.toml"
    bad.write_text("[[issue]\n")
    monkeypatch.setenv("KERNEL_ORACLE_KNOWN_ISSUES", str(bad))
    assert cli_main(["fuzz", "--targets", "reference", "--op", "lora", "--cases", "1", "--out", str(tmp_path / "o"),
                     "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{bad}: not valid TOML" in err
    assert not (tmp_path / "o").exists()  # refused before any work


def test_reports_show_known_findings_with_their_link(tmp_path, monkeypatch):
    from kernel_oracle.reports.model import load_result
    from kernel_oracle.reports.render_html import render_html
    from kernel_oracle.reports.render_md import render_markdown

    _, rec, out = _fuzz_raiser(tmp_path, monkeypatch, "knownish_frob", "frobnicator rejects batch 3",
                               r"frobnicator rejects")
    result = load_result(out / "summary.json")
    assert result.status == "known" and result.new_findings == []
    md = render_markdown(result)
    fid = rec["findings"][0]["id"]
    assert f"### {fid} (contract, known)" in md
    assert f"known upstream issues (`{tmp_path / 'known.toml'}`)" in md  # the file used, named
    assert "**Known upstream issue** [frob-rejects-batches](<https://example.org/frob/issues/7>)" in md
    html = render_html(result, with_plots=False)
    assert '<a href="https://example.org/frob/issues/7">frob-rejects-batches</a>' in html
    assert "status-known" in html


def test_a_known_link_that_is_not_https_is_not_rendered_as_a_link():
    from kernel_oracle.reports.model import Finding

    f = Finding.from_dict({"id": "F1", "target": "t", "op": "vision", "kind": "contract", "message": "m",
                           "repro": "r", "known": "x", "upstream": "javascript:alert(1)"})
    assert f.known == "x" and f.upstream is None


def test_compare_reports_a_known_finding_that_disappeared_as_fixed_upstream(tmp_path, monkeypatch, capsys):
    from kernel_oracle.cli import main as cli_main

    _, rec, out = _fuzz_raiser(tmp_path, monkeypatch, "knownish_frob", "frobnicator rejects batch 3",
                               r"frobnicator rejects")
    baseline = out / "summary.json"
    current = tmp_path / "current.json"
    current.write_text(json.dumps({**rec, "findings": []}))
    capsys.readouterr()
    assert cli_main(["compare", str(baseline), str(current)]) == 0  # a fix is never a regression
    text = capsys.readouterr().out
    n = len(rec["findings"])
    assert text.startswith(f"OK: 0 new finding(s), 0 error-ratio growth(s), 0 slowdown(s); 0 fixed, "
                           f"{n} fixed upstream\n")
    assert ("fixed upstream: frob-rejects-batches (https://example.org/frob/issues/7)" in text)
    assert cli_main(["compare", str(baseline), str(current), "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [f["known"] for f in data["fixed_upstream"]] == ["frob-rejects-batches"] * n
    assert data["fixed_findings"] == []
    # the other way round, the known finding is listed as known, not as a regression
    assert cli_main(["compare", str(current), str(baseline)]) == 0
    text = capsys.readouterr().out
    assert "Known upstream issues found (not regressions):" in text and "0 new finding(s)" in text


def test_compare_matches_records_written_before_runs_stored_known(tmp_path, monkeypatch):
    from kernel_oracle.reports.compare import compare_results
    from kernel_oracle.reports.model import Result

    _, rec, _ = _fuzz_raiser(tmp_path, monkeypatch, "knownish_frob", "frobnicator rejects batch 3",
                             r"frobnicator rejects")
    old = {**rec, "findings": [{k: v for k, v in f.items() if k not in ("known", "upstream")}
                               for f in rec["findings"]]}
    cmp = compare_results(Result.from_dict(old), Result.from_dict({**rec, "findings": []}))
    assert [k for _, k, _ in cmp.fixed_upstream] == ["frob-rejects-batches"] * len(rec["findings"])
    assert not cmp.fixed_findings


@pytest.mark.parametrize("target,frame,expected", [
    # the release's vision metadata helper on no sequences: its own entry (from 0.5.17, where the helper exists)
    ("sglang==0.5.23", "_kernel_oracle_sglang.v0_5_23.vision_cpu.vision:prepare_flashinfer_cudnn_vision_attention_metadata",
     "sglang-vision-metadata-helper-empty-batch"),
    ("sglang==0.5.16", "_kernel_oracle_sglang.v0_5_16.vision_cpu.vision:prepare_flashinfer_cudnn_vision_attention_metadata",
     None),
    # the same torch message from elsewhere in the vision call is neither entry (the LoRA one is LoRA's)
    ("sglang==0.5.23", "_kernel_oracle_sglang.v0_5_23.vision_cpu.vision:forward", None),
])
def test_the_vision_metadata_helper_entry_is_not_the_lora_empty_batch(target, frame, expected):
    finding = {**_raised_on_valid(target, "vision", "RuntimeError", EMPTY_MAX),
               "bucket": {"kind": "contract", "family": "vision", "cause": "RuntimeError: " + EMPTY_MAX[:50],
                          "frame": frame}}
    got = match_known(finding, target, None)
    assert (got.id if got else None) == expected


# ---- a known-issues file cannot hide a user's bug (Note [Known issues]) -------------------------------------------

@pytest.mark.parametrize("target", ["sglang_mine", "sglang_mine.kernels", "sglang_mine:Kernels", "sglangx",
                                    "mutant:lora_wrong_slot", "my_pkg.sglang"])
def test_a_users_module_never_matches_a_release_pattern(target):
    """The checked-in ``sglang*`` entry matched a user's module ``sglang_mine``: its bug was "known upstream"."""
    finding = _raised_on_valid(target, "step_a_v", "RuntimeError", EMPTY_MAX)
    assert match_known(finding, target, "0.5.23") is None
    assert match_known(finding, "sglang==0.5.23").id == "sglang-empty-batch-max-len-none"  # the release still is


def test_a_catch_all_file_is_refused_before_any_case(tmp_path, monkeypatch, capsys):
    """A $KERNEL_ORACLE_KNOWN_ISSUES file with a catch-all entry made a bug of the user's own module
    "known upstream" and the run exit 0: it is refused in one line, exit 2, before --out is touched."""
    from kernel_oracle.cli import main as cli_main

    path = tmp_path / "all.toml"
    path.write_text(_toml(**{**GOOD, "target": "*", "op": "*", "message": "."}))
    monkeypatch.setenv("KERNEL_ORACLE_KNOWN_ISSUES", str(path))
    assert cli_main(["fuzz", "--targets", "reference", "--op", "lora", "--cases", "1", "--out", str(tmp_path / "o"),
                     "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path} [[issue]] #1 ('a-b'): op='*' must be an op name" in err
    assert not (tmp_path / "o").exists()


# ---- a known-issues file never hangs a run (Note [Known issues]) ---------------------------------------------

def _ko(tmp_path, known, *argv, timeout: int = 120):
    """``kernel-oracle ARGV`` in a child with ``$KERNEL_ORACLE_KNOWN_ISSUES`` naming ``known`` (it hung)."""
    import subprocess
    import sys

    env = {**os.environ, "KERNEL_ORACLE_KNOWN_ISSUES": str(known)}
    return subprocess.run([sys.executable, "-m", "kernel_oracle", *map(str, argv)], capture_output=True, text=True,
                          timeout=timeout, cwd=tmp_path, env=env)


def test_a_fifo_named_as_the_known_issues_file_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "known.toml"
    os.mkfifo(fifo)  # open() of it waits for a writer that never comes
    done = _ko(tmp_path, fifo, "fuzz", "--targets", "reference", "--op", "step_a_q", "--cases", "1", "--device", "cpu",
               "--out", tmp_path / "o", "--quiet", "--no-isolate")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"kernel-oracle fuzz: error: {fifo}: is a FIFO, not a regular file; pass a file"]


def _with_literal_message(fields: dict, pattern: str) -> str:
    """One entry whose ``message`` is ``pattern`` as a TOML literal string (no escapes)."""
    return _toml(**{k: v for k, v in fields.items() if k != "message"}) + f"message = '{pattern}'\n"


# the probe's regex (written as a TOML literal string: no escapes) and a backtracking choice under a repeat
BACKTRACKING = ["^(\\w+\\s?)*$", "(a|ab)+x", "(x+x+)+y", "(.*-){9}x"]


@pytest.mark.parametrize("pattern", BACKTRACKING)
def test_a_rule_that_backtracks_exponentially_is_refused_when_loaded(tmp_path, pattern):
    path = tmp_path / "k.toml"
    path.write_text(_with_literal_message(GOOD, pattern))
    with pytest.raises(KnownIssuesError) as refused:
        load_known_issues(path)
    assert str(refused.value) == (
        f"{path} [[issue]] #1 ('a-b'): message={pattern!r} repeats a part that itself repeats or chooses (as in "
        f"'(x+)*' or '(a|ab)+'), which backtracks exponentially on a near miss and could hang the run; repeat a "
        f"single character or class instead")


def _compare_with(tmp_path, pattern: str):
    """``compare`` of a record with no finding and one with a finding a rule of ``pattern`` is asked about."""
    from kernel_oracle.harness.schema import add_finding, new_record, save

    known = tmp_path / "k.toml"
    known.write_text(_with_literal_message({**GOOD, "target": "sglang==*", "op": "step_a_q", "releases": ["*"]},
                                           pattern))
    base, current = new_record("campaign"), new_record("campaign")
    add_finding(current, {"id": "F0001-contract-step_a_q-float32", "target": "sglang==0.5.23", "op": "step_a_q",
                          "kind": "contract", "message": "a" * 5000 + "!", "repro": "-"})
    save(base, tmp_path / "base.json")
    save(current, tmp_path / "current.json")
    return _ko(tmp_path, known, "compare", tmp_path / "base.json", tmp_path / "current.json")


def test_compare_returns_on_a_rule_that_backtracks_and_counts_the_finding_new(tmp_path):
    done = _compare_with(tmp_path, "^(\\w+\\s?)*$")
    assert done.returncode == 1 and "1 new finding(s)" in done.stdout, done.stdout + done.stderr
    assert "known issues not applied:" in done.stdout and "backtracks exponentially" in done.stdout


def test_a_slow_rule_is_cut_off_and_the_finding_stays_new(tmp_path):
    """Four unbounded repeats side by side backtrack to the fourth power of the message's length: no
    static rule refuses that shape, the search's time bound ends it."""
    import time

    started = time.monotonic()
    done = _compare_with(tmp_path, "(.*)(.*)(.*)(.*)x")
    assert done.returncode == 1 and "1 new finding(s)" in done.stdout, done.stdout + done.stderr
    assert time.monotonic() - started < 60


def test_the_upstream_targets_are_built_in_targets():
    from kernel_oracle.fuzz.targets import builtin_targets
    from kernel_oracle.harness.known_issues import UPSTREAM_TARGETS

    assert set(UPSTREAM_TARGETS) <= set(builtin_targets())


# ---- triggers (Note [Known-issue triggers]) --------------------------------------------------------------------

TRIGGERED = '''
[[issue]]
id = "rank-above-width"
title = "the triton_v2 shrink writes past its output for a routed rank above the buffer's"
target = "sglang-v2*"
op = "lora"
kind = "mismatch"
{rule}
upstream = "https://example.org/rank-above-width"
releases = ["*"]
doc = "this test"

[[issue]]
id = "rank-above-width-crash"
title = "the same write past the allocation"
target = "sglang-v2*"
op = "lora"
kind = "crash"
{rule}
upstream = "https://example.org/rank-above-width"
releases = ["*"]
doc = "this test"
'''


def _campaign(tmp_path, rule: str) -> dict:
    """A campaign of SGLang 0.5.23's triton_v2 ``step_a_q`` (its real rank-above-width defect: wrong rows, or a
    crash where the write leaves the allocation) against a known-issues file of that defect matched by ``rule``."""
    import json
    import subprocess
    import sys

    from oracle_tests._sglang_releases import release_files
    from oracle_tests.conftest import DEVICE

    pytest.importorskip("msgspec", reason="SGLang 0.5.23's v2 files import msgspec (requirements-cpu.txt has it)")
    release_files("0.5.23")
    issues = tmp_path / f"issues-{abs(hash(rule))}.toml"
    issues.write_text(TRIGGERED.format(rule=rule))
    env = {**os.environ, "KERNEL_ORACLE_KNOWN_ISSUES": str(issues)}
    out = tmp_path / f"out-{abs(hash(rule))}"
    proc = subprocess.run([sys.executable, "-m", "kernel_oracle", "fuzz", "--targets", "sglang-v2==0.5.23", "--op",
                           "step_a_q", "--cases", "400", "--seed", "3", "--device", DEVICE, "--quiet", "--out", str(out)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    summary = json.loads((out / "summary.json").read_text())["summary"]
    assert summary["known_findings"] >= 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    return summary


def test_a_triggered_known_issue_stops_eating_the_budget(tmp_path):
    with_trigger = _campaign(tmp_path, 'trigger = "lora_rank_above_buffer"')
    assert sum(with_trigger["known_skipped"].values()) >= 1, with_trigger
    assert with_trigger["known_cases"] <= 3, with_trigger  # the finding and at most its shrinking's replays
    # matched by its text alone, every case that sets the defect off is run and counted against the issue
    text_only = _campaign(tmp_path, 'message = "worker process died|not close"')
    assert text_only["known_skipped"] == {}
    assert text_only["known_cases"] > with_trigger["known_cases"], (text_only, with_trigger)


def test_a_trigger_must_hold_for_the_finding_to_match():
    from kernel_oracle.harness.known_issues import KnownIssue

    issue = KnownIssue("rank-above-width", "t", "sglang-v2*", "step_a_q", "mismatch", "https://example.org", ("*",),
                       "d", trigger="lora_rank_above_buffer")
    problem = {"family": "lora", "R": 16, "lora_ranks": [16, 20], "seg_lens": [3, 0], "weight_indices": [0, 1]}
    finding = {"target": "sglang-v2==0.5.23", "op": "step_a_q", "kind": "mismatch", "message": "x",
               "problem": {"problem": problem, "mutation": None}}
    assert not issue.matches(finding, "sglang-v2==0.5.23")  # slot 1 has rank 20 but routes no row
    problem["seg_lens"] = [3, 1]
    assert issue.matches(finding, "sglang-v2==0.5.23")


def test_an_unknown_trigger_is_refused(tmp_path):
    path = tmp_path / "k.toml"
    path.write_text(TRIGGERED.format(rule='trigger = "no_such_trigger"'))
    with pytest.raises(KnownIssuesError, match=r"trigger='no_such_trigger' is unknown; the only valid values are "
                                               r"\['lora_rank_above_buffer'\]"):
        load_known_issues(path)


def test_a_rule_may_name_sglangs_csgmv_kernels():
    """sglang-csgmv is an upstream target kind like the kv_b ones: a rule naming it matches its findings, and
    a file's rule of that target loads."""
    from kernel_oracle.harness.known_issues import KnownIssue

    issue = KnownIssue("csgmv-x", "t", "sglang-csgmv==*", "csgmv", "mismatch", "https://example.org", ("0.5.12",), "d")
    finding = {"target": "sglang-csgmv==0.5.12", "op": "csgmv_shrink", "kind": "mismatch", "message": "x"}
    assert issue.matches(finding, "sglang-csgmv==0.5.12")
    assert not issue.matches({**finding, "target": "sglang_csgmv_mine"}, "sglang_csgmv_mine")


def test_a_csgmv_rule_in_a_file_loads(tmp_path):
    path = tmp_path / "k.toml"
    path.write_text('[[issue]]\nid = "csgmv-x"\ntitle = "t"\ntarget = "sglang-csgmv*"\nop = "csgmv_expand"\n'
                    'kind = "mismatch"\nmessage = "differ"\nupstream = "https://example.org"\nreleases = ["*"]\n'
                    'doc = "d"\n')
    (issue,) = load_known_issues(path)
    assert issue.target == "sglang-csgmv*"
