"""SGLang's real kv_b LoRA kernels, per release, loaded standalone from the published wheels.

* the 0.5.23 kernels (default and TRT-LLM-style) against the oracle under the interpreter, fp32 and
  fp16 (bf16 is excluded under the interpreter: the target says why), on tile edges, permutations,
  rank-0 slots, strided views and CUDA-graph replays with stale host ints;
* every release's exact upstream messages, read from its own source and raised by its kernels;
* the loader: it never runs ``sglang/__init__``, names the release and module it loaded, serves an
  installed SGLang whose heavy imports fail, and refuses a release without kernels in one line.
"""

from __future__ import annotations

import ast
import re
import sys
import zipfile

import pytest

from kernel_oracle.fuzz.targets import TargetSources, resolve_target
from kernel_oracle.harness.device import interpreting
from kernel_oracle.fuzz.targets.sglang import release_target as build_release_target
from kernel_oracle.fuzz.targets.sglang_wheel import (LoaderError, find_wheel, installed_release, locate_kernels,
                                                     module_name)
from kernel_oracle.harness.check import Case, check_case
from kernel_oracle.harness.problems import materialize
from kernel_oracle.harness.problem_lora import LoRAProblem
from kernel_oracle.reference.contracts import upstream_contracts

from oracle_tests._sglang_releases import RELEASES, release_files
from oracle_tests._sglang_releases import release_target as _release_target
from oracle_tests.conftest import DEVICE

# The kernels run where this session runs Triton: interpreted on the CPU machine, compiled on the GPU one
# (a "cpu" call of compiled Triton kernels would fail for the wrong reason).


def release_target(spec: str):
    return _release_target(spec, DEVICE)

SPLIT_STEPS = ("step_a_q", "step_a_v", "step_b_q", "step_b_v")
TESTED_DTYPES = ("float32", "float16")  # bf16: excluded under the interpreter (asserted below)

# Edge cases (tile edges at 16-row tiles, CUDA-graph replay, rank 0, permutation, views): name -> problem fields
EDGE_CASES = {
    "tile edges 15/16/17 rows": dict(seg_lens=(15, 16, 17), weight_indices=(0, 1, 0), lora_ranks=(16, 8)),
    "empty and 1-row segments": dict(seg_lens=(0, 1, 0, 2), weight_indices=(1, 0, 1, 1), lora_ranks=(16, 16)),
    "rank 0 slot and rank above R": dict(seg_lens=(3, 4), weight_indices=(0, 1), lora_ranks=(0, 19)),
    "permuted rows, odd dims": dict(seg_lens=(5, 3), weight_indices=(1, 0), lora_ranks=(16, 12), permute=True,
                                    qk=17, vd=15, C=33),
    "strided, offset views": dict(seg_lens=(4, 2), weight_indices=(0, 1), lora_ranks=(16, 16), strided=True,
                                  offset_views=True, extra_rows=2),
    "graph replay, stale host ints": dict(seg_lens=(3, 5, 2), weight_indices=(0, 1, 1), lora_ranks=(16, 8),
                                          cuda_graph_pad_to=4, stale_host_ints=(1, 1, 17)),
    "graph replay, max_len from seg_lens": dict(seg_lens=(2, 6), weight_indices=(1, 0), lora_ranks=(16, 16),
                                                cuda_graph_pad_to=3, with_max_len=False),
}


def _problem(op: str, dtype: str, fields: dict) -> LoRAProblem:
    base = dict(H=2, qk=16, vd=16, C=32, R=16, scalings=(1.0, -0.5), seed=7)
    base.update(fields)
    return LoRAProblem(op=op, dtype=dtype, **base)


# ---- the 0.5.23 kernels against the oracle -------------------------------------------------------------------

