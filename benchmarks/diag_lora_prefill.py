"""The fused q kernel that prefill-8x2048 launches: its config, registers, time, and its IR.

python -m kernel_oracle.benchmarks.diag_lora_prefill [TAG]      (a CUDA device)

Prints the shared-memory fit the launch took, each compiled variant's warps, stages, shared memory,
registers and spills, and the do_bench median; writes ``TAG.ttgir`` and ``TAG.ptx`` to ``$OUT`` (or
the current folder).  Run in two trees to tell a code change from a compiler's register choice: on
2026-12-01 (phases s10h-s10i) an unused kernel parameter took the kernel from 96 to 108 registers
with identical TTGIR and PTX, and prefill q from 669 to 718 us (Note [Flat slot grid]).
"""

from __future__ import annotations

import os
import sys

import torch


def main(argv=None) -> int:
    import triton.testing

    import kernel_oracle.kernels.lora as klora
    from kernel_oracle.benchmarks import bench_lora as B
    from kernel_oracle.kernels.lora import _kernels as K
    from kernel_oracle.kernels.lora import _launch as L

    if not torch.cuda.is_available():
        print("needs a CUDA device", file=sys.stderr)
        return 2
    tag = (argv if argv is not None else sys.argv[1:] or ["tree"])[0]
    d = B._inputs(B.SHAPES["prefill-8x2048"], 0)
    fn = B._calls(klora, d, "q")["fused"]
    fn()
    torch.cuda.synchronize()
    us = triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3
    print("fitted:", {k[0]: v for k, v in L._FITTED.items()})
    compiled_variants(K.q_side_fused_kernel, tag)
    print("prefill q fused us", round(us, 1))
    return 0


def compiled_variants(kernel, tag: str) -> None:
    """Print each compiled variant of ``kernel`` (both families) with its warps, stages, shared memory,
    registers and spills, and write its TTGIR and PTX as ``$OUT/TAG.ttgir`` / ``.ptx`` (the last one)."""
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


if __name__ == "__main__":
    raise SystemExit(main())
