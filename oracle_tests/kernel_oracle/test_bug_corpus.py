"""The real-bug corpus (``corpus/*.toml``, Note [Bug corpus] in ``kernel_oracle.jobs.bug_corpus``): every
upstream defect fails, as the entry says, on each buggy release and passes on each fixed one; a
known (unfixed) defect must still fail on the releases listed, so the day it is fixed this test
says so and the entry moves to ``status = "fixed"``."""

from __future__ import annotations

import pytest
import torch

from kernel_oracle.jobs.bug_corpus import CorpusError, in_process, load_corpus, load_entry, run_entry

from oracle_tests._sglang_releases import release_target
from oracle_tests.conftest import DEVICE

ENTRIES = load_corpus()
RELEASE_RUNS = [pytest.param(e, r, want, id=f"{e.id}-{r}-{want}")
                for e in ENTRIES if e.target.startswith("sglang")
                for want, releases in (("fails", e.buggy), ("passes", e.fixed)) for r in releases]


def test_corpus_holds_the_known_upstream_entries():
    ids = {e.id for e in ENTRIES}
    assert {"sglang-pr-28371", "sglang-empty-batch-max-len-none", "flashinfer-graph-cache-key-strides",
            "sglang-vision-0-5-10-ignores-softmax-scale", "sglang-trt-cublas-step-b-q-every-row"} <= ids
    pr = next(e for e in ENTRIES if e.id == "sglang-pr-28371")
    assert (pr.buggy, pr.fixed, pr.status) == (("0.5.12",), ("0.5.15", "0.5.16", "0.5.23"), "fixed")
    cublas = next(e for e in ENTRIES if e.id == "sglang-trt-cublas-step-b-q-every-row")
    assert cublas.spec("0.5.23") == "sglang-trt==0.5.23@cublas=on,lora_opti=on" and cublas.reach
    empty = next(e for e in ENTRIES if e.id == "sglang-empty-batch-max-len-none")
    assert empty.status == "known" and "0.5.23" in empty.buggy and not empty.fixed
    csgmv = next(e for e in ENTRIES if e.id == "sglang-csgmv-pr-28371")
    assert (csgmv.buggy, csgmv.fixed, csgmv.family) == (("0.5.10", "0.5.11", "0.5.13.post1"),
                                                        ("0.5.14", "0.5.16", "0.5.22", "0.5.23"), "csgmv")
    assert [c.problem.op for c in csgmv.cases] == ["csgmv_shrink", "csgmv_expand"]


@pytest.mark.parametrize("entry, release, want", RELEASE_RUNS)
def test_entry_on_release(entry, release, want):
    if entry.device == "cuda" and not torch.cuda.is_available():
        pytest.skip(f"{entry.id} needs a GPU")
    # a "cpu" entry needs no GPU; it runs where this session runs Triton kernels (compiled on a GPU machine,
    # where CPU tensors cannot reach them)
    device = "cuda" if entry.device == "cuda" else DEVICE
    target = release_target(entry.spec(release), device)
    outcome = run_entry(entry, in_process(target, device))
    if want == "fails":
        assert outcome.matches(entry), (f"{entry.id} on {entry.spec(release)}: expected a {entry.expect} finding"
                                        f"{' with ' + repr(entry.message_contains) if entry.message_contains else ''}"
                                        f", got {outcome}")
    else:
        assert not outcome.failed, f"{entry.id} on fixed {entry.spec(release)}: {outcome.kind}: {outcome.message}"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="FlashInfer's cuDNN prefill runs on CUDA only (the entry's device is 'cuda')")
def test_flashinfer_graph_cache_entry_is_still_failing():
    """Known (no fixed release): the cases run in order on one engine without the target's guard."""
    entry = next(e for e in ENTRIES if e.id == "flashinfer-graph-cache-key-strides")
    try:
        from flashinfer.cudnn import cudnn_batch_prefill_with_kv_cache
    except Exception as exc:  # noqa: BLE001 - the reason is the skip message
        pytest.skip(f"FlashInfer's cuDNN prefill does not import here: {type(exc).__name__}: {exc}")
    from kernel_oracle.harness.targets import Target
    from kernel_oracle.fuzz.targets.flashinfer_cudnn import FlashInferCudnn, engine_versions

    versions = engine_versions()
    if versions.get("flashinfer") not in entry.buggy:
        pytest.skip(f"FlashInfer {versions.get('flashinfer')} is not a release this entry lists ({entry.buggy})")
    eng = FlashInferCudnn(torch.device("cuda"), cudnn_batch_prefill_with_kv_cache, guard=False)
    target = Target("flashinfer-cudnn (unguarded)", {"vision": eng.flashinfer_cudnn_attention}, strict=False,
                    poison=eng.poisoned_output)
    outcome = run_entry(entry, in_process(target, "cuda"))
    assert outcome.matches(entry) and outcome.case_index == 1, outcome


