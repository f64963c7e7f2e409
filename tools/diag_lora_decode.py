"""A fused decode call, alone in a process, for a profiler: its compiled variants, its time, N more calls.

python tools/diag_lora_decode.py [--shape decode-bs64] [--side q] [--calls 20]      (a CUDA device)

Prints each compiled variant of the fused kernel (warps, stages, shared memory, registers, spills),
writes the last one's TTGIR and PTX to ``$OUT`` (or the current folder), prints the
``do_bench_cudagraph`` median, then makes ``--calls`` plain calls, so that
``ncu -k regex:fused_kernel --launch-skip 12 --launch-count 1 python tools/diag_lora_decode.py`` picks
one warm launch.  What a decode call's time is made of: docs/kernels_lora.md ("Where decode time goes").
"""

from __future__ import annotations

import argparse
import os
import sys

import torch


def compiled_variants(kernel, tag: str) -> None:
    """Print each compiled variant of ``kernel`` (both families: aligned and ``.generic``) with its warps,
    stages, shared memory, registers and spills, and write its TTGIR and PTX as ``$OUT/TAG.ttgir`` /
    ``.ptx`` (the last variant's).  Two trees compared this way tell a code change from a register choice
    of the compiler."""
    out = os.environ.get("OUT", ".")
    for family, fam in (("aligned", kernel), ("generic", kernel.generic)):
        for cache in fam.device_caches.values():
            for kern in cache[0].values():
                md = kern.metadata
                print("family", family, "warps", md.num_warps, "stages", md.num_stages, "shared", md.shared,
                      "regs", getattr(kern, "n_regs", None), "spills", getattr(kern, "n_spills", None))
                for kind in ("ttgir", "ptx"):
                    with open(os.path.join(out, f"{tag}.{kind}"), "w") as f:
                        f.write(kern.asm[kind])


def main(argv=None) -> int:
    import triton.testing

    import kernel_oracle.kernels.lora as klora
    from kernel_oracle.benchmarks import bench_lora as B
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
