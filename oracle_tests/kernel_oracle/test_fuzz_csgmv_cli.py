"""``kernel-oracle fuzz --op csgmv`` from the command line, as docs/csgmv.md#fuzzing gives it: the
``reference`` target and SGLang 0.5.23's kernels each run every case they were asked for, of both ops, and
report no finding (exit 0)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from oracle_tests._sglang_releases import wheel_or_skip
from oracle_tests.conftest import DEVICE

pytestmark = pytest.mark.skipif(DEVICE != "cpu", reason="the CPU interpreter run")


def _fuzz(tmp_path, *args: str) -> dict:
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "kernel_oracle", "fuzz", "--op", "csgmv", "--device", "cpu",
                           "--out", str(out), *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads((out / "summary.json").read_text())


@pytest.mark.parametrize("target, cases, dtypes", [
    ("reference", 30, ["float32", "float16", "bfloat16"]),
    ("sglang-csgmv==0.5.23", 20, ["float32", "float16"]),  # no bf16 for third-party Triton under the interpreter
])
def test_a_csgmv_campaign_runs_clean(tmp_path, target, cases, dtypes):
    if target.startswith("sglang"):
        wheel_or_skip("0.5.23")
    rec = _fuzz(tmp_path, "--targets", target, "--cases", str(cases), "--seed", "1")
    assert rec["campaign"]["executed"] == cases and rec["campaign"]["ops"] == ["csgmv_shrink", "csgmv_expand"]
    assert rec["campaign"]["dtypes"] == dtypes
    assert rec["findings"] == [] and rec["summary"]["status"] == "finished"
    assert {g["op"] for g in rec["groups"]} == {"csgmv_shrink", "csgmv_expand"}