@pytest.mark.parametrize("variant", ["sglang", "sglang-trt"])
def test_release_target_names_release_and_module(variant):
    t = release_target(f"{variant}==0.5.23")
    module = ("sglang.kernels.ops.lora.dense.kv_b_lora_absorbed" if variant == "sglang"
              else "sglang.kernels.ops.lora.dense.trtllm_lora_temp.kv_b_lora_absorbed")
    rec = t.to_record()
    assert rec["reason"].startswith(f"sglang 0.5.23: {module}, loaded standalone from the wheel ")
    assert rec["release"] == "0.5.23"  # selects the known issues of this release (harness.known_issues)
    # the default variant's target also runs the release's own vision wrapper (test_sglang_release_vision.py)
    assert rec["entry_points"] == sorted(SPLIT_STEPS + (("vision",) if variant == "sglang" else ()))
    assert set(rec["missing"]) == {"q_side_fused", "v_side_fused"} | ({"vision"} if variant == "sglang-trt" else set())
    assert "SGLang defines the four split steps only" in rec["missing"]["q_side_fused"]
    lora_excluded = t.excluded_for("lora")
    if interpreting():
        assert "bf16 arithmetic on raw bit patterns" in lora_excluded["bfloat16"]
        if variant == "sglang":  # the wrapper is torch code: bf16 is tested
            assert "bfloat16" not in t.excluded_for("vision")
    else:  # compiled on a GPU: bf16 is tested
        assert "bfloat16" not in lora_excluded
    assert "float32" not in lora_excluded
    assert not rec["strict"]


@pytest.mark.parametrize("dtype", TESTED_DTYPES)
@pytest.mark.parametrize("case", sorted(EDGE_CASES))
@pytest.mark.parametrize("op", SPLIT_STEPS)
@pytest.mark.parametrize("variant", ["sglang", "sglang-trt"])
def test_release_0_5_23_matches_the_oracle(variant, op, case, dtype):
    t = release_target(f"{variant}==0.5.23")
    verdict = check_case(t, Case(_problem(op, dtype, EDGE_CASES[case])), DEVICE)
    assert verdict.ok, f"{variant}==0.5.23 {op} {dtype} [{case}]: {verdict.kind}: {verdict.message}"


def test_release_0_5_12_skips_segments_at_graph_replay():
    """PR #28371's bug, by hand: stale host ints at replay leave three of four segments undone."""
    p = _problem("step_a_q", "float32", EDGE_CASES["graph replay, stale host ints"])
    bad = check_case(release_target("sglang==0.5.12"), Case(p), DEVICE)
    assert not bad.ok and bad.kind == "mismatch"
    eager = _problem("step_a_q", "float32", dict(seg_lens=(3, 5, 2), weight_indices=(0, 1, 1), lora_ranks=(16, 8)))
    assert check_case(release_target("sglang==0.5.12"), Case(eager), DEVICE).ok  # eager mode was right


# ---- each release's messages, from its own source ------------------------------------------------------------

def _template(node) -> str | None:
    """A raised message as a template: string constants kept, every f-string field as ``{}``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def raised_messages(source: str) -> set[tuple[str, str]]:
    """``{(exception type, message template)}`` of every ``raise X("...")`` in ``source``."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and isinstance(node.exc.func, ast.Name):
            for arg in node.exc.args[:1]:
                text = _template(arg)
                if text is not None:
                    out.add((node.exc.func.id, text))
    return out


def _normalise(template: str) -> str:
    return re.sub(r"\{[a-z_]+\}", "{}", template)


@pytest.mark.parametrize("version", RELEASES)
def test_release_kv_b_messages_are_the_contract_table(version):
    """Releases 0.5.12 - 0.5.23 share one kv_b message (docs/sglang_releases.md): each file raises
    exactly the upstream rows of the contract table, no more, no less."""
    rel = release_files(version)
    want = {(c.exc_type.__name__, _normalise(c.template)) for c in upstream_contracts("lora")}
    found = locate_kernels(rel)
    assert "default" in found
    for variant, path in found.items():
        assert raised_messages(rel.read(path)) == want, f"sglang {version} {variant} ({path})"


