"""A minimal attention forward, warp-specialized by triton's Hopper pass or not, against float64: the
reproducer of docs/upstream/triton_hopper_ws.md (NaN outputs on sm_90 with triton 3.6).

python docs/upstream/triton_hopper_ws.py      (a Hopper GPU; torch and triton only)

Triton 3.6 warp-specializes a loop marked ``tl.range(..., warp_specialize=True)`` on sm_90 only when
the kernel asks for 4 warps and every tile the loop loads comes through a tensor descriptor
(``tl.make_tensor_descriptor``); it then runs 12 warps: a producer warpgroup (the loads) and two
consumer warpgroups (64 rows each).  This file is a one-head attention with descriptor loads of q, k
and v: the key loop with or without the flag (``WS``), on sequences of whole key blocks and with a
ragged last one (``MASK``: keys past ``n`` get -inf logits), the output stored through pointers or a
descriptor (``STORE_DESC``), at 2-4 pipeline stages.  Each variant prints its max error against a
float64 softmax-attention and its speed (``triton.testing.do_bench``, median); a variant whose error
passes 0.05 (bf16 outputs of unit-scale data are right to ~0.01) counts as wrong, and the exit status
is 1 when a warp-specialized variant is wrong while its plain twin is right.
"""

from __future__ import annotations

import itertools
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def _attn(Q, K, V, O, n, scale, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
          WS: tl.constexpr, MASK: tl.constexpr, STORE_DESC: tl.constexpr):
    """(n, D) q, k, v of one head (row-major, contiguous); program ``pid`` writes rows pid*BLOCK_M ..."""
    pid = tl.program_id(0)
    q_desc = tl.make_tensor_descriptor(Q, shape=[n, D], strides=[D, 1], block_shape=[BLOCK_M, D])
    k_desc = tl.make_tensor_descriptor(K, shape=[n, D], strides=[D, 1], block_shape=[BLOCK_N, D])
    v_desc = tl.make_tensor_descriptor(V, shape=[n, D], strides=[D, 1], block_shape=[BLOCK_N, D])
    q = q_desc.load([pid * BLOCK_M, 0])
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    for start in tl.range(0, n, BLOCK_N, warp_specialize=WS):
        k = k_desc.load([start, 0])
        s = tl.dot(q, tl.trans(k)) * scale
        if MASK:
            s = tl.where((start + tl.arange(0, BLOCK_N) < n)[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = v_desc.load([start, 0])
        acc = tl.dot(p.to(V.dtype.element_ty), v, acc)
        m_i = m_new
    out = (acc / l_i[:, None]).to(O.dtype.element_ty)
    if STORE_DESC:  # rows past n are clipped by the tensor memory accelerator
        o_desc = tl.make_tensor_descriptor(O, shape=[n, D], strides=[D, 1], block_shape=[BLOCK_M, D])
        o_desc.store([pid * BLOCK_M, 0], out)
    else:
        rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, D)
        tl.store(O + rows[:, None] * D + cols[None, :], out, mask=(rows < n)[:, None])


def _allocator(size: int, alignment: int, stream):
    """Global scratch for the descriptors (triton.set_allocator)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def run(n: int, d: int, block_n: int, ws: bool, block_m: int = 128, stages: int = 2, store_desc: bool = False):
    """(max abs error against float64, ms per call) of one variant on fresh random bf16 data; raises if
    ``ws`` and the compiled kernel was not warp-specialized."""
    q, k, v = (torch.randn(n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = torch.full_like(q, float("nan"))
    scale = d ** -0.5 * 1.4426950408889634  # log2(e): the kernel exponentiates with exp2
    grid = (triton.cdiv(n, block_m),)

    def call():
        return _attn[grid](q, k, v, out, n, scale, D=d, BLOCK_M=block_m, BLOCK_N=block_n, WS=ws,
                           MASK=n % block_n != 0, STORE_DESC=store_desc, num_warps=4, num_stages=stages)

    kernel = call()
    torch.cuda.synchronize()
    if ws and "ttg.warp_specialize" not in kernel.asm["ttgir"]:
        raise RuntimeError("not warp-specialized by this triton")
    p = torch.softmax((q.double() @ k.double().T) * d ** -0.5, dim=-1)
    err = float((out.double() - p @ v.double()).abs().max())
    ms = triton.testing.do_bench(call, warmup=10, rep=50, return_mode="median")
    return err, ms


def main() -> int:
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9:
        print("triton_hopper_ws.py needs a Hopper (sm_90) or newer GPU", file=sys.stderr)
        return 2
    triton.set_allocator(_allocator)
    torch.manual_seed(0)
    print(f"triton {triton.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print("| n | d | BLOCK_N | stages | output store | plain: max err, TFLOP/s | warp-specialized: max err, TFLOP/s |\n"
          "|---:|---:|---:|---:|---|---|---|")
    bad = False
    cases = [(shape, store_desc, 2) for shape, store_desc in itertools.product(
        ((4096, 128, 128), (4096, 128, 64), (4000, 128, 64), (4096, 64, 64), (16384, 128, 128)), (False, True))]
    cases += [((4096, 128, 64), True, 3), ((4000, 128, 64), True, 3), ((16384, 128, 64), True, 3),
              ((16384, 128, 64), True, 4)]
    for (n, d, block_n), store_desc, stages in cases:
        cells = []
        errs = []
        for ws in (False, True):
            try:
                err, ms = run(n, d, block_n, ws, store_desc=store_desc, stages=stages)
                errs.append(err)
                cells.append(f"{err:.3g}, {4 * n * n * d / ms / 1e9:.0f}")
            except Exception as exc:  # noqa: BLE001 - a variant that does not build is reported, not fatal
                errs.append(None)
                cells.append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:80]}")
        bad |= errs[0] is not None and errs[0] < 0.05 and (errs[1] is None or not errs[1] < 0.05)
        print(f"| {n} | {d} | {block_n} | {stages} | {'descriptor' if store_desc else 'pointers'} | {cells[0]} | {cells[1]} |")
    print("a warp-specialized variant is wrong where its plain twin is right" if bad else "every variant right")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
