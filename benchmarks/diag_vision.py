"""GPU diagnosis of kernel variants, each in its own process (an illegal access poisons the context).

python -m kernel_oracle.benchmarks.diag_vision            -> runs all variants, prints one line each
python -m kernel_oracle.benchmarks.diag_vision NAME       -> runs one variant
python -m kernel_oracle.benchmarks.diag_vision --only A,B -> runs these variants, one process each
"""
import os
import subprocess
import sys

import torch

VARIANTS = {
    # name: (D, Dv, split, config)
    "split80_default": (80, 80, "1", None),
    "split80_stages1": (80, 80, "1", (128, 128, 8, 1)),
    "split80_bm64": (80, 80, "1", (64, 64, 4, 2)),
    "split_qk_only_80_64": (80, 64, "1", None),
    "split_pv_only_64_80": (64, 80, "1", None),
    "split72_default": (72, 72, "1", None),
    "pad80_default": (80, 80, "0", None),
    "pad72_default": (72, 72, "0", None),
    "d64_default": (64, 64, "1", None),
    # a tail of at least 32 columns ("32"): is the wrong split PV product specific to 16-wide tiles?
    "split_pv_b32_64_80": (64, 80, "32", None),
    "split80_b32": (80, 80, "32", None),
    "split72_b32": (72, 72, "32", None),
    "split_pv_64_80_bm64": (64, 80, "1", (64, 64, 4, 2)),
}


def one(name):
    from kernel_oracle.kernels.vision import KernelConfig, plan_attention, prepare_flashinfer_cudnn_metadata
    from kernel_oracle.reference.vision import flashinfer_cudnn_oracle
    D, Dv, _, cfg = VARIANTS[name]
    torch.manual_seed(0)
    lens, H = [300, 129, 77], 2
    T = sum(lens)
    q, k = (torch.randn(T, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    v = torch.randn(T, H, Dv, device="cuda", dtype=torch.bfloat16)
    md = prepare_flashinfer_cudnn_metadata([0, 300, 429, 506], "cuda", elem_per_token=H * D, v_elem_per_token=H * Dv,
                                           o_elem_per_token=H * Dv)
    kw = {} if cfg is None else {"config": KernelConfig(*cfg)}
    la = plan_attention(q, k, v, None, None, None, forward_metadata=md, **kw)
    out = la.run()
    torch.cuda.synchronize()
    ref = flashinfer_cudnn_oracle(q, k, v, None, None, None, forward_metadata=md)
    err = float((out.double() - ref.value).abs().max())
    print(f"{name}: ok err={err:.3g} config={tuple(la.config)}")


def main():
    names = list(VARIANTS)
    if len(sys.argv) > 2 and sys.argv[1] == "--only":
        names = sys.argv[2].split(",")
    elif len(sys.argv) > 1:
        one(sys.argv[1])
        return
    for name in names:
        split = VARIANTS[name][2]
        env = dict(os.environ, KERNEL_ORACLE_VISION_SPLIT_HEAD_DIM=split, CUDA_LAUNCH_BLOCKING="1")
        r = subprocess.run([sys.executable, "-m", "kernel_oracle.benchmarks.diag_vision", name], env=env, capture_output=True,
                           text=True, timeout=120)
        last = (r.stdout.strip().splitlines() or [""])[-1]
        err = [ln for ln in r.stderr.splitlines() if "Error" in ln or "error" in ln][-1:] if r.returncode else []
        print(f"{name}: rc={r.returncode} {last} {' '.join(err)[:300]}", flush=True)


if __name__ == "__main__":
    main()
