"""A target that leaves the CUDA context broken is a crash of its case, not a harness error
(Note [A broken device context] in fuzz/worker.py): the worker is replaced and the campaign goes on.

On the CPU the broken context is planted: the target raises what CUDA raises then
(``torch.AcceleratorError: CUDA error: misaligned address``) and, like a real broken context, keeps
failing afterwards in the same process (later calls raise it too), while a fresh worker works until
the target's own trigger (more than one segment) comes again.
"""

from __future__ import annotations

import torch

from kernel_oracle.fuzz.campaign import CampaignConfig, run_campaign
from kernel_oracle.harness.device import DeviceLost, is_device_error

BROKEN = '''
import torch
from kernel_oracle.reference.lora import step_a_q_fwd as _right

_BROKEN = []

def step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head):
    if _BROKEN or int(batch_info.seg_indptr.numel()) > 2:
        _BROKEN.append(1)  # the context stays broken for the rest of this process
        raise torch.AcceleratorError("CUDA error: misaligned address")
    return _right(q_nope, B_buf, batch_info, full_K_per_head)
'''


def test_cuda_errors_are_told_from_kernel_errors():
    assert is_device_error(torch.AcceleratorError("CUDA error: an illegal memory access was encountered"))
    assert is_device_error(RuntimeError("CUDA error: device-side assert triggered"))
    assert not is_device_error(RuntimeError("LoRA batch_info must provide max_len or seg_lens."))
    assert not is_device_error(ValueError("CUDA error: a ValueError is the kernel's own"))
    assert issubclass(DeviceLost, RuntimeError)


def test_a_broken_device_context_is_a_crash_and_the_campaign_goes_on(tmp_path, monkeypatch):
    (tmp_path / "breaks_context.py").write_text(BROKEN)
    monkeypatch.syspath_prepend(str(tmp_path))  # the spawned worker inherits sys.path
    rec = run_campaign(CampaignConfig(target="breaks_context", op="step_a_q", budget=30, seed=0, device="cpu",
                                      out_dir=tmp_path / "out", progress=False, shrink_allowance=4,
                                      upstream_contracts_only=True, limits="tiny"))
    assert not any("harness error" in n for n in rec["notes"]), rec["notes"]
    crashes = [f for f in rec["findings"] if f["kind"] == "crash"]
    assert crashes and "left the CUDA context broken" in crashes[0]["message"], rec["findings"]
    assert rec["campaign"]["executed"] >= 10  # fresh workers after each break: the search went on
    assert any(g["passes"] for g in rec["groups"])  # single-segment cases passed on fresh workers