@pytest.mark.parametrize("version", RELEASES)
def test_release_vision_messages_are_the_contract_table(version):
    rel = release_files(version)
    have = raised_messages(rel.read("sglang/srt/layers/attention/vision.py"))
    for c in upstream_contracts("vision"):
        assert (c.exc_type.__name__, _normalise(c.template)) in have, f"sglang {version}: {c.id}"


@pytest.mark.parametrize("version", RELEASES)
def test_release_kernels_raise_the_contract_exactly(version):
    """Behaviour, not just text: the loaded kernels raise the upstream error before any work."""
    from kernel_oracle.harness.mutations import Mutation

    t = release_target(f"sglang=={version}")
    case = Case(_problem("step_a_q", "float32", dict(seg_lens=(2, 3), weight_indices=(0, 1), lora_ranks=(16, 16))),
                Mutation("lora", "drop_max_len_and_seg_lens", 0, 1))
    verdict = check_case(t, case, DEVICE)
    assert verdict.ok, verdict.message
    call = case.call(DEVICE)
    with pytest.raises(ValueError) as info:
        t.entry("step_a_q")(*call.args, **call.kwargs)
    assert str(info.value) == "LoRA batch_info must provide max_len or seg_lens."


# ---- the loader ----------------------------------------------------------------------------------------------

def test_loading_never_imports_sglang():
    before = set(sys.modules)  # a reproducer test in this worker may have loaded wheel files under sglang names
    release_target("sglang==0.5.23")
    release_target("sglang-trt==0.5.23")
    assert not [m for m in set(sys.modules) - before if m == "sglang" or m.startswith("sglang.")]


def test_release_without_kernels_or_wrapper_is_refused_in_one_line(tmp_path):
    wheel = tmp_path / "sglang-0.4.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("sglang/__init__.py", "raise ImportError('must never run')\n")
        zf.writestr("sglang/srt/lora/utils.py", "class LoRABatchInfo: pass\n")
        zf.writestr("sglang-0.4.0.dist-info/METADATA", "Name: sglang\nVersion: 0.4.0\n")
    for spec in ("sglang==0.4.0", "sglang-trt==0.4.0"):
        t = resolve_target(spec, "cpu", sources=TargetSources(sglang_wheel=str(tmp_path)))
        assert not t.available and "\n" not in t.reason
        kernels = ("sglang 0.4.0 has no kv_b LoRA kernels (no "
                   f"{'default' if spec.startswith('sglang==') else 'trt'} kv_b_lora_absorbed.py; the "
                   "kernels exist from 0.5.12, the TRT-LLM-style variant from 0.5.13)")
        wrapper = "; sglang 0.4.0 has no sglang/srt/layers/attention/vision.py (the vision backend exists from 0.5.10)"
        assert t.reason == kernels + (wrapper if spec.startswith("sglang==") else "")


def test_the_trt_variant_starts_in_0_5_13():
    release_files("0.5.12")  # skips without the wheel
    t = resolve_target("sglang-trt==0.5.12", "cpu")
    assert not t.available
    assert t.reason == ("sglang 0.5.12 has only the ['default'] variant (no trt kv_b_lora_absorbed.py; the kernels "
                        "exist from 0.5.12, the TRT-LLM-style variant from 0.5.13)")


def test_wheel_argument_errors_name_the_problem(tmp_path):
    other = tmp_path / "sglang-0.5.12-cp311-cp311-manylinux_2_34_x86_64.whl"
    other.write_bytes(b"")
    with pytest.raises(LoaderError) as info:
        find_wheel("0.5.23", str(other))
    assert str(info.value) == (f"--sglang-wheel {other} is sglang 0.5.12, not 0.5.23; pass the wheel of 0.5.23 or "
                               f"a directory holding it")
    with pytest.raises(LoaderError, match=r"no such file or directory; pass a wheel or a directory of wheels"):
        find_wheel("0.5.23", str(tmp_path / "missing"))
    t = resolve_target("sglang==latest", "cpu")
    assert not t.available and t.reason == ("'sglang==latest': version 'latest' is not a release number; "
                                            "pass e.g. sglang==0.5.23")


