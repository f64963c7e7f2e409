"""The upstream switches of the kv_b files as target configuration (Note [SGLang switches]): each
variant runs its own code path (on the CPU where it can), the record names the configuration, and a
switch the loader does not know is one line of the record."""

from __future__ import annotations

import sys
import zipfile

import pytest
import torch

from kernel_oracle.fuzz.targets import TargetError, TargetSources, TargetSpec, resolve_target
from kernel_oracle.fuzz.targets.sglang_switches import ReleaseConfiguration, declared_switches, switches_read
from kernel_oracle.harness.check import Case, check_case
from kernel_oracle.harness.device import interpreting
from kernel_oracle.harness.problem_lora import LoRAProblem

from oracle_tests._sglang_releases import release_files, release_target
from oracle_tests.conftest import DEVICE

TRT_FILE = "sglang/kernels/ops/lora/dense/trtllm_lora_temp/kv_b_lora_absorbed.py"
ENVIRON = "sglang/srt/lora/trtllm_lora_temp/environ.py"

# spec configuration -> whether step_a_q takes the cuBLAS path (one resident slot)
CUBLAS_PATH = {
    "": False,
    "@cublas=on": True,
    "@cublas_kv_b=on": True,
    "@lora_opti=on,cublas_kv_b=on": True,
    "@lora_opti=off,cublas=on": False,  # the master switch gates every lora_envs switch
    "@lora_opti=on": False,  # the cuBLAS switches default to off
    "@pdl=off": False,
}


def _problem(ranks=(16,), **kw) -> LoRAProblem:
    base = dict(op="step_a_q", dtype="float32", seg_lens=(3, 0, 5), weight_indices=(0, 0, 0), lora_ranks=ranks,
                scalings=(1.0,) * len(ranks), H=2, qk=16, vd=16, C=32, R=16, seed=5)
    base.update(kw)
    return LoRAProblem(**base)


@pytest.fixture
def bmm_calls(monkeypatch):
    """The ``torch.bmm`` calls made by the release's kernel file itself (the oracle's are not counted)."""
    calls = []
    real = torch.bmm

    def counting(*args, **kwargs):
        if sys._getframe(1).f_code.co_filename.endswith("kv_b_lora_absorbed.py"):
            calls.append(tuple(a.shape for a in args if isinstance(a, torch.Tensor)))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "bmm", counting)
    return calls


@pytest.mark.parametrize("config", sorted(CUBLAS_PATH))
def test_each_configuration_runs_its_code_path_and_matches_the_oracle(config, bmm_calls):
    t = release_target(f"sglang-trt==0.5.23{config}", DEVICE)
    for problem in (_problem(), _problem(permute=True, extra_rows=2), _problem(cuda_graph_pad_to=4,
                                                                                stale_host_ints=(1, 1, 9))):
        verdict = check_case(t, Case(problem), DEVICE)
        assert verdict.ok, f"{config}: {verdict.kind}: {verdict.message}"
    assert bool(bmm_calls) == CUBLAS_PATH[config], bmm_calls
    if config:
        assert "configuration: SGLANG_EXPERIMENTAL_LORA_OPTI=" in t.reason


def test_the_cublas_path_needs_one_resident_slot(bmm_calls):
    t = release_target("sglang-trt==0.5.23@cublas_kv_b=on", DEVICE)
    assert check_case(t, Case(_problem(ranks=(16, 8), weight_indices=(1, 0, 1), scalings=(1.0, 0.5))), DEVICE).ok
    assert not bmm_calls


def test_the_record_names_the_configuration():
    t = release_target("sglang-trt==0.5.23@lora_opti=on,cublas_kv_b=on,pdl=off", DEVICE)
    assert t.name == "sglang-trt==0.5.23@cublas_kv_b=on,lora_opti=on,pdl=off"  # the canonical spelling
    assert t.reason.endswith("; configuration: SGLANG_EXPERIMENTAL_LORA_OPTI=1, SGLANG_OPT_LORA_CUBLAS_KV_B=1, "
                             "PDL off")


def test_a_gated_switch_turns_the_master_switch_on_unless_told_otherwise():
    def config(text):
        return ReleaseConfiguration.from_spec(TargetSpec.parse(f"sglang-trt==0.5.23@{text}"))

    assert config("cublas=on").master and config("cublas=on").reads("SGLANG_OPT_LORA_CUBLAS", False)
    off = config("lora_opti=off,cublas=on")
    assert not off.master and not off.reads("SGLANG_OPT_LORA_CUBLAS", False)
    assert config("lora_opti=on").reads("SGLANG_ENABLE_LORA_SHRINK_SPLIT_K", True)  # the release's default
    assert not ReleaseConfiguration().reads("SGLANG_ENABLE_LORA_SHRINK_SPLIT_K", True)  # gated off


def test_the_stand_in_declares_the_releases_own_switches():
    declared = declared_switches(release_files("0.5.23").read(ENVIRON))
    assert declared["SGLANG_OPT_LORA_CUBLAS"] is False and declared["SGLANG_OPT_LORA_CUBLAS_KV_B"] is False
    assert declared["SGLANG_ENABLE_LORA_SHRINK_SPLIT_K"] is True
    for version in ("0.5.15", "0.5.23"):
        reads = switches_read(release_files(version).read(
            next(p for p in release_files(version).names if p.endswith("trtllm_lora_temp/triton_ops/"
                                                                       "kv_b_lora_absorbed.py")
                 or p.endswith("trtllm_lora_temp/kv_b_lora_absorbed.py"))))
        assert reads == {"lora_envs.SGLANG_OPT_LORA_CUBLAS", "lora_envs.SGLANG_OPT_LORA_CUBLAS_KV_B"}, version


