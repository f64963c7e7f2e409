"""Each release's own ``VisionFlashInferAttention``, loaded standalone from its wheel (Note [Loading
SGLang's vision wrapper standalone] in ``kernel_oracle.fuzz.targets.sglang_vision``).

* the four versions of the wrapper (0.5.10 | 0.5.11 - 0.5.15.post1 | 0.5.16 | 0.5.17 - 0.5.23:
  0.5.10, 0.5.12, 0.5.15, 0.5.16 and 0.5.23 are in CI's wheel cache) against the oracle on the CPU
  engine, on edge layouts, in float16 and bfloat16, on every path its callers use;
* their exact upstream errors; what each release's ``VisionAttention`` passes (what it declines: ``Target.declines``);
* the loader: it never imports ``sglang``, runs the release's own lines, refuses what it cannot
  answer in one line, and a bug planted in a copy of the release's wrapper is caught.
"""

from __future__ import annotations

import inspect
import sys
import zipfile

import pytest
import torch

from kernel_oracle.fuzz.targets import TargetSources, resolve_target
from kernel_oracle.fuzz.targets.sglang import CALL_FEATURES, CPU_ENGINE_NOTE
from kernel_oracle.fuzz.targets.sglang_vision import VISION_FILE, load_vision_wrapper, read_vision_code
from kernel_oracle.fuzz.targets.sglang_wheel import LoaderError, wheel_release
from kernel_oracle.harness.check import Case, check_case
from kernel_oracle.harness.features import declined_in
from kernel_oracle.harness.mutations import Mutation
from kernel_oracle.harness.problems import materialize
from kernel_oracle.harness.problem_vision import VisionProblem

from oracle_tests._sglang_releases import VISION_RELEASES, release_files, wheel_or_skip

# what each release's VisionAttention.forward passes its backend besides q, k, v, cu_seqlens, bsz, seq_len
# (read from the wheels; the target must declare exactly this)
_CALLERS_0_5_10 = {"attention_mask", "sequence_lengths", "max_seqlen", "output_ws"}
_CALLERS_0_5_11 = _CALLERS_0_5_10 | {"softmax_scale", "window_size", "s_aux"}
EXPECTED_ACCEPTS = {"0.5.10": _CALLERS_0_5_10, "0.5.12": _CALLERS_0_5_11, "0.5.15": _CALLERS_0_5_11,
                    "0.5.16": _CALLERS_0_5_11 | {"forward_metadata"}, "0.5.23": _CALLERS_0_5_11 | {"forward_metadata"}}

# Edge layouts: name -> VisionProblem fields (the keywords a case needs beyond the kwargs path's are in NEEDS)
VISION_CASES = {
    "ragged, an empty sequence": dict(lengths=(5, 0, 9), H=2, D=16),
    "one token": dict(lengths=(1,), H=1, D=8),
    "empty batch": dict(lengths=(), H=2, D=8),
    "trailing tokens no sequence covers": dict(lengths=(4, 6), extra_tokens=5, H=2, D=8),
    "strided v, shifted v and o": dict(lengths=(7, 3), layout="v_strided", v_shift=2, o_shift=1, H=3, D=8),
    "4-D inputs": dict(lengths=(6, 2), four_d=True, H=2, D=8),
    "(B,1,1,1) lengths, tensor max_seqlen": dict(lengths=(3, 8), sequence_lengths_4d=True,
                                                  max_seqlen_kind="cpu_tensor", H=2, D=8),
    "9 sequences (batch bucket 16)": dict(lengths=(1, 2, 3, 4, 5, 6, 7, 8, 9), H=1, D=8),
    "large logits": dict(lengths=(9,), logit_scale=6.0, H=2, D=16),
    "scale 0.37": dict(lengths=(5, 4), softmax_scale=0.37, H=2, D=8),
    "scale 0.0 (a scale, not the default)": dict(lengths=(5, 4), softmax_scale=0.0, H=2, D=8),
}
NEEDS = {"scale 0.37": {"softmax_scale"}, "scale 0.0 (a scale, not the default)": {"softmax_scale"}}
PATHS = {"kwargs": {"sequence_lengths", "max_seqlen"}, "metadata": {"forward_metadata"}}
DTYPES = ("float16", "bfloat16")
RUNS = [pytest.param(version, case, path, id=f"{version}-{path}-{case}")
        for version in VISION_RELEASES for case in sorted(VISION_CASES) for path in PATHS
        if PATHS[path] | NEEDS.get(case, set()) <= EXPECTED_ACCEPTS[version]]


