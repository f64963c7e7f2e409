"""Hostile targets that break their process or its CUDA context, as probes of per-case verdicts: a crash
belongs to the case that caused it (the worker is replaced, the next case runs on a fresh one), and the
campaign goes on.  Each target misbehaves only on a case of more than one segment, so a crash finding whose
smallest example has a single segment would be another case's crash, misattributed.

On the CPU the probe writes through a wild pointer (SIGSEGV in the call).  The CUDA probes -- a stray store
that corrupts device memory, the same launched on a side stream and left running when the target returns,
and a kernel still queued on the current stream past the return -- need a CUDA device and are skipped
without one (the GPU check runs them)."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

from oracle_tests.fuzz.test_faults_campaign import LORA_ARGS, _env, _fuzz_cmd, _package

NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="the probe breaks a CUDA context: it needs a CUDA device")

_HEAD = ("import torch\nfrom kernel_oracle.reference.lora import step_a_q_fwd as _ref\n\n"
         "def _triggered(batch_info):\n    return int(batch_info.seg_indptr.numel()) > 2  # more than one segment\n\n")
_STRAY = ("import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef _stray_store(ptr, offset):\n"
          "    tl.store(ptr + offset, 1.0)  # far past every allocation: an illegal address\n\n\n")
PROBES = {
    "wild_pointer": _HEAD + "import ctypes\n\n" + f"def step_a_q_fwd({LORA_ARGS}):\n"
                    f"    out = _ref({LORA_ARGS}, strict=False)\n    if _triggered(batch_info):\n"
                    f"        ctypes.memset(8, 0, 64)  # writes where nothing is mapped: SIGSEGV\n    return out\n",
    "stray_store": _HEAD + _STRAY + f"def step_a_q_fwd({LORA_ARGS}):\n"
                   f"    out = _ref({LORA_ARGS}, strict=False)\n    if _triggered(batch_info):\n"
                   f"        _stray_store[(1,)](out, 1 << 40)\n    return out\n",
    "side_stream_returns_early": _HEAD + _STRAY + f"def step_a_q_fwd({LORA_ARGS}):\n"
                                 f"    out = _ref({LORA_ARGS}, strict=False)\n    if _triggered(batch_info):\n"
                                 f"        side = torch.cuda.Stream()\n"
                                 f"        side.wait_stream(torch.cuda.current_stream())\n"
                                 f"        with torch.cuda.stream(side):\n"
                                 f"            torch.cuda._sleep(20_000_000)\n"
                                 f"            _stray_store[(1,)](out, 1 << 40)\n"
                                 f"    return out  # before the side stream's work has run\n",
    "kernel_past_return": _HEAD + _STRAY + f"def step_a_q_fwd({LORA_ARGS}):\n"
                          f"    out = _ref({LORA_ARGS}, strict=False)\n    if _triggered(batch_info):\n"
                          f"        torch.cuda._sleep(20_000_000)  # still queued when the call returns\n"
                          f"        _stray_store[(1,)](out, 1 << 40)\n    return out\n",
}


def _campaign(tmp_path, probe: str, device: str) -> dict:
    spec = _package(tmp_path, probe, PROBES[probe])
    done = subprocess.run([*_fuzz_cmd("--targets", spec, "--op", "step_a_q", "--cases", "30", "--limits", "tiny",
                                      "--upstream-contracts-only", "--out", tmp_path / "out"), "--device", device],
                          env=_env(tmp_path), capture_output=True, text=True, timeout=900)
    summary = tmp_path / "out" / "summary.json"
    # a campaign that found its crashes exits 1 with its record; a traceback exits 1 too, without one
    assert done.returncode == 1 and summary.exists(), (done.returncode, done.stdout[-3000:] + done.stderr[-3000:])
    return json.loads(summary.read_text())


def _assert_per_case(record: dict) -> None:
    crashes = [f for f in record["findings"] if f["kind"] == "crash"]
    assert crashes, [f["message"][:160] for f in record["findings"]]
    for f in crashes:  # every crash is a case of the trigger's, never the next case's
        assert len(f["problem"]["problem"]["seg_lens"]) > 1, (f["id"], f["problem"]["problem"])
    assert not any("harness error" in n for n in record["notes"]), record["notes"]
    assert record["campaign"]["executed"] >= 10 and any(g["passes"] for g in record["groups"])


def test_a_wild_write_crashes_only_the_case_that_made_it(tmp_path):
    record = _campaign(tmp_path, "wild_pointer", "cpu")
    _assert_per_case(record)
    assert any("SIGSEGV" in f["message"] for f in record["findings"] if f["kind"] == "crash")


@NEEDS_CUDA
@pytest.mark.parametrize("probe", ["stray_store", "side_stream_returns_early", "kernel_past_return"])
def test_a_broken_cuda_context_belongs_to_the_case_that_broke_it(tmp_path, probe):
    record = _campaign(tmp_path, probe, "cuda")
    _assert_per_case(record)
    assert any("CUDA" in f["message"] for f in record["findings"] if f["kind"] == "crash")
