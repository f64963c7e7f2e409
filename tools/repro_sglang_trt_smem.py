"""Standalone repro: SGLang's TRT-LLM-style ``step_a_v_fwd`` in fp32 with buffer rank R > 64 needs more shared
memory than a Hopper block may have.

``python tools/repro_sglang_trt_smem.py WHEEL [WHEEL ...]`` (a CUDA machine; each WHEEL a release's wheel
or its slim one, ``python -m kernel_oracle.fuzz.targets.sglang_slim``; 0.5.13 and later have the
file).  Only the wheel loader is ours (it answers the kernel file's sglang imports); the call is built by
hand, no harness, oracle or campaign.  The wrapper sizes the rank tile as ``next_power_of_2(R)`` with a
256-wide K tile and a 16-row S tile, which fp32 cannot fit past R=64: on the H200, fp32 R=65 C=64 and fp32
R=128 C=512 raise ``OutOfResources: shared memory, Required: 294912, Hardware limit: 232448``; fp32 R=64
C=512 and bf16 R=128 C=512 run.  The sizing is the same in every release from 0.5.13 to 0.5.23.

Exit 1 when a wheel's fp32 R > 64 calls raise ``OutOfResources`` while its other calls run (reproduced),
0 when none does, 2 without CUDA or when a wheel cannot be loaded.
"""
import sys
import types

import torch

from kernel_oracle.fuzz.targets.sglang_wheel import LoaderError, load_kernel_module, locate_kernels, wheel_release

# (dtype, buffer rank R, kv_lora_rank C, heads H, whether it needs more shared memory than Hopper has)
CALLS = [(torch.float32, 65, 64, 3, True), (torch.float32, 128, 512, 16, True), (torch.float32, 64, 512, 16, False),
         (torch.bfloat16, 128, 512, 16, False)]


def _batch(lens: list[int], slots: int, dev: str) -> types.SimpleNamespace:
    """A plain batch info with SGLang's field names: eager mode, every slot rank 16, unit scaling."""
    indptr = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device=dev)
    return types.SimpleNamespace(
        use_cuda_graph=False, bs=len(lens), num_segments=len(lens), seg_indptr=indptr,
        weight_indices=torch.arange(len(lens), dtype=torch.int32, device=dev) % slots,
        lora_ranks=torch.full((slots,), 16, dtype=torch.int32, device=dev), scalings=torch.ones(slots, device=dev),
        max_len=max(lens), seg_lens=torch.tensor(lens, dtype=torch.int32, device=dev), permutation=None)


def run_wheel(wheel: str) -> tuple[str, bool]:
    """Every call of :data:`CALLS` on ``wheel``'s kernels: the release, and whether the fp32 R > 64 ones
    (only) ran out of shared memory."""
    release = wheel_release(wheel)
    module = load_kernel_module(release, locate_kernels(release)["trt"], "trt")
    dev, lens, slots = "cuda", [31, 48], 2
    as_described = True
    for dtype, R, C, H, too_big in CALLS:
        x = torch.randn(sum(lens), H, C, device=dev, dtype=dtype)  # attn_output (S, H, C)
        A = torch.randn(slots, R, C, device=dev, dtype=dtype)  # A_buf (L, R, C)
        try:
            out = module.step_a_v_fwd(x, A, _batch(lens, slots, dev))
            torch.cuda.synchronize()
            print(f"sglang {release.version} {dtype} R={R} C={C}: ok, out {tuple(out.shape)}")
            as_described &= not too_big
        except Exception as exc:  # noqa: BLE001 - the kernel's error is the result
            print(f"sglang {release.version} {dtype} R={R} C={C}: {type(exc).__name__}: {str(exc)[:160]}")
            as_described &= too_big and type(exc).__name__ == "OutOfResources"
    return release.version, as_described


def main(argv=None) -> int:
    wheels = list(sys.argv[1:] if argv is None else argv)
    if not wheels or not torch.cuda.is_available():
        print("usage: repro_sglang_trt_smem.py WHEEL [WHEEL ...], on a machine with CUDA", file=sys.stderr)
        return 2
    hits = []
    for wheel in wheels:
        try:
            version, reproduced = run_wheel(wheel)
            if reproduced:
                hits.append(version)
        except LoaderError as exc:
            print(f"cannot load {wheel}: {exc}", file=sys.stderr)
            return 2
    print("reproduced: " + (", ".join(hits) if hits else "none"))
    return 1 if hits else 0


if __name__ == "__main__":
    raise SystemExit(main())
