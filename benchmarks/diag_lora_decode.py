"""A fused decode call, alone in a process, for a profiler: its compiled variants, its time, N more calls.

python -m kernel_oracle.benchmarks.diag_lora_decode [--shape decode-bs64] [--side q] [--calls 20]

Prints the compiled variants (warps, stages, shared memory, registers, spills) and the
``do_bench_cudagraph`` median, then makes ``--calls`` plain calls, so that
``ncu -k regex:fused --launch-skip K --launch-count 1 ...`` can pick one warm launch.  Why decode-bs64
stays at ~10 us (q) and ~7.4 us (v) against a launch + route floor of ~2.3 / ~2.0 us is the question
(docs/kernels_lora.md, "Decode").
"""

from __future__ import annotations

import argparse
import sys

import torch


def main(argv=None) -> int:
    import triton.testing

    import kernel_oracle.kernels.lora as klora
    from kernel_oracle.benchmarks import bench_lora as B
    from kernel_oracle.benchmarks.diag_lora_prefill import compiled_variants
    from kernel_oracle.kernels.lora import _kernels as K

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="decode-bs64", choices=[s for s in B.SHAPES if s.startswith("decode")])
    ap.add_argument("--side", default="q", choices=["q", "v"])
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA device", file=sys.stderr)
        return 2
    d = B._inputs(B.SHAPES[args.shape], 0)
    fn = B._calls(klora, d, args.side)["fused"]
    fn()
    torch.cuda.synchronize()
    us = triton.testing.do_bench_cudagraph(fn, rep=50, return_mode="median") * 1e3
    compiled_variants(K.q_side_fused_kernel if args.side == "q" else K.v_side_fused_kernel,
                      f"{args.shape}_{args.side}")
    print(f"{args.shape} {args.side} fused us {us:.2f}", flush=True)
    for _ in range(args.calls):
        fn()
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
