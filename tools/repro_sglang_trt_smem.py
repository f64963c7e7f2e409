"""Standalone repro: SGLang 0.5.23's TRT-LLM-style ``step_a_v_fwd`` in fp32 with buffer rank R > 64.

``python tools/repro_sglang_trt_smem.py WHEEL`` (a CUDA machine; WHEEL: the release's
wheel or the slim one of scripts/sglang_wheels.sh).  Only the wheel loader is ours (it answers the kernel
file's two sglang imports); the call is built by hand, no harness, oracle or campaign.  Measured on the
H200 (2026-11-30): fp32 R=65 C=64 and fp32 R=128 C=512 raise ``OutOfResources: shared memory, Required:
294912, Hardware limit: 232448``; fp32 R=64 C=512 and bf16 R=128 C=512 run.  The wrapper sizes the
rank tile as ``next_power_of_2(R)`` with a 256-wide K tile, which fp32 cannot fit past R=64.
"""
import sys
import types

import torch

from kernel_oracle.fuzz.targets.sglang_wheel import load_kernel_module, locate_kernels, wheel_release

# (dtype, buffer rank R, kv_lora_rank C, heads H): the two that fail on the H200, then two that run
CALLS = [(torch.float32, 65, 64, 3), (torch.float32, 128, 512, 16), (torch.float32, 64, 512, 16),
         (torch.bfloat16, 128, 512, 16)]


def _batch(lens: list[int], slots: int, dev: str) -> types.SimpleNamespace:
    """A plain batch info with SGLang's field names: eager mode, every slot rank 16, unit scaling."""
    indptr = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device=dev)
    return types.SimpleNamespace(
        use_cuda_graph=False, bs=len(lens), num_segments=len(lens), seg_indptr=indptr,
        weight_indices=torch.arange(len(lens), dtype=torch.int32, device=dev) % slots,
        lora_ranks=torch.full((slots,), 16, dtype=torch.int32, device=dev), scalings=torch.ones(slots, device=dev),
        max_len=max(lens), seg_lens=torch.tensor(lens, dtype=torch.int32, device=dev), permutation=None)


def main(argv=None) -> int:
    release = wheel_release((argv or sys.argv[1:])[0])
    module = load_kernel_module(release, locate_kernels(release)["trt"], "trt")
    dev, lens, slots = "cuda", [31, 48], 2
    for dtype, R, C, H in CALLS:
        x = torch.randn(sum(lens), H, C, device=dev, dtype=dtype)  # attn_output (S, H, C)
        A = torch.randn(slots, R, C, device=dev, dtype=dtype)  # A_buf (L, R, C)
        try:
            out = module.step_a_v_fwd(x, A, _batch(lens, slots, dev))
            torch.cuda.synchronize()
            print(f"{dtype} R={R} C={C}: ok, out {tuple(out.shape)}")
        except Exception as exc:  # noqa: BLE001 - the kernel's error is the result
            print(f"{dtype} R={R} C={C}: {type(exc).__name__}: {str(exc)[:160]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
