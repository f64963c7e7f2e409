"""A minimal attention forward whose PV product has two accumulators: the reproducer of
docs/upstream/triton_split_pv.md (wrong results on sm_90 with triton 3.6).

python docs/upstream/triton_split_pv.py [--dump DIR]       (a GPU; or TRITON_INTERPRET=1 on the CPU)

Needs torch and triton only.  The vision kernel's split head dim (v's 80 columns as a 64-column tile and
a 16-column tail, two ``tl.dot`` into two accumulators; Note [Head-dim split] in kernels/vision/_kernel.py)
is exact under the interpreter and, built the plain way, wrong when compiled by triton 3.6 for the H200.
This kernel keeps only what that needs: q k^T in one dot, the online softmax (``RESCALE``: the running
max and the accumulators rescaled as in the vision kernel; off: a fixed shift, no rescale), and the PV
product into one padded accumulator (``SPLIT=False``) or two (``SPLIT=True``).  Each variant prints its
max error against a float64 softmax-attention, each GPU variant in its own process (an illegal memory
access ends only that one).  Under the interpreter every variant must be right (a CPU test checks it), so
a wrong compiled variant points at the compiler, not at this file.

Measured on the H200 (triton 3.6.0): with two accumulators, a second, masked call site of the key-block
step (``n`` not a multiple of ``BLOCK_N``) gives max errors 0.17-0.76 or an illegal address in every
block shape, and ``num_stages=1`` with 64-key blocks gives 0.39-0.73 even without it; one padded
accumulator is right everywhere, and so is one masked loop (``ONE_LOOP``) with two or more stages.
"""

from __future__ import annotations

import itertools
import os
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def _step(q, acc_a, acc_b, m_i, l_i, K, V, stride_v, start, n, scale, offs_d, cols_a, cols_b,
          D: tl.constexpr, DV: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr, RESCALE: tl.constexpr,
          MASK: tl.constexpr):
    """One key block: logits, online softmax, the PV product into one accumulator or two.  ``MASK``: the
    ragged last block (keys past ``n`` loaded as 0 and given -inf logits), as the vision kernel's."""
    offs_n = start + tl.arange(0, BLOCK_N)
    if MASK:
        k = tl.load(K + offs_n[:, None] * D + offs_d[None, :], mask=offs_n[:, None] < n, other=0.0)
    else:
        k = tl.load(K + offs_n[:, None] * D + offs_d[None, :])
    s = tl.dot(q, tl.trans(k)) * scale
    if MASK:
        s = tl.where((offs_n < n)[None, :], s, float("-inf"))
    if RESCALE:
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(s - m_new[:, None])
        acc_a = acc_a * alpha[:, None]
        acc_b = acc_b * alpha[:, None]
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_new
    else:  # logits are small here: a fixed shift is exact enough and nothing is rescaled
        p = tl.math.exp2(s)
        l_i = l_i + tl.sum(p, 1)
    p_mm = p.to(V.dtype.element_ty)
    row_ok = offs_n[:, None] < n if MASK else offs_n[:, None] >= 0
    v_a = tl.load(V + offs_n[:, None] * stride_v + cols_a[None, :], mask=row_ok & (cols_a[None, :] < DV), other=0.0)
    acc_a = tl.dot(p_mm, v_a, acc_a)
    if SPLIT:
        v_b = tl.load(V + offs_n[:, None] * stride_v + cols_b[None, :], mask=row_ok & (cols_b[None, :] < DV), other=0.0)
        acc_b = tl.dot(p_mm, v_b, acc_b)
    return acc_a, acc_b, m_i, l_i