def _install_fake(site, rel, broken_init: str) -> None:
    """An installed SGLang in ``site``: the release's kernel files, their helpers, and a package
    ``__init__`` that fails the way a machine without transformers fails."""
    files = [p for p in rel.names if p.endswith(("kv_b_lora_absorbed.py", "kernel_utils.py"))]
    record = []
    for p in files + ["sglang/__init__.py"]:
        dest = site / p
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(broken_init if p == "sglang/__init__.py" else rel.read(p))
        record.append(f"{p},,")
    info = site / f"sglang-{rel.version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {rel.version}\n")
    (info / "RECORD").write_text("\n".join(record + [f"{info.name}/METADATA,,", f"{info.name}/RECORD,,"]) + "\n")


def test_installed_sglang_with_failing_imports_is_loaded_standalone(tmp_path, monkeypatch):
    rel = release_files("0.5.23")
    _install_fake(tmp_path, rel, "raise ModuleNotFoundError(\"No module named 'transformers'\")\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    installed = installed_release()
    assert installed.version == "0.5.23"
    t = build_release_target("sglang", installed, "default", DEVICE, try_import=True)
    assert t.available, t.reason
    module = module_name("sglang/kernels/ops/lora/dense/kv_b_lora_absorbed.py")
    assert t.reason == (f"sglang 0.5.23: {module}, loaded standalone from the installed distribution at {tmp_path} "
                        f"(importing it failed: import {module} failed: ModuleNotFoundError: No module named "
                        f"'transformers')")
    p = _problem("step_b_v", "float32", EDGE_CASES["graph replay, stale host ints"])
    assert check_case(t, Case(p), DEVICE).ok
    assert "sglang" not in sys.modules


def test_stale_host_ints_reach_the_kernels_as_drawn():
    call = materialize(_problem("step_a_q", "float32", EDGE_CASES["graph replay, stale host ints"]))
    bi = call.args[2]
    assert (bi.use_cuda_graph, bi.bs, bi.num_segments, bi.max_len) == (True, 1, 1, 17)
    assert bi.weight_indices.shape[0] == 4


def test_kernels_in_an_unknown_layout_are_found_by_their_entry_points(tmp_path):
    """A release that moved the files again: SPEC's table misses, the search finds both variants."""
    rel = release_files("0.5.23")
    moved = {"sglang/kernels/ops/lora/dense/kv_b_lora_absorbed.py": "sglang/lora_v2/kv_b.py",
             "sglang/kernels/ops/lora/dense/trtllm_lora_temp/kv_b_lora_absorbed.py": "sglang/lora_v2/trtllm/kv_b.py"}
    wheel = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name in rel.names:
            if name.endswith((".py", "METADATA")) and ("lora" in name or name.endswith("METADATA")):
                data = rel.read(name)
                if name.endswith("METADATA"):
                    name, data = "sglang-9.9.9.dist-info/METADATA", "Name: sglang\nVersion: 9.9.9\n"
                zf.writestr(moved.get(name, name), data)
    sources = TargetSources(sglang_wheel=str(wheel))
    t = resolve_target("sglang==9.9.9", DEVICE, sources=sources)
    assert t.available and t.reason.startswith("sglang 9.9.9: sglang.lora_v2.kv_b, loaded standalone from the wheel")
    trt = resolve_target("sglang-trt==9.9.9", DEVICE, sources=sources)
    assert trt.available and trt.reason.startswith("sglang 9.9.9: sglang.lora_v2.trtllm.kv_b, loaded standalone")
    p = _problem("step_a_v", "float32", EDGE_CASES["graph replay, stale host ints"])
    assert check_case(t, Case(p), DEVICE).ok and check_case(trt, Case(p), DEVICE).ok