def _number(version: str) -> tuple:
    return tuple(int(x) for x in version.split("."))


def vision_target(version: str):
    wheel_or_skip(version)
    t = resolve_target(f"sglang=={version}", "cpu")
    assert t.available and t.has("vision"), f"sglang=={version}: {t.reason} {t.notes.get('vision')}"
    return t


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("version, case, path", RUNS)
def test_release_wrapper_matches_the_oracle(version, case, path, dtype):
    t = vision_target(version)
    problem = VisionProblem(dtype=dtype, path=path, seed=3, **VISION_CASES[case])
    assert not declined_in(problem, t.declines), "a call the release's callers never make"
    verdict = check_case(t, Case(problem), "cpu")
    assert verdict.ok, f"sglang=={version} {path} {dtype} [{case}]: {verdict.kind}: {verdict.message}"


# the upstream messages, raised by the release's own code (kwargs path: every release's callers use it)
ERRORS = ("drop_sequence_lengths", "drop_max_seqlen", "indptrs_as_list", "sequence_lengths_as_list",
          "indptr_numel_mismatch", "qk_offset_out_of_bounds")


@pytest.mark.parametrize("kind", ERRORS)
@pytest.mark.parametrize("version", VISION_RELEASES)
def test_release_wrapper_raises_the_upstream_errors(version, kind):
    t = vision_target(version)
    case = Case(VisionProblem(lengths=(4, 3), H=2, D=8, dtype="float16", path="kwargs"), Mutation("vision", kind))
    verdict = check_case(t, case, "cpu")
    assert verdict.ok, f"sglang=={version} {kind}: {verdict.kind}: {verdict.message}"


@pytest.mark.parametrize("version", VISION_RELEASES)
def test_target_declares_what_the_releases_callers_pass(version):
    t = vision_target(version)
    declined = set(CALL_FEATURES) - EXPECTED_ACCEPTS[version]
    no_kv_heads = _number(version) < (0, 5, 11)  # VisionAttention(num_kv_heads=...) exists from 0.5.11
    assert set(t.declines) == declined | ({"gqa"} if no_kv_heads else set())
    assert all(why == f"sglang {version}'s VisionAttention never passes {kw} to this backend"
               for kw, why in t.declines.items() if kw != "gqa")
    if no_kv_heads:
        assert t.declines["gqa"] == f"sglang {version}'s VisionAttention has no num_kv_heads: k and v always have q's heads"
    rec = t.to_record()
    assert rec["declines"] == t.declines
    assert CPU_ENGINE_NOTE in rec["reason"] and "on the CPU the wrapper is tested, not cuDNN" in rec["reason"]
    assert rec["precision_by_op"]["vision"] == "ieee"
    assert t.excluded_for("vision") == {"float32": "cuDNN SDPA takes float16 and bfloat16 only (the CPU engine "
                                                   "follows it)"}
    entry = t.entry("vision")
    assert (entry.metadata_type is not None) == (_number(version) >= (0, 5, 16))
    assert (entry.metadata_helper is not None) == (_number(version) >= (0, 5, 17))


def test_vision_only_releases_are_targets():
    t = vision_target("0.5.10")
    assert t.ops("lora") == () and t.ops("vision") == ("vision",)
    assert t.reason.startswith("sglang 0.5.10: no kv_b LoRA kernels (a vision-only release); vision: "
                               "VisionFlashInferAttention of sglang/srt/layers/attention/vision.py")
    assert "the kernels exist from 0.5.12" in t.notes["step_a_q"]


