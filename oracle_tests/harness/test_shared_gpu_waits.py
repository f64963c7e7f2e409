"""Note [Shared GPU waits]: a worker sharing the GPU asks the driver for blocking waits before torch
makes its context, and the context torch then uses has them; a worker alone keeps CUDA's default."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()

# the flags of device 0's primary context after torch has made and used it (0x04: blocking waits)
_FLAGS = """
import ctypes, sys, torch
{before}
torch.ones(1, device="cuda").sum().item()
cuda = ctypes.CDLL("libcuda.so.1")
dev, flags, active = ctypes.c_int(0), ctypes.c_uint(0), ctypes.c_int(0)
assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cuda.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active)) == 0
print(active.value, flags.value & 0x07)
"""


def _flags(before: str) -> tuple[int, int]:
    proc = subprocess.run([sys.executable, "-c", _FLAGS.format(before=before)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    active, sched = proc.stdout.split()
    return int(active), int(sched)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="the flags of a CUDA context need a CUDA device")
def test_the_context_torch_uses_blocks_while_waiting_once_asked():
    set_first = "from kernel_oracle.harness.device import yield_while_waiting\nassert yield_while_waiting()"
    assert _flags(set_first) == (1, 0x04)
    assert _flags("") != (1, 0x04)  # CUDA's default (auto: a spin on a host with more cores than contexts)


def test_without_a_cuda_driver_nothing_is_set(monkeypatch):
    import ctypes

    from kernel_oracle.harness import device

    def no_driver(name, *args, **kwargs):
        raise OSError(f"{name}: cannot open shared object file")
    monkeypatch.setattr(ctypes, "CDLL", no_driver)
    assert device.yield_while_waiting() is False


def test_a_driver_without_the_call_is_left_alone(monkeypatch):
    """A driver older than CUDA 11 has no ``cuDevicePrimaryCtxSetFlags_v2``: no flag, no crash."""
    import ctypes

    from kernel_oracle.harness import device

    class OldDriver:
        def __getattr__(self, name):
            raise AttributeError(f"undefined symbol: {name}")
    monkeypatch.setattr(ctypes, "CDLL", lambda name, *a, **k: OldDriver())
    assert device.yield_while_waiting() is False