@triton.jit(do_not_specialize=("stride_v8",))
def _pv_kernel(Q, K, V, O, n, scale, stride_v8, D: tl.constexpr, DV: tl.constexpr, DVA: tl.constexpr, DVB: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr, RESCALE: tl.constexpr,
               ONE_LOOP: tl.constexpr = False):
    """One sequence of ``n`` tokens, one head; q, k (n, D), o (n, DV), contiguous; v (n, DV) with token stride
    ``8 * stride_v8`` (a runtime integer times a constant, as the vision kernel's ALIGN does).  Full key
    blocks in a loop, then (when ``n % BLOCK_N``) one masked block, as the vision kernel does; ``ONE_LOOP``:
    every block masked, in one loop (one call site of the step)."""
    stride_v = stride_v8 * 8
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + offs_m[:, None] * D + offs_d[None, :], mask=offs_m[:, None] < n, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    cols_a = tl.arange(0, DVA)
    acc_a = tl.zeros([BLOCK_M, DVA], tl.float32)
    cols_b = DVA + tl.arange(0, DVB)
    acc_b = tl.zeros([BLOCK_M, DVB], tl.float32)
    n_full = 0 if ONE_LOOP else (n // BLOCK_N) * BLOCK_N
    for start in range(0, n_full, BLOCK_N):
        acc_a, acc_b, m_i, l_i = _step(q, acc_a, acc_b, m_i, l_i, K, V, stride_v, start, n, scale, offs_d, cols_a, cols_b,
                                       D, DV, BLOCK_N, SPLIT, RESCALE, False)
    if ONE_LOOP:
        for start in range(0, n, BLOCK_N):
            acc_a, acc_b, m_i, l_i = _step(q, acc_a, acc_b, m_i, l_i, K, V, stride_v, start, n, scale, offs_d, cols_a,
                                           cols_b, D, DV, BLOCK_N, SPLIT, RESCALE, True)
    elif n_full < n:
        acc_a, acc_b, m_i, l_i = _step(q, acc_a, acc_b, m_i, l_i, K, V, stride_v, n_full, n, scale, offs_d, cols_a, cols_b,
                                       D, DV, BLOCK_N, SPLIT, RESCALE, True)
    row = offs_m[:, None] < n
    tl.store(O + offs_m[:, None] * DV + cols_a[None, :], (acc_a / l_i[:, None]).to(O.dtype.element_ty),
             mask=row & (cols_a[None, :] < DV))
    if SPLIT:
        tl.store(O + offs_m[:, None] * DV + cols_b[None, :], (acc_b / l_i[:, None]).to(O.dtype.element_ty),
                 mask=row & (cols_b[None, :] < DV))


def run_variant(n: int, D: int, DV: int, split: bool, rescale: bool, block_m: int, block_n: int, warps: int,
                stages: int, heads: int = 1, dtype: str = "fp16", one_loop: bool = False, device="cuda", seed: int = 0,
                return_kernel: bool = False):
    """Max abs error of one variant against float64 softmax(q k^T / sqrt(D)) v, on random data (and the
    compiled kernel, with ``return_kernel``).  ``heads`` > 1: v is the last head of an (n, heads, DV) tensor,
    so its token stride is heads * DV, as in the vision kernel's multi-head layout.  ``dtype``: "fp16" or "bf16"."""
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    g = torch.Generator(device="cpu").manual_seed(seed)
    q, k = (torch.randn(n, D, generator=g).to(dtype).to(device) for _ in range(2))
    v = torch.randn(n, heads, DV, generator=g).to(dtype).to(device)[:, heads - 1]
    o = torch.full((n, DV), float("nan"), dtype=dtype, device=device)
    if split:  # a power-of-two tile and a tail of at least 16 (all masked when DV is a power of two)
        dva = 1 << (DV.bit_length() - 1)
        dvb = max(16, triton.next_power_of_2(DV - dva))
    else:  # one padded tile; the tail tile exists but is never used
        dva, dvb = triton.next_power_of_2(DV), 16
    scale = D ** -0.5 * 1.4426950408889634
    kernel = _pv_kernel[(triton.cdiv(n, block_m),)](q, k, v, o, n, scale, v.stride(0) // 8, D=D, DV=DV, DVA=dva, DVB=dvb,
                                           BLOCK_M=block_m, BLOCK_N=block_n, SPLIT=split, RESCALE=rescale, ONE_LOOP=one_loop,
                                           num_warps=warps, num_stages=stages)
    ref = torch.softmax(q.double() @ k.double().T * D ** -0.5, dim=-1) @ v.double()
    err = float((o.double() - ref).abs().max())
    return (err, kernel) if return_kernel else err


# (n, D, DV, split, rescale, block_m, block_n, warps, stages, heads, dtype[, one_loop]): on a GPU, the vision kernel's shapes; n=512 has
# only full key blocks, n=300 ends with a masked one
GPU_VARIANTS = [(n, 64, dv, split, rescale, bm, bn, w, st, 1, "fp16")
                for n in (512, 300) for dv in (80, 64) for split, rescale in itertools.product((False, True), (False, True))
                for bm, bn, w, st in ((128, 128, 8, 3), (64, 64, 4, 2), (128, 64, 8, 1), (128, 64, 8, 3), (128, 64, 4, 1))
                if (split or dv == 80) and (rescale or n == 512)]
# the multi-head v layout (token stride 2 * 80) on the ragged split variants, in fp16 and in bf16
GPU_VARIANTS += [(300, 64, 80, True, True, bm, bn, w, st, 2, dt)
                 for bm, bn, w, st in ((128, 128, 8, 3), (64, 64, 4, 2), (128, 64, 8, 3)) for dt in ("fp16", "bf16")]
# one loop, every key block masked (one call site of the step): a workaround if the second call site is the trigger
GPU_VARIANTS += [(n, 64, dv, True, True, bm, bn, w, st, 2, "bf16", True)
                 for n in (300, 512) for dv in (80, 72)
                 for bm, bn, w, st in ((128, 128, 8, 3), (64, 64, 4, 2), (128, 64, 8, 3), (128, 64, 8, 1))]
# under the interpreter: small, one block shape, fp16 (its bf16 arithmetic is wrong, docs/semantics.md#where-the-triton-interpreter-is-wrong); 40 tokens end
# with a masked block of 16, with 2 heads
CPU_VARIANTS = [(n, 16, 24, split, rescale, 16, 16, 1, 1, 1 + (n == 40), "fp16")
                for n in (32, 40) for split, rescale in itertools.product((False, True), (False, True))]
CPU_VARIANTS += [(40, 16, 24, True, True, 16, 16, 1, 1, 2, "fp16", True)]


def _line(variant, result: str) -> str:
    n, D, DV, split, rescale, bm, bn, w, st, heads, dt, *one_loop = variant
    return (f"n={n} DV={DV} heads={heads} {dt}{' one-loop' if one_loop and one_loop[0] else ''} split={split!s:5} rescale={rescale!s:5} blocks={bm}x{bn} warps={w} "
            f"stages={st}: {result}")


def _one(index: int, dump: str | None) -> int:
    """Run GPU variant ``index`` in this process; print its line; with ``dump``, write a wrong variant's
    Triton IR and PTX there (what a compiler bug report needs)."""
    variant = GPU_VARIANTS[index]
    err, kernel = run_variant(*variant, device="cuda", return_kernel=True)
    print(_line(variant, f"max error {err:.3g}"), flush=True)
    if dump and not err < 0.05:
        os.makedirs(dump, exist_ok=True)
        for kind in ("ttir", "ttgir", "ptx"):
            with open(os.path.join(dump, f"variant{index}.{kind}"), "w") as f:
                f.write(kernel.asm[kind])
    return 0 if err < 0.05 else 1


def main(argv=None) -> int:
    import argparse
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--one", type=int, default=None, help="run one GPU variant in this process (by index)")
    ap.add_argument("--dump", default=None, help="write the IR and PTX of wrong variants to this folder")
    ap.add_argument("--jobs", type=int, default=8, help="variants run at once, each in its own process")
    args = ap.parse_args(argv)
    cpu = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")  # no import of ours: the file stands alone
    if not cpu and not torch.cuda.is_available():
        print("needs a CUDA device, or TRITON_INTERPRET=1 for the CPU check", file=sys.stderr)
        return 2
    if args.one is not None:
        return _one(args.one, args.dump)
    if cpu:
        worst = 0.0
        for variant in CPU_VARIANTS:
            err = run_variant(*variant, device="cpu")
            worst = max(worst, err if err == err else float("inf"))
            print(_line(variant, f"max error {err:.3g}"), flush=True)
        return 0 if worst < 0.05 else 1

    def child(i):  # its own process: an illegal memory access ends that variant, not the run
        cmd = [sys.executable, os.path.abspath(__file__), "--one", str(i)]
        if args.dump:
            cmd += ["--dump", args.dump]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if r.returncode in (0, 1) and r.stdout.strip():
            return r.returncode, r.stdout.strip().splitlines()[-1]
        why = [ln for ln in r.stderr.splitlines() if "rror" in ln][-1:] or [f"exit {r.returncode}"]
        return 1, _line(GPU_VARIANTS[i], "crashed: " + why[0].strip()[:160])

    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(child, range(len(GPU_VARIANTS))))
    for _, line in results:
        print(line)
    wrong = sum(rc != 0 for rc, _ in results)
    print(f"{wrong} of {len(results)} variants wrong or crashed")
    return 0 if not wrong else 1


if __name__ == "__main__":
    raise SystemExit(main())
