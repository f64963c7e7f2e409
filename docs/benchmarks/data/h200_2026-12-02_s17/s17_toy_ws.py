# scratch (session 17), not part of the suite: triton 3.6's Hopper warp specialization on a toy multi-head attention
# at the bench's d128 size (16384 tokens, 32 heads: 4096 programs like 2x16384 x 16 heads).
#   python s17_toy_ws.py mask-cost     WS / mask / folded scale / BLOCK_N variants: error vs SDPA and TFLOP/s
#   python s17_toy_ws.py determinism   fresh data per round, fp16 and bf16: non-finite outputs and error vs SDPA
# (Session 17 ran these as s17_toy_ws_mask_cost.py and s17_toy_ws_determinism.py, one mode each, same kernel.)
import sys
import torch, triton, triton.language as tl

@triton.jit
def attn(Q, K, V, O, n, scale, H: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
         WS: tl.constexpr, MASK: tl.constexpr, FOLD: tl.constexpr):
    pid = tl.program_id(0)
    h = tl.program_id(1)
    st = H * D
    q_desc = tl.make_tensor_descriptor(Q + h * D, shape=[n, D], strides=[st, 1], block_shape=[BLOCK_M, D])
    k_desc = tl.make_tensor_descriptor(K + h * D, shape=[n, D], strides=[st, 1], block_shape=[BLOCK_N, D])
    v_desc = tl.make_tensor_descriptor(V + h * D, shape=[n, D], strides=[st, 1], block_shape=[BLOCK_N, D])
    q = q_desc.load([pid * BLOCK_M, 0])
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    for start in tl.range(0, n, BLOCK_N, warp_specialize=WS):
        k = k_desc.load([start, 0])
        s = tl.dot(q, tl.trans(k))
        if MASK:
            s = tl.where((start + tl.arange(0, BLOCK_N) < n)[None, :], s, float("-inf"))
        if FOLD:
            m_new = tl.maximum(m_i, tl.max(s, 1) * scale)
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.math.exp2(s * scale - m_safe[:, None])
        else:
            s = s * scale
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_safe = m_new
            p = tl.math.exp2(s - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = v_desc.load([start, 0])
        acc = tl.dot(p.to(V.dtype.element_ty), v, acc)
        m_i = m_new
    out = (acc * (1.0 / l_i)[:, None]).to(O.dtype.element_ty)
    o_desc = tl.make_tensor_descriptor(O + h * D, shape=[n, D], strides=[st, 1], block_shape=[BLOCK_M, D])
    o_desc.store([pid * BLOCK_M, 0], out)

triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
torch.manual_seed(0)
n, H, D = 16384, 32, 128
scale = D ** -0.5 * 1.4426950408889634


def launch(q, k, v, out, ws, mask, fold=True, bn=128):
    nw, ns = (4, 2) if ws else (8, 2)
    attn[(triton.cdiv(n, 128), H)](q, k, v, out, n, scale, H=H, D=D, BLOCK_M=128, BLOCK_N=bn, WS=ws, MASK=mask,
                                   FOLD=fold, num_warps=nw, num_stages=ns)


def sdpa(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1),
                                                            v.transpose(0, 1)).transpose(0, 1)


if sys.argv[1:] == ["mask-cost"]:
    q, k, v = (torch.randn(n, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    ref = sdpa(q, k, v)
    print("| WS | mask | fold | BLOCK_N | max diff vs SDPA | TFLOP/s |")
    for ws, mask, fold, bn in [(True, False, True, 128), (True, True, True, 128), (True, False, False, 128),
                               (True, True, False, 128), (True, False, True, 64), (False, False, True, 128),
                               (False, True, True, 128)]:
        out = torch.full_like(q, float("nan"))
        f = lambda: launch(q, k, v, out, ws, mask, fold, bn)
        f(); torch.cuda.synchronize()
        diff = float((out.float() - ref.float()).abs().max())
        ms = triton.testing.do_bench(f, warmup=10, rep=100, return_mode="median")
        print(f"| {ws} | {mask} | {fold} | {bn} | {diff:.3g} | {4 * n * n * H * D / ms / 1e9:.0f} |")
elif sys.argv[1:] == ["determinism"]:
    print("| dtype | WS | mask | round | non-finite | max diff vs SDPA (finite) |")
    for dtype in (torch.float16, torch.bfloat16):
        for ws, mask in ((True, False), (True, True), (False, False)):
            for rnd in range(4):
                q, k, v = (torch.randn(n, H, D, device="cuda", dtype=dtype) for _ in range(3))
                ref = sdpa(q, k, v)
                out = torch.full_like(q, float("nan"))
                launch(q, k, v, out, ws, mask)
                torch.cuda.synchronize()
                fin = torch.isfinite(out)
                bad = int((~fin).sum())
                diff = float((out.float() - ref.float())[fin].abs().max()) if bad < out.numel() else float("nan")
                print(f"| {dtype} | {ws} | {mask} | {rnd} | {bad} | {diff:.3g} |", flush=True)
else:
    sys.exit("usage: python s17_toy_ws.py mask-cost|determinism")
