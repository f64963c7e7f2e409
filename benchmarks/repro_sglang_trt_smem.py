"""Standalone repro: SGLang 0.5.23's TRT-LLM-style ``step_a_v_fwd`` in fp32 with buffer rank R > 64.

``python -m kernel_oracle.benchmarks.repro_sglang_trt_smem WHEEL`` (a CUDA machine; WHEEL: the release's
wheel or the slim one of scripts/sglang_wheels.sh).  Only the wheel loader is ours (it answers the kernel
file's two sglang imports); the call is built by hand, no harness, oracle or campaign.  Measured on the
H200 (2026-11-30): fp32 R=65 C=64 and fp32 R=128 C=512 raise ``OutOfResources: shared memory, Required:
294912, Hardware limit: 232448``; fp32 R=64 C=512 and bf16 R=128 C=512 run.  The wrapper sizes the
rank tile as ``next_power_of_2(R)`` with a 256-wide K tile, which fp32 cannot fit past R=64.
"""
import sys
import types

import torch

from kernel_oracle.fuzz.targets.sglang_wheel import wheel_release, locate_kernels, load_kernel_module
rel = wheel_release(sys.argv[1])
mod = load_kernel_module(rel, locate_kernels(rel)["trt"], "trt")
dev = "cuda"
def batch(lens, L):
    ind = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device=dev)
    bi = types.SimpleNamespace(use_cuda_graph=False, bs=len(lens), num_segments=len(lens), seg_indptr=ind,
        weight_indices=torch.arange(len(lens), dtype=torch.int32, device=dev) % L,
        lora_ranks=torch.full((L,), 16, dtype=torch.int32, device=dev), scalings=torch.ones(L, device=dev),
        max_len=max(lens), seg_lens=torch.tensor(lens, dtype=torch.int32, device=dev), permutation=None)
    return bi
for dtype, R, C, H in [(torch.float32, 65, 64, 3), (torch.float32, 128, 512, 16), (torch.float32, 64, 512, 16),
                       (torch.bfloat16, 128, 512, 16)]:
    lens = [31, 48]; L = 2
    x = torch.randn(sum(lens), H, C, device=dev, dtype=dtype)
    A = torch.randn(L, R, C, device=dev, dtype=dtype)
    try:
        out = mod.step_a_v_fwd(x, A, batch(lens, L)); torch.cuda.synchronize()
        print(f"{dtype} R={R} C={C}: ok, out {tuple(out.shape)}")
    except Exception as e:
        print(f"{dtype} R={R} C={C}: {type(e).__name__}: {str(e)[:160]}")