def test_corpus_entries_are_validated(tmp_path):
    bad = tmp_path / "x.toml"
    bad.write_text('id = "x"\ntitle = "t"\nupstream = "u"\ntarget = "sglang"\ndevice = "cpu"\nstatus = "fixed"\n'
                   'buggy = ["0.5.12"]\nfixed = ["0.5.15"]\nexpect = "mismatch"\n'
                   '[[cases]]\n[cases.problem]\nfamily = "lora"\nop = "step_a_q"\nseg_lens = [1]\n'
                   'weight_indices = [0]\nlora_ranks = [16]\nscalings = [1.0]\nstale_host_int = [0, 0, 1]\n')
    with pytest.raises(CorpusError) as info:
        load_entry(bad)
    assert str(info.value).startswith(f"{bad}: cases[0].problem has unknown keys ['stale_host_int']; the only "
                                      f"valid keys are ")
    bad.write_text(bad.read_text().replace('status = "fixed"', 'status = "known"'))
    with pytest.raises(CorpusError, match=r"status='known' with fixed=\['0.5.15'\]; a fixed entry names"):
        load_entry(bad)


# ---- the release matrix (kernel-oracle matrix) -------------------------------------------------------------

def _finding(fid: str, spec: str, kind: str, cause: str, frame: str = "", config=(), count: int = 1) -> dict:
    return {"id": fid, "target": spec, "op": "step_a_q", "dtype": "float32", "shape_class": "prefill", "kind": kind,
            "message": cause, "count": count,
            "bucket": {"kind": kind, "family": "lora", "cause": cause, "frame": frame, "config": list(config)}}


def test_matrix_derives_introduced_and_fixed_in_across_moved_modules():
    from kernel_oracle.jobs.matrix import build_matrix

    crash = "RuntimeError: max(): Expected reduction dim"
    runs = [  # given out of order: the matrix sorts by release number
        {"spec": "sglang==0.5.23", "available": True, "reason": "", "cases": 40,
         "findings": [_finding("F1", "sglang==0.5.23", "contract", crash,
                               "_kernel_oracle_sglang.v0_5_23_x.default.sglang_kernels_ops_lora_dense.kv_b_lora_absorbed"
                               ":_max_segment_len", count=3)]},
        {"spec": "sglang==0.5.12", "available": True, "reason": "", "cases": 50,
         "findings": [_finding("F1", "sglang==0.5.12", "mismatch", "everywhere", config=("float32", "cuda_graph"),
                               count=2),
                      _finding("F2", "sglang==0.5.12", "contract", crash,
                               "_kernel_oracle_sglang.v0_5_12_y.default.sglang_srt_lora_triton_ops.kv_b_lora_absorbed"
                               ":_max_segment_len")]},
        {"spec": "sglang==0.5.15", "available": False, "reason": "no wheel", "cases": 0, "findings": []},
    ]
    m = build_matrix(runs, [])
    assert [r["spec"] for r in m["releases"]] == ["sglang==0.5.12", "sglang==0.5.15", "sglang==0.5.23"]
    rows = {r["kind"]: r for r in m["rows"]}
    assert len(m["rows"]) == 2  # the crash is one bucket although the module moved between releases
    assert rows["mismatch"]["counts"] == {"sglang==0.5.12": 2, "sglang==0.5.23": 0}
    assert (rows["mismatch"]["introduced_in"], rows["mismatch"]["fixed_in"]) == ("sglang==0.5.12", "sglang==0.5.23")
    assert rows["contract"]["counts"] == {"sglang==0.5.12": 1, "sglang==0.5.23": 3}
    assert (rows["contract"]["introduced_in"], rows["contract"]["fixed_in"]) == ("sglang==0.5.12", None)
    assert rows["contract"]["bucket"] == ("contract | lora | RuntimeError: max(): Expected reduction dim | "
                                          "at kv_b_lora_absorbed:_max_segment_len")


def test_reports_show_the_release_matrix():
    from kernel_oracle.harness.schema import new_record
    from kernel_oracle.jobs.matrix import build_matrix
    from kernel_oracle.reports.model import Result
    from kernel_oracle.reports.render_html import render_html
    from kernel_oracle.reports.render_md import render_markdown

    runs = [{"spec": "sglang==0.5.12", "available": True, "reason": "", "cases": 9,
             "findings": [_finding("F1", "sglang==0.5.12", "mismatch", "everywhere", config=("float32", "cuda_graph"))]},
            {"spec": "sglang==0.5.23", "available": True, "reason": "", "cases": 9, "findings": []}]
    corpus = [{"id": "sglang-pr-28371", "title": "stale host ints", "upstream": "https://github.com/sgl-project/sglang/pull/28371",
               "status": "fixed", "expect": "mismatch",
               "results": {"sglang==0.5.12": {"outcome": "fails: mismatch", "expected": "fails", "as_expected": True},
                           "sglang==0.5.23": {"outcome": "passes", "expected": "passes", "as_expected": True}}}]
    record = new_record("main", device="cpu")
    record["release_matrix"] = build_matrix(runs, corpus)
    result = Result.from_dict(record)
    md = render_markdown(result)
    assert "## Release matrix" in md
    assert "| mismatch \\| lora \\| step_a_q \\| values | 1 | 0 | sglang==0.5.12 | sglang==0.5.23 |" in md
    assert "| sglang-pr-28371 (https://github.com/sgl-project/sglang/pull/28371) | fixed | fails: mismatch (fails) | " \
           "passes (passes) |" in md
    html = render_html(result, with_plots=False)
    assert '<section id="release-matrix">' in html and '<a href="#release-matrix">Release matrix</a>' in html
    assert '<td class="n bad">1</td><td class="n ok">0</td><td>sglang==0.5.12</td><td>sglang==0.5.23</td>' in html
    plain = Result.from_dict(new_record("main", device="cpu"))
    assert "Release matrix" not in render_markdown(plain) and "release-matrix" not in render_html(plain, with_plots=False)