def test_0_5_10_ignores_a_softmax_scale_its_callers_never_pass():
    """0.5.10's forward has no softmax_scale and its VisionAttention never passes one: the target says
    the target declines it, and the wrapper indeed computes with D**-0.5 when given one."""
    t = vision_target("0.5.10")
    case = Case(VisionProblem(lengths=(5, 4), H=2, D=8, dtype="float16", path="kwargs", softmax_scale=0.37))
    assert "softmax_scale" in t.declines
    verdict = check_case(t, case, "cpu")
    assert not verdict.ok and verdict.kind == "mismatch"
    assert check_case(vision_target("0.5.12"), case, "cpu").ok  # 0.5.11 added the argument


def test_the_releases_metadata_helper_agrees_with_our_builder():
    from kernel_oracle.reference.vision_metadata import prepare_flashinfer_cudnn_metadata

    helper = vision_target("0.5.23").entry("vision").metadata_helper
    for lens in ([5, 0, 9], [3], [1] * 9, [4096, 1], [5000], list(range(1, 18))):
        cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
        up = helper(cu, torch.device("cpu"), elem_per_token=6)
        ours = prepare_flashinfer_cudnn_metadata(cu.tolist(), "cpu", elem_per_token=6, sequence_lengths_4d=True)
        for name in ("cu_seqlens", "seq_lens", "packed_indptrs", "sequence_lengths"):
            assert torch.equal(getattr(up, name).to(torch.int64), getattr(ours, name).to(torch.int64)), (lens, name)
        assert (up.max_seqlen, up.flashinfer_max_seqlen) == (ours.max_seqlen, ours.flashinfer_max_seqlen)


def test_the_releases_metadata_helper_raising_is_the_targets_error_not_the_harness():
    """0.5.23's metadata helper raises on a batch of no sequences (docs/upstream/sglang_vision_metadata_empty_batch.md):
    that is the release's code on a valid input, judged as the target's raise (a contract finding naming
    the helper), never a harness error that would stop the campaign."""
    case = Case(VisionProblem(lengths=(), H=4, D=16, dtype="float16", path="metadata", metadata_source="helper"))
    verdict = check_case(vision_target("0.5.23"), case, "cpu")
    assert not verdict.ok and verdict.kind == "contract", verdict.message
    assert "max(): Expected reduction dim" in verdict.message
    assert "prepare_flashinfer_cudnn_vision_attention_metadata" in verdict.bucket.frame, verdict.bucket


# ---- the loader ----------------------------------------------------------------------------------------------

def test_the_wrapper_runs_the_releases_own_lines_and_never_imports_sglang():
    from kernel_oracle.fuzz.targets.cudnn_prefill_torch import cudnn_batch_prefill_with_kv_cache

    before = set(sys.modules)  # a reproducer test in this worker may have loaded wheel files under sglang names
    vision_target("0.5.23")
    cls = load_vision_wrapper(release_files("0.5.23"), cudnn_batch_prefill_with_kv_cache, "cpu-test").cls
    path = inspect.getsourcefile(cls.forward)
    assert path.endswith(VISION_FILE)
    assert "batch_offsets_k=indptr_qk" in inspect.getsource(cls.forward)  # the release's text, not ours
    assert not [m for m in set(sys.modules) - before if m == "sglang" or m.startswith("sglang.")]


def test_identities_group_the_releases_that_run_the_same_wrapper():
    ids = {v: read_vision_code(release_files(v)).identity for v in VISION_RELEASES}
    assert ids["0.5.12"] == ids["0.5.15"]  # 0.5.11 - 0.5.15.post1: one wrapper
    assert len({ids["0.5.10"], ids["0.5.12"], ids["0.5.16"], ids["0.5.23"]}) == 4


def _wheel_with_vision(tmp_path, version: str, source: str):
    tmp_path.mkdir(parents=True, exist_ok=True)
    wheel = tmp_path / f"sglang-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("sglang/__init__.py", "raise ImportError('must never run')\n")
        zf.writestr(VISION_FILE, source)
        zf.writestr(f"sglang-{version}.dist-info/METADATA", f"Name: sglang\nVersion: {version}\n")
    return TargetSources(sglang_wheel=str(wheel))