def test_configuration_keys_are_checked_by_the_registry():
    with pytest.raises(TargetError, match=r"configuration key 'fast' is unknown; the only valid keys are "
                                          r"\['cublas', 'cublas_kv_b', 'lora_opti', 'pdl'\]"):
        resolve_target("sglang-trt==0.5.23@fast=on", "cpu")
    with pytest.raises(TargetError, match=r"configuration key 'pdl' is unknown; the only valid keys are \['engine'\]"):
        resolve_target("sglang==0.5.23@pdl=off", "cpu")
    with pytest.raises(TargetError, match=r"pdl='maybe' is invalid; the only valid values are 'on', 'off'"):
        resolve_target("sglang-trt==0.5.23@pdl=maybe", "cpu")


@pytest.mark.skipif(not interpreting(), reason="PDL runs where Triton is compiled for an SM90+ GPU")
def test_pdl_on_cannot_run_under_the_interpreter():
    release_files("0.5.23")
    t = resolve_target("sglang-trt==0.5.23@pdl=on", "cpu")
    assert not t.available and t.reason.startswith("pdl=on: programmatic dependent launch needs compiled Triton on "
                                                   "an SM90+ CUDA GPU")


def test_a_switch_the_loader_does_not_know_is_one_line(tmp_path):
    rel = release_files("0.5.23")
    source = rel.read(TRT_FILE)
    needle = "lora_envs.SGLANG_OPT_LORA_CUBLAS.get()"
    assert source.count(needle) == 3  # step_a_q, step_b_q, step_a_v
    wheel = tmp_path / "sglang-9.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name in rel.names:
            if name.endswith(".py") and "lora" in name:
                text = rel.read(name)
                zf.writestr(name, text.replace(needle, needle + " or lora_envs.SGLANG_OPT_LORA_SHRINK_TUNE.get()", 1)
                            if name == TRT_FILE else text)
        zf.writestr("sglang-9.1.0.dist-info/METADATA", "Name: sglang\nVersion: 9.1.0\n")
    t = resolve_target("sglang-trt==9.1.0", DEVICE, sources=TargetSources(sglang_wheel=str(wheel)))
    assert t.available
    line = ("sglang.kernels.ops.lora.dense.trtllm_lora_temp.kv_b_lora_absorbed reads "
            "lora_envs.SGLANG_OPT_LORA_SHRINK_TUNE, which no configuration key sets: it runs at the release's "
            "default (a lora_envs switch reads off unless lora_opti=on)")
    assert line in t.reason and "\n" not in t.reason
    assert check_case(t, Case(_problem()), DEVICE).ok  # the release's environ.py declares it: it reads off


@pytest.mark.parametrize("target, known", [
    ("sglang-trt==0.5.23@cublas=on,lora_opti=on", "sglang-trt-cublas-step-b-q-every-row"),
    ("sglang-trt==0.5.23@cublas_kv_b=on,pdl=off", "sglang-trt-cublas-step-b-q-every-row"),
    ("sglang-trt==0.5.23", None),  # the Triton path: a mismatch there is new
    ("sglang==0.5.23", None),
])
def test_the_cublas_paths_row_findings_are_known_only_in_its_configurations(target, known):
    from kernel_oracle.harness.known_issues import match_known

    finding = {"id": "F1", "target": target, "op": "step_b_q", "kind": "mismatch", "dtype": "float32",
               "message": "Tensor-likes are not close!", "count": 3,
               "bucket": {"kind": "mismatch", "family": "lora", "cause": "padding", "frame": "", "config": ["float32"]}}
    got = match_known(finding, target, "0.5.23")
    assert (got.id if got else None) == known


def test_a_standalone_repro_names_the_releases_module_and_configuration(tmp_path, capsys):
    """``repro --emit-script`` of a finding of a release loaded standalone imports the release's own module
    (where SGLang is installed) and says in which environment the configuration runs."""
    import json

    from kernel_oracle.cli import main

    release_files("0.5.23")
    case = {"problem": {"family": "lora", **{k: list(v) if isinstance(v, tuple) else v
                                             for k, v in vars(_problem(op="step_b_q", extra_rows=2)).items()
                                             if k != "family"}}, "mutation": None}
    rc = main(["repro", "--case-json", json.dumps(case), "--targets", "sglang-trt==0.5.23@lora_opti=on,cublas=on",
               "--device", DEVICE, "--emit-script", str(tmp_path)])
    assert rc == 1, capsys.readouterr()
    data = json.loads((tmp_path / "case.json").read_text())  # the script's data travels beside it, as JSON
    assert data["target"] == "sglang.kernels.ops.lora.dense.trtllm_lora_temp.kv_b_lora_absorbed:step_b_q_fwd"
    assert "in the environment SGLANG_EXPERIMENTAL_LORA_OPTI=1, SGLANG_OPT_LORA_CUBLAS=1" in data["target_note"]


@pytest.mark.gpu
@pytest.mark.skipif(interpreting() or not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9,
                    reason="pdl=on needs compiled Triton on an SM90+ GPU")
@pytest.mark.parametrize("config", ["@pdl=on", "@pdl=off"])
def test_pdl_on_and_off_on_the_gpu(config):
    t = release_target(f"sglang-trt==0.5.23{config}", DEVICE)
    for problem in (_problem(dtype="bfloat16"), _problem(cuda_graph_pad_to=4, stale_host_ints=(1, 1, 9))):
        verdict = check_case(t, Case(problem), DEVICE)
        assert verdict.ok, f"{config}: {verdict.kind}: {verdict.message}"
