"""The profiler driver for fused decode calls (``python -m kernel_oracle.benchmarks.diag_lora_decode``):
it refuses a machine without CUDA in one line, rejects shapes it does not have, and on a GPU prints the
compiled variants and the timing a profiler run is read against."""

from __future__ import annotations

import pytest

from kernel_oracle.benchmarks import diag_lora_decode

from .conftest import HAS_CUDA


def test_unknown_shape_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        diag_lora_decode.main(["--shape", "prefill-8x2048"])
    assert exc.value.code == 2
    assert "invalid choice: 'prefill-8x2048'" in capsys.readouterr().err


@pytest.mark.skipif(HAS_CUDA, reason="the no-GPU refusal; a GPU runs the call itself (below)")
def test_without_cuda_it_says_so(capsys):
    assert diag_lora_decode.main(["--side", "v"]) == 2
    assert capsys.readouterr().err == "needs a CUDA device\n"


@pytest.mark.skipif(not HAS_CUDA, reason="times a fused decode call on the GPU")
@pytest.mark.parametrize("side", ["q", "v"])
def test_on_a_gpu_it_prints_variants_and_the_time(side, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("OUT", str(tmp_path))
    assert diag_lora_decode.main(["--side", side, "--calls", "1"]) == 0
    out = capsys.readouterr().out
    assert "regs" in out and f"decode-bs64 {side} fused us " in out, out
    assert ".version" in (tmp_path / f"decode-bs64_{side}.ptx").read_text()  # the PTX of a compiled variant