def test_a_bug_planted_in_the_releases_wrapper_is_caught(tmp_path):
    """The target runs the release's code, not a copy of our own: v's offsets replaced by q's in a copy
    of 0.5.23's file fail on a strided v, and the untouched copy passes."""
    source = release_files("0.5.23").read(VISION_FILE)
    assert source.count("batch_offsets_v=indptr_v") == 1
    case = Case(VisionProblem(lengths=(7, 3), H=2, D=8, dtype="float16", layout="v_strided", path="metadata"))
    clean = resolve_target("sglang==9.0.0", "cpu", sources=_wheel_with_vision(tmp_path / "a", "9.0.0", source))
    assert check_case(clean, case, "cpu").ok
    planted = source.replace("batch_offsets_v=indptr_v", "batch_offsets_v=indptr_qk")
    bad = resolve_target("sglang==9.0.1", "cpu", sources=_wheel_with_vision(tmp_path / "b", "9.0.1", planted))
    assert bad.available and bad.ops("lora") == ()
    verdict = check_case(bad, case, "cpu")
    assert not verdict.ok and verdict.kind == "mismatch", verdict


@pytest.mark.parametrize("change, message", [
    (("    if not _is_cuda:", "    if not _is_cuda or needs_a_helper():"),
     "uses 'needs_a_helper' (bound as nothing at top level), which the standalone loader has no stand-in for"),
    (('"(b s) h d -> b s h d"', '"(b s) h d -> b h s d"'),
     "calls rearrange with pattern '(b s) h d -> b h s d', which the stand-in does not know"),
    (("from einops import rearrange", "from sglang.utils import rearrange"),
     "binds 'rearrange' as ['sglang.utils.rearrange'], not as the stand-in expects"),
])
def test_what_the_loader_cannot_answer_is_one_line(tmp_path, change, message):
    source = release_files("0.5.23").read(VISION_FILE)
    assert change[0] in source
    sources = _wheel_with_vision(tmp_path, "9.0.2", source.replace(change[0], change[1]))
    with pytest.raises(LoaderError) as info:
        read_vision_code(wheel_release(sources.sglang_wheel))
    assert message in str(info.value) and "\n" not in str(info.value)
    t = resolve_target("sglang==9.0.2", "cpu", sources=sources)
    assert not t.available and message in t.reason


def test_the_stand_in_engine_is_what_the_wrapper_calls():
    """The kwargs a wrapper passes reach the CPU engine as FlashInfer documents them."""
    t = vision_target("0.5.23")
    call = materialize(VisionProblem(lengths=(3, 2), H=2, D=8, dtype="float16", path="metadata"), "cpu")
    out = t.entry("vision")(*call.args, **call.kwargs)
    assert out.shape == (5, 2, 8) and out.dtype == torch.float16


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="FlashInfer's cuDNN prefill runs on CUDA only")
@pytest.mark.parametrize("case", ["ragged, an empty sequence", "strided v, shifted v and o", "4-D inputs",
                                  "9 sequences (batch bucket 16)"])
@pytest.mark.parametrize("version", VISION_RELEASES)
def test_release_wrapper_on_flashinfers_engine(version, case):
    """On a GPU the release's own wrapper calls FlashInfer's real engine (unavailable, with the reason,
    where FlashInfer does not import)."""
    wheel_or_skip(version)
    t = resolve_target(f"sglang=={version}", "cuda")
    if not t.has("vision"):
        pytest.skip(f"sglang=={version} vision on CUDA: {t.notes.get('vision')}")
    assert "the engine is FlashInfer's cudnn_batch_prefill_with_kv_cache" in t.reason
    fields = {**VISION_CASES[case], "D": 64}
    verdict = check_case(t, Case(VisionProblem(dtype="bfloat16", path="kwargs", seed=5, **fields)), "cuda")
    assert verdict.ok, f"sglang=={version} [{case}]: {verdict.kind}: {verdict.message}"
