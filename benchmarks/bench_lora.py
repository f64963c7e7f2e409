"""Benchmark of our kv_b LoRA kernels on any CUDA machine: ``python -m kernel_oracle.benchmarks.bench_lora``.

Note [What is measured]
-----------------------
bf16, H=64, qk_nope=v_head_dim=128, kv_lora_rank=512, R=32, 4 slots (ranks 32, 16, 8, 32), on four
batch shapes: decode-bs64 and decode-bs256 (one-token segments), prefill-4x1024, prefill-8x2048.
Per side (q and v), the split steps (A then B) and the fused kernel are timed with
``triton.testing.do_bench`` (median; it flushes L2 between calls) on random data; when one input
set fits in the 60 MB L2, several sets are rotated so that each call reads from HBM.  Decode is
also timed as CUDA-graph replay (``strict=False``, graph captured per input set).  Bytes moved are
the minimum traffic (activations read, the intermediate written and read back by the split steps,
base_output read and written, the weights of the slots used, once); TB/s is bytes over the median
time, set against a device-to-device copy measured in the same run.

``--sweep`` also times alternative segment-major block sizes (``kernels.lora._launch.BLOCKS``) on
prefill-8x2048; ``--sweep-decode`` times token-major ones on decode-bs64 by graph replay and keeps
the best for the table.  The replay time of a one-kernel graph is printed as the floor.
``--decode-ab`` (``DECODE_AB``, decode shapes) and ``--prefill-ab`` (``PREFILL_AB``, prefill-8x2048) check
each configuration of the fused kernels against the float64 oracle on the device, then time it with
``triton.testing.do_bench_cudagraph`` (a graph of many calls; decode rotates 8 input sets, more than
the L2 holds), beside a graph of one trivial kernel per call as the floor; nothing else is run.
Both take each configuration on a token-major route (``ROUTES``: the module's choice, the flat grid, the per-slot slot-sorted
grid, logical rows); ``--decode-floor`` times the chosen fused configuration with real ranks and with
every rank 0 (launch + route) on each route of ``--routes`` (default: auto, flat and sorted).
``--json PATH`` writes the results as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import time

import torch

from kernel_oracle.harness.schema import git_commit

H, QK, VD, C, R, L = 64, 128, 128, 512, 32, 4
FULL_K = QK + VD
RANKS = (32, 16, 8, 32)
SCALINGS = (0.5, 1.0, 2.0, 0.25)
SHAPES = {
    "decode-bs64": (1,) * 64,
    "decode-bs256": (1,) * 256,
    "prefill-4x1024": (1024,) * 4,
    "prefill-8x2048": (2048,) * 8,
}
L2_BYTES = 60 * 2 ** 20
BARS_US = {("prefill-8x2048", "q", "fused"): 950.0, ("prefill-8x2048", "v", "fused"): 620.0,
           ("decode-bs64", "q", "graph-fused"): 15.0, ("decode-bs64", "v", "graph-fused"): 15.0,
           ("decode-bs64", "q", "graph-split"): 15.0, ("decode-bs64", "v", "graph-split"): 15.0}


def _bench(fn) -> float:
    import triton.testing

    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3  # us


def copy_bandwidth() -> float:
    """Device-to-device copy, bytes read + written per second (TB/s)."""
    n = 2 ** 30  # 1 GiB each way
    src = torch.empty(n, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    us = _bench(lambda: dst.copy_(src))
    return 2 * n / (us * 1e-6) / 1e12


def _inputs(seg_lens, seed, device="cuda"):
    """One input set of ``seg_lens``: random bf16 activations, weights and bases, and the batch metadata.
    On ``device="meta"`` the same tensors without data, the metadata on the CPU (benchmarks.hopper_sass)."""
    from kernel_oracle.reference.batch_info import make_lora_batch_info

    meta = torch.device(device).type == "meta"
    g = None if meta else torch.Generator(device=device).manual_seed(seed)
    S = sum(seg_lens)
    slots = [i % L for i in range(len(seg_lens))]
    bi = make_lora_batch_info(seg_lens, slots, RANKS, SCALINGS, device="cpu" if meta else device)

    def rnd(*shape, scale=1.0):
        return (torch.randn(shape, generator=g, device=device) * scale).to(torch.bfloat16)

    return dict(
        bi=bi,
        q=rnd(S, H, QK), attn=rnd(S, H, C),
        B=rnd(L, H * FULL_K, R, scale=QK ** -0.5), A=rnd(L, R, C, scale=C ** -0.5),
        base_q=rnd(S, H, C), base_v=rnd(S, H, VD),
    )


def _bytes(S: int, side: str, variant: str) -> int:
    e = 2  # bf16
    slots = L if S >= L else S
    if side == "q":
        w = slots * (H * QK * R + R * C) * e
        a_in, out_dim = S * H * QK * e, C
    else:
        w = slots * (R * C + H * VD * R) * e
        a_in, out_dim = S * H * C * e, VD
    base = 2 * S * H * out_dim * e
    mid = 2 * S * H * R * e if variant.endswith("split") else 0
    return a_in + w + base + mid


def _calls(klora, d, side):
    bi = d["bi"]
    if side == "q":
        def split():
            mid = klora.step_a_q_fwd(d["q"], d["B"], bi, FULL_K, strict=False)
            klora.step_b_q_fwd(mid, d["A"], bi, d["base_q"], strict=False)

        def fused():
            klora.q_side_fused_fwd(d["q"], d["B"], d["A"], bi, d["base_q"], FULL_K, strict=False)
    else:
        def split():
            mid = klora.step_a_v_fwd(d["attn"], d["A"], bi, strict=False)
            klora.step_b_v_fwd(mid, d["B"], bi, d["base_v"], QK, VD, strict=False)

        def fused():
            klora.v_side_fused_fwd(d["attn"], d["A"], d["B"], bi, d["base_v"], QK, VD, strict=False)
    return {"split": split, "fused": fused}


def rotating(fns):
    """One call that runs the next of ``fns`` each time (input sets that together exceed the L2)."""
    state = {"i": 0}

    def call():
        state["i"] = (state["i"] + 1) % len(fns)
        fns[state["i"]]()
    return call


def _graphs(fns):
    graphs = []
    for fn in fns:
        fn()  # compile and warm outside the capture
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        graphs.append(g)
    return [g.replay for g in graphs]


def run_shapes(klora, shapes, copy_tbs):
    rows = []
    for name in shapes:
        seg = SHAPES[name]
        S = sum(seg)
        set_bytes = _bytes(S, "q", "split") + _bytes(S, "v", "split")
        nsets = 1 if set_bytes > L2_BYTES else min(16, math.ceil(3 * L2_BYTES / set_bytes))
        sets = [_inputs(seg, seed=100 + i) for i in range(nsets)]
        for side in ("q", "v"):
            per_set = [_calls(klora, d, side) for d in sets]
            variants = {v: [c[v] for c in per_set] for v in ("split", "fused")}
            timings = {v: _bench(rotating(fns)) for v, fns in variants.items()}
            if name.startswith("decode"):
                for v, fns in variants.items():
                    timings[f"graph-{v}"] = _bench(rotating(_graphs(fns)))
            for v, us in timings.items():
                nbytes = _bytes(S, side, v)
                tbs = nbytes / (us * 1e-6) / 1e12
                bar = BARS_US.get((name, side, v))
                rows.append(dict(shape=name, side=side, variant=v, nsets=nsets, us=round(us, 2), bytes=nbytes,
                                 tbs=round(tbs, 3), pct_copy=round(100 * tbs / copy_tbs, 1), bar_us=bar,
                                 met=(None if bar is None else us <= bar)))
        del sets
        torch.cuda.empty_cache()
    return rows


SWEEP = {
    "q_side_fused": [dict(BT=64, BLOCK_K=64, BLOCK_C=128, num_warps=4), dict(BT=64, BLOCK_K=128, BLOCK_C=256, num_warps=8),
                     dict(BT=128, BLOCK_K=64, BLOCK_C=128, num_warps=8), dict(BT=32, BLOCK_K=128, BLOCK_C=128, num_warps=4)],
    "v_side_fused": [dict(BT=64, BLOCK_K=128, BLOCK_V=128, num_warps=4), dict(BT=64, BLOCK_K=64, BLOCK_V=128, num_warps=4),
                     dict(BT=128, BLOCK_K=64, BLOCK_V=128, num_warps=8), dict(BT=32, BLOCK_K=128, BLOCK_V=128, num_warps=4)],
    "step_b_q": [dict(BT=16, BH=4, BLOCK_C=128, num_warps=4), dict(BT=32, BH=4, BLOCK_C=128, num_warps=8),
                 dict(BT=16, BH=4, BLOCK_C=256, num_warps=8), dict(BT=8, BH=8, BLOCK_C=128, num_warps=4)],
    "step_a_v": [dict(BT=16, BH=4, BLOCK_K=128, num_warps=4), dict(BT=32, BH=4, BLOCK_K=64, num_warps=4),
                 dict(BT=16, BH=8, BLOCK_K=128, num_warps=8)],
    "step_a_q": [dict(BT=64, BLOCK_K=64, num_warps=4), dict(BT=128, BLOCK_K=64, num_warps=8)],
    "step_b_v": [dict(BT=64, BLOCK_V=128, num_warps=4), dict(BT=128, BLOCK_V=128, num_warps=8)],
}


def _op_calls(klora, d) -> dict:
    """op -> a no-argument call of it on the inputs ``d`` (step B on step A's real output)."""
    bi = d["bi"]
    mid_q = klora.step_a_q_fwd(d["q"], d["B"], bi, FULL_K)
    mid_v = klora.step_a_v_fwd(d["attn"], d["A"], bi)
    return {
        "step_a_q": lambda: klora.step_a_q_fwd(d["q"], d["B"], bi, FULL_K, strict=False),
        "step_b_q": lambda: klora.step_b_q_fwd(mid_q, d["A"], bi, d["base_q"], strict=False),
        "step_a_v": lambda: klora.step_a_v_fwd(d["attn"], d["A"], bi, strict=False),
        "step_b_v": lambda: klora.step_b_v_fwd(mid_v, d["B"], bi, d["base_v"], QK, VD, strict=False),
        "q_side_fused": lambda: klora.q_side_fused_fwd(d["q"], d["B"], d["A"], bi, d["base_q"], FULL_K, strict=False),
        "v_side_fused": lambda: klora.v_side_fused_fwd(d["attn"], d["A"], d["B"], bi, d["base_v"], QK, VD, strict=False),
    }


def sweep(klora, launch):
    """Time each alternative segment-major block config of each op on prefill-8x2048."""
    d = _inputs(SHAPES["prefill-8x2048"], seed=7)
    call = _op_calls(klora, d)
    out = []
    for op, configs in SWEEP.items():
        saved = launch.BLOCKS[op]["seg"]
        for cfg in configs:
            launch.BLOCKS[op]["seg"] = cfg
            try:
                us = _bench(call[op])
                out.append(dict(op=op, cfg=cfg, us=round(us, 1)))
            except Exception as e:  # a config that does not compile is a result, not a crash
                out.append(dict(op=op, cfg=cfg, error=f"{type(e).__name__}: {str(e)[:120]}"))
            print("sweep", out[-1], flush=True)
        launch.BLOCKS[op]["seg"] = saved
    return out


DECODE_SWEEP = {
    # first config of each op: the one chosen before (BT=16 tiles), as an in-run control
    "step_a_q": [dict(BT=16, BLOCK_K=64, num_warps=4), dict(BT=64, BLOCK_K=64, num_warps=4),
                 dict(BT=64, BLOCK_K=128, num_warps=4)],
    "step_b_q": [dict(BT=4, BH=16, BLOCK_C=256, num_warps=4), dict(BT=16, BH=8, BLOCK_C=128, num_warps=4),
                 dict(BT=64, BH=2, BLOCK_C=128, num_warps=4)],
    "step_a_v": [dict(BT=4, BH=16, BLOCK_K=128, num_warps=4), dict(BT=16, BH=8, BLOCK_K=128, num_warps=4),
                 dict(BT=64, BH=2, BLOCK_K=128, num_warps=4)],
    "step_b_v": [dict(BT=16, BLOCK_V=128, num_warps=4), dict(BT=64, BLOCK_V=128, num_warps=4),
                 dict(BT=64, BLOCK_V=128, num_warps=8)],
    "q_side_fused": [dict(BT=16, BLOCK_K=128, BLOCK_C=128, C_SPLIT=None, num_warps=4),
                     dict(BT=64, BLOCK_K=128, BLOCK_C=128, C_SPLIT=None, num_warps=4),
                     dict(BT=64, BLOCK_K=128, BLOCK_C=128, C_SPLIT=256, num_warps=4),
                     dict(BT=64, BLOCK_K=128, BLOCK_C=128, C_SPLIT=None, num_warps=8),
                     dict(BT=32, BLOCK_K=128, BLOCK_C=128, C_SPLIT=None, num_warps=4)],
    "v_side_fused": [dict(BT=16, BLOCK_K=128, BLOCK_V=128, num_warps=4), dict(BT=64, BLOCK_K=128, BLOCK_V=128, num_warps=4),
                     dict(BT=64, BLOCK_K=128, BLOCK_V=128, num_warps=8), dict(BT=64, BLOCK_K=64, BLOCK_V=128, num_warps=4),
                     dict(BT=32, BLOCK_K=128, BLOCK_V=128, num_warps=4)],
}


def sweep_decode(klora, launch):
    """Graph-replay time of each token-major block config of each op on decode-bs64; keeps the best
    config of each op in ``launch.BLOCKS`` (the main table then uses it) and returns all timings."""
    d = _inputs(SHAPES["decode-bs64"], seed=11)
    call = _op_calls(klora, d)
    out = []
    for op, configs in DECODE_SWEEP.items():
        best = (float("inf"), launch.BLOCKS[op]["tok"])
        for cfg in configs:
            launch.BLOCKS[op]["tok"] = cfg
            try:
                us = _bench(_graphs([call[op]])[0])
                out.append(dict(op=op, cfg=cfg, graph_us=round(us, 2)))
                best = min(best, (us, cfg), key=lambda t: t[0])
            except Exception as e:
                out.append(dict(op=op, cfg=cfg, error=f"{type(e).__name__}: {str(e)[:120]}"))
            print("decode sweep", out[-1], flush=True)
        launch.BLOCKS[op]["tok"] = best[1]
        out.append(dict(op=op, chosen=best[1]))
    return out


# decode A/B (--decode-ab): token-major configurations of the fused kernels, each checked against the
# float64 oracle on the device, then timed by triton.testing.do_bench_cudagraph (median of replays of a
# graph holding many calls, so one replay's launch cost is spread over them: the measure).
# Each entry is (route, overrides): the token-major route (ROUTES) and overrides of the chosen blocks of
# kernels.lora._launch.BLOCKS ({}: the chosen configuration itself).
# Round 24 (session 18, the final code): the chosen blocks against Note [Early reads] (EARLY: metadata, route
# and first weight blocks before the grid-dependency wait) on its tiles and routes.
# Rounds 21-23 (session 18, s18a-s18c, us; PRE_WAIT 1: the route and slot metadata before the wait, 2: also
# the first weight blocks; each round's chosen entry first): bs64 q chosen 7.13 / 7.02 (s18a), 7.24 (s18b);
# PRE_WAIT 1 6.60 / 6.53, 2 6.47 / 6.48 (s18a), 6.59 (s18b), 6.49 (s18c); 2 on the flat grid with 16-row tiles
# **4.87** (s18b), **4.80**, with WIDE_BT=64 4.82 (s18c); the same tiles with PRE_WAIT 1 6.21, without 7.46;
# 2 with 16-row per-slot tiles 6.67, flat 32-row 6.80, 8 warps 6.84, PREFETCH on 3 stages 8.97, BLOCK_C=256
# 7.52, META_FIRST off 6.67.  bs64 v chosen 6.79 / 6.70, 6.71; PRE_WAIT 1 5.91 / 5.87, 2 5.75 / 5.78, 5.79,
# 5.73; 2 with 32-row tiles 7.08, 16-row per-slot 7.04, flat 16 / 32 / 64-row 6.16 / 6.13 / 6.30, 2 stages
# 6.57, 8 warps 6.49, META_FIRST off 5.89.  bs256 q chosen 15.69 / 15.68 / 15.66; PRE_WAIT 2 14.91-14.95, flat
# 16-row 15.58 (15.67; WIDE_BT=64 14.96; without PRE_WAIT 21.07); v chosen 11.46 / 11.49 / 11.53, PRE_WAIT 2
# 11.04-11.08, flat 64-row 11.02, flat 16 / 32-row 15.77 / 13.58.
# Round 20 (for the next session): the chosen blocks against each of PDL and META_FIRST off, and the routes.
# Round 19 (session 14, s14h, us): head-packed kernels (an experiment, removed again): BH heads of one
# slot's rows per program, so that a decode-bs64 tile has no padding and the heads share the slot's A (q:
# a batched step-A product; v: a batched step B).  bs64 q chosen 7.09, 16 rows x 2 heads 8.88 (flat 8.83),
# 16 x 4 12.84, 32 x 2 10.60; v chosen 6.67, 16 x 4 19.42 (flat 19.01), 16 x 2 7.62, 32 x 2 8.61; bs256 q
# 15.52 against 18.69-21.86, v 11.55 against 13.92-25.79.  Slower everywhere: the batched products and
# the (heads x rows) reshapes cost more than the padding and the repeated A loads they save.
# Round 18 (session 14, s14g, the final code): chosen, PDL off, META_FIRST off, flat, per-slot: bs64 q 7.02,
# 7.78, 7.16, 7.68, 6.98, per-slot 16-row 7.18; v 6.65, 7.36, 6.84, 7.34, 6.73; bs256 q 15.55, 16.19,
# 15.74, 15.54, 16.03, 21.18; v 11.45, 12.15, 11.50, 11.45, 11.83.
# Round 17 (session 14, s14f, us): TILES_LAST, the per-slot grid renumbered so that every slot's first row
# tile starts before any second one (the programs with rows first, as on the flat grid, without its slot
# search).  bs64 q chosen 7.02, TILES_LAST 7.74 (flat 7.73, per-slot 16-row tiles with it 7.45); v 6.84 /
# 6.85 (per-slot 32- / 16-row tiles with it 7.95 / 7.63); bs256 q 15.71 / 15.83, v 11.49 / 11.66.  Starting
# the 256 programs with rows together, two per SM, was slower than the default order (which interleaves
# them with programs that route and exit), so the option was removed from the kernels again.
# Round 16 (session 14, s14e, us): a register cap for three programs per SM (q takes 226 registers, v 204: two
# per SM) and the pipelining depth, under PDL.  bs64 q chosen 7.02, maxnreg 168 8.18, 2 stages 7.54, flat
# 7.73, per-slot 16-row 7.31; v chosen 6.74, maxnreg 168 10.04, 2 / 4 stages 7.79 / 6.80, BLOCK_K=64 7.74,
# flat 7.39, per-slot 6.71; bs256 q 15.65, 18.88, 15.66, 15.62, 21.47; v 11.43, 15.46, 12.17 / 11.78, 12.13,
# 11.43, 11.80.  The chosen blocks stay.
# Round 15 (session 14, s14b, us): bs64 q chosen (PDL + META_FIRST) 7.09, PDL off 7.91, META_FIRST off 7.29,
# both off 8.08, flat 7.76, flat 16-row 7.49, per-slot 16-row 7.32; v chosen 6.73, PDL off 7.42, META_FIRST
# off 6.86, both off 7.56, flat 7.32, per-slot 6.69, flat 32-row 8.09, flat 16-row 8.49; bs256 q 15.71 /
# 16.37 / 15.83 / 16.58, flat 15.68, 16-row 21.08-21.45; v 11.44 / 12.22 / 11.53 / 12.25, flat 11.44,
# per-slot 11.81, 32-row 15.21, 16-row 16.68.  The chosen blocks stay.
# Round 14 (session 14, s14a and s14d, us; "auto" = the blocks chosen then): bs64 q auto 7.99 / 7.88, flat
# 16-row tiles 8.23 / 8.04, per-slot 16-row 8.24 / 8.10, META_FIRST 7.83 / 7.71, flat 16-row + META_FIRST
# 8.17 / 8.01, flat 8 warps 8.32 / 8.17, flat 16-row 8 warps 8.15 / 8.03, flat 16-row BLOCK_C=256 8.76 / 8.59,
# PDL 7.17, PDL + META_FIRST **6.94**; bs64 v auto 7.55 / 7.48, flat 32-row 7.70 / 7.65, per-slot 32-row
# 8.80 / 8.81, flat 16-row 7.93 / 7.97, META_FIRST 7.41 / 7.34, flat 16-row + META_FIRST 8.12 / 8.02, flat
# 16-row BLOCK_K=256 8.93 / 8.77, flat 16-row 8 warps 8.43 / 8.37, flat 32-row 8 warps 8.36 / 8.33, PDL 6.77,
# PDL + META_FIRST **6.68**; bs256 q auto 16.57 / 16.34, META_FIRST 16.37 / 16.18, PDL 15.65, both **15.46**,
# 16-row tiles 21.8-26.5; v auto 12.24 / 12.28, META_FIRST 12.21 / 12.15, PDL 11.56, both **11.47**, 16- and
# 32-row tiles 15.99-26.4.  Smaller tiles (less padding) were slower everywhere; the launch overlap and the
# earlier slot metadata won (kernels.lora._launch.BLOCKS).
# Round 14 as prepared in session 13 (which had no device time): the tile heights never timed on
# the flat grid at 4 warps.  At decode-bs64 a slot has 16 rows, so a 32-row q tile and a 64-row v tile are
# half and three quarters padding; 16-row q tiles were timed on the per-slot grid only (s12h: 8.21 us, its
# 16 tiles per head mostly empty), v's 32-row tiles before the row search (s11a: 8.82).  Static figures
# (python -m kernel_oracle.benchmarks.hopper_sass --ab decode, triton 3.6.0, docs/benchmarks/data/
# sm90_offline_2026-12-01_s13/): they compile and fit; they do not say which is faster (docs/kernels_lora.md).
# Round 13 (session 12, s12h, for the next session): on the per-slot grid, the chosen blocks against 16-row
# q tiles, 8 warps, 64-column q blocks, 64-column v step-A blocks.
# s12h, us: bs64 q auto (per-slot) 7.92, flat 8.43, 16-row tiles 8.21, 8 warps 8.03, BLOCK_C=64 11.75; bs64 v
# auto 7.54, flat 8.21, BLOCK_K=64 8.44, 8 warps 8.18; bs256 q auto (flat) 16.58, per-slot 17.35; v auto 12.29:
# the chosen blocks stay.
# Round 12 (session 12, after Note [Rank-wide loads]): the chosen q blocks (PREFETCH_ALL=2, one stage, on
# 32-row tiles) against PREFETCH alone and the other depths; each route.
# Round 11 (2026-12-01 session 12): Note [Whole-row prefetch] for q (PREFETCH_ALL 1: the four base
# blocks before step A; 2: A blocks too), with 8 warps, one stage, 16-row tiles; v with 4 and 1 stages.
# s12b / s12c (the second after Note [Rank-wide loads]), us: bs64 q chosen-before 9.24 / 8.67, PREFETCH_ALL 1
# 9.77 / 9.28, 2 9.43 / 8.78, 2 on 8 warps 9.45 / 8.95, 1 with one stage 9.12 / 8.78, 2 with one stage
# 8.85 / 8.36, 2 on 16-row tiles 9.51 / 8.86; bs256 q 17.22 / 16.44, 18.36 / 17.97, 17.26 / 16.79,
# 22.04 / 21.09, 19.03 / 18.53, 17.83 / 18.01, 25.84 / 20.76; v (chosen, 4 stages, 1 stage) bs64 7.55 /
# 7.73, 7.60 / 7.84, 8.94 / 9.16; bs256 12.24 / 12.29, 12.53 / 12.47, 13.37 / 13.16.
# Round 10: small programs for the decode-bs64 tiles (16 rows per slot): 16- and 32-row tiles on 1-2 warps,
# so that more programs are resident (Nsight Compute, s11d: the chosen q kernel takes 160 registers, 3
# programs per SM, and its per-slot grid of 512 programs runs in 1.29 waves; v 204 registers and 74 KB of
# shared memory, 2 per SM), and two stages for v (less shared memory).  Round 9 (s11d, heads first
# chosen): bs64 q auto 9.86, flat 9.06, sorted 9.91; v 7.50 / 8.20 / 7.47; bs256 q 16.96 / 16.98 / 17.73,
# v 12.26 / 12.23 / 12.54; heads first off: bs64 q 9.95, v 7.51, bs256 q 17.38, v 12.79.
# Round 8 (s11c): HEADS_FIRST (consecutive programs take one row tile's heads, whose base rows
# are adjacent): bs64 q 10.03 -> 9.93, v 7.41 -> 7.45, bs256 q 17.34 -> 16.96, v 12.84 -> 12.28.
# Round 7 (2026-12-01 s11b): L2 eviction hints on the data read once
# (bs64 q 10.09 -> 10.01, v 7.49 -> 7.37, bs256 q 17.55 -> 18.20, v 12.84 -> 12.71, prefill unchanged:
# not kept), the compiler's pipelining instead of PREFETCH (q 10.09 -> 12.18), deeper step-A pipelining
# (v 7.49 -> 10.40), 16-row tiles (q 10.68-11.11, v 9.19-9.44) and C_SPLIT=256 (q 12.84-13.01): all
# slower.  Round 6 (s11a, after Note [Row search]): the chosen blocks stayed best (8 warps, wider blocks,
# 32-row v tiles: slower).  Rounds 1-5 (2026-11-30 and s10c-s10e): docs/benchmarks/lora.md and
# docs/benchmarks/data/; round 4 (whole-row blocks, slower everywhere): docs/kernels_lora.md.
DECODE_AB = {
    "q_side_fused": [("auto", {}), ("auto", {"EARLY": True, "BT": 16}), ("auto", {"EARLY": True}),
                     ("sorted", {"EARLY": True, "BT": 16}), ("flat", {"BT": 16})],
    "v_side_fused": [("auto", {}), ("auto", {"EARLY": True}), ("flat", {"EARLY": True}), ("sorted", {"EARLY": True})],
}
# token-major routes (kernels.lora._launch switches): the flat grid wherever allowed, the per-slot
# slot-sorted grid, tiles of consecutive logical rows (Note [Slot-sorted tiles]), and "auto": the
# module's own choice (flat where it halves the programs, FLAT_SLOTS_MIN_SAVING)
ROUTES = {"flat": dict(SLOT_SORTED=True, FLAT_SLOTS=True, FLAT_SLOTS_MIN_SAVING=0),
          "sorted": dict(SLOT_SORTED=True, FLAT_SLOTS=False),
          "logical": dict(SLOT_SORTED=False, FLAT_SLOTS=False), "auto": {}}


@contextlib.contextmanager
def token_major_route(launch, route: str):
    """Launch on ``route`` (a key of :data:`ROUTES`) inside the block; the switches are restored after."""
    saved = {name: getattr(launch, name) for name in ROUTES[route]}
    try:
        for name, value in ROUTES[route].items():
            setattr(launch, name, value)
        yield
    finally:
        for name, value in saved.items():
            setattr(launch, name, value)


def ab_configs(table: dict, blocks: dict, path: str) -> dict:
    """``{op: [(route, blocks), ...]}``: each entry of an A/B ``table`` as the full block dict it launches,
    its overrides applied to ``blocks[op][path]`` (kernels.lora._launch.BLOCKS, the chosen ones)."""
    return {op: [(route, {**blocks[op][path], **overrides}) for route, overrides in entries]
            for op, entries in table.items()}


def _oracle_check(op: str, d: dict) -> str:
    """'ok' or the comparison's message: the op (strict=False, on fresh copies) against the float64 oracle."""
    from kernel_oracle.reference import lora as ref
    from kernel_oracle.reference.tolerance import compare

    import kernel_oracle.kernels.lora as klora

    bi = d["bi"]
    if op == "q_side_fused":
        args = (d["q"], d["B"], d["A"], bi, d["base_q"].clone(), FULL_K)
    else:
        args = (d["attn"], d["A"], d["B"], bi, d["base_v"].clone(), QK, VD)
    oracle = getattr(ref, f"{op}_oracle")
    exact, faithful = oracle(*args), oracle(*args, faithful=True)
    out = getattr(klora, f"{op}_fwd")(*args, strict=False)
    c = compare(out, exact.value, exact.defined, family="lora", baseline=faithful.baselines,
                overflow_alternate=exact.overflow_alternate)
    return "ok" if c.ok else c.message[:200]


# prefill A/B (--prefill-ab): segment-major configurations of the fused kernels on prefill-8x2048, as
# overrides of the chosen segment-major blocks (as DECODE_AB; the route is that of token-major calls only)
# Round 6: the chosen q blocks (64-row tiles, 8 warps, heads first, 64-column step-A blocks) against
# 128-column ones, 2 stages, and the grid's own order.  Round 5 (2026-12-01 s11f, two rounds): q (BLOCK_K
# 128) 641.8 / 641.6 us, BLOCK_K=64 618.6 / 618.9, num_stages=2 623.5 / 623.3, 4 warps 653.5 / 652.7,
# BT=128 663.5 / 662.8, BLOCK_C=256 963.9 / 962.2; v 387.5 / 388.0, BLOCK_K=128 391.0 / 398.3.
# Round 4 (s11e): q 648.2 us, heads first off 666.6, BT=32 4 warps (heads first) 690.2; v 383.8, heads
# first off 395.0.  Round 3 (s11c): q BT=32 660-668 us, heads first 681.6, BT=64 8 warps 660.4 and with
# heads first 640.2, maxnreg 80 / 64 713.3 / 891.7, BT=128 673.2, BLOCK_C=64 882.2; v 401.6, heads first
# 387.9 (maxnreg 80: ptxas error).  Round 2 (s11b): L2 eviction hints unchanged, num_stages 4 slower.
PREFILL_AB = {
    "q_side_fused": [("auto", {}), ("auto", {"BLOCK_K": 128}), ("auto", {"num_stages": 2}),
                     ("auto", {"HEADS_FIRST": False})],
    "v_side_fused": [("auto", {}), ("auto", {"HEADS_FIRST": False})],
}


def fused_ab(klora, launch, shapes=("decode-bs64", "decode-bs256"), table=None, path="tok", nsets=8):
    """Each configuration of ``table`` (DECODE_AB) for ``path`` on each shape: oracle check, then
    do_bench_cudagraph median (us), rotating ``nsets`` input sets."""
    import triton.testing

    table = DECODE_AB if table is None else table
    x = torch.zeros(1, device="cuda")
    out = [dict(floor="one x.add_(1) per call", us=round(triton.testing.do_bench_cudagraph(
        lambda: x.add_(1), rep=50, return_mode="median") * 1e3, 2))]
    print("decode ab", out[0], flush=True)
    saved = {op: launch.BLOCKS[op][path] for op in table}
    configs_of = ab_configs(table, launch.BLOCKS, path)
    for name in shapes:
        sets = [_inputs(SHAPES[name], seed=300 + i) for i in range(nsets)]
        for op, configs in configs_of.items():
            side = "q" if op == "q_side_fused" else "v"
            for route, cfg in configs:
                launch.BLOCKS[op][path] = dict(cfg)
                row = dict(shape=name, op=op, route=route, cfg=cfg)
                try:
                    with token_major_route(launch, route):
                        row["check"] = _oracle_check(op, sets[0])
                        fns = [_calls(klora, d, side)["fused"] for d in sets]
                        row["us"] = round(triton.testing.do_bench_cudagraph(rotating(fns), rep=50,
                                                                             return_mode="median") * 1e3, 2)
                except Exception as e:  # a config that does not compile is a result, not a crash
                    row["error"] = f"{type(e).__name__}: {str(e)[:160]}"
                out.append(row)
                print("decode ab", row, flush=True)
        del sets
        torch.cuda.empty_cache()
    for op, cfg in saved.items():
        launch.BLOCKS[op][path] = cfg
    return out


def decode_floor(klora, launch, shapes=("decode-bs64", "decode-bs256"), nsets=8,
                 routes=("auto", "flat", "sorted")) -> list[dict]:
    """Where a fused decode call's time goes: the chosen configuration timed as ``fused_ab`` times it,
    on each token-major route of ``routes`` (:data:`ROUTES`), with the real ranks and with every slot's
    rank set to 0 (each program then stops after routing its rows and reading its slot's rank: launch +
    route, the floor under the work)."""
    import dataclasses

    import triton.testing

    out = []
    for name in shapes:
        sets = [_inputs(SHAPES[name], seed=300 + i) for i in range(nsets)]
        idle = [dict(d, bi=dataclasses.replace(d["bi"], lora_ranks=torch.zeros_like(d["bi"].lora_ranks)))
                for d in sets]
        for side in ("q", "v"):
            for route in routes:
                for label, group in (("ranks", sets), ("ranks 0", idle)):
                    with token_major_route(launch, route):
                        fns = [_calls(klora, d, side)["fused"] for d in group]
                        us = triton.testing.do_bench_cudagraph(rotating(fns), rep=50, return_mode="median") * 1e3
                    out.append(dict(shape=name, side=side, route=route, ranks=label, us=round(us, 2)))
                    print("decode floor", out[-1], flush=True)
        del sets, idle
        torch.cuda.empty_cache()
    return out


def graph_floor() -> float:
    """Median time of replaying a graph of one trivial kernel: the floor under every graph timing."""
    x = torch.zeros(1, device="cuda")
    g = torch.cuda.CUDAGraph()
    x.add_(1)
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        x.add_(1)
    return _bench(g.replay)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--sweep", action="store_true", help="also time alternative block sizes on prefill-8x2048")
    ap.add_argument("--sweep-decode", action="store_true",
                    help="time token-major block sizes on decode-bs64 (graph replay) and use the best")
    ap.add_argument("--decode-ab", action="store_true",
                    help="only check and time the fused kernels' token-major configurations (DECODE_AB) on the "
                         "decode shapes with do_bench_cudagraph")
    ap.add_argument("--prefill-ab", action="store_true",
                    help="only check and time the fused kernels' segment-major configurations (PREFILL_AB) on "
                         "prefill-8x2048 with do_bench_cudagraph")
    ap.add_argument("--decode-floor", action="store_true",
                    help="only time the fused decode calls with real ranks and with every rank 0 (launch + route), "
                         "on each token-major route of --routes")
    ap.add_argument("--routes", nargs="+", default=["auto", "flat", "sorted"], choices=list(ROUTES),
                    help="--decode-floor: the token-major routes to time (auto: the wrapper's choice; the flat "
                         "grid; the per-slot slot-sorted grid; logical rows)")
    ap.add_argument("--early-reads", action="store_true",
                    help="launch under kernels.lora.early_reads() (Note [Early reads]: the fused decode kernels "
                         "read metadata and weights before the grid-dependency wait)")
    ap.add_argument("--json", default=None, help="write results to this JSON file")
    ap.add_argument("--oracle-record", default=None,
                    help="also write a kernel-oracle result record (reports.schema) to this file or directory")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("kernel_oracle.benchmarks.bench_lora needs a CUDA device; the interpreter is far too slow to time")
    import kernel_oracle.kernels.lora as klora

    with klora.early_reads(args.early_reads):
        _main(args)


def _main(args) -> None:
    import triton

    import kernel_oracle.kernels.lora as klora
    import kernel_oracle.kernels.lora._launch as launch

    info = dict(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), gpu=torch.cuda.get_device_name(),
                torch=torch.__version__, triton=triton.__version__, commit=(git_commit() or "unknown")[:12],
                command="python -m kernel_oracle.benchmarks.bench_lora" + (" --sweep" if args.sweep else "")
                + (" --sweep-decode" if args.sweep_decode else "") + (" --decode-ab" if args.decode_ab else "")
                + (" --prefill-ab" if args.prefill_ab else "")
                + (" --decode-floor --routes " + " ".join(args.routes) if args.decode_floor else "")
                + (" --early-reads" if args.early_reads else ""))
    copy_tbs = copy_bandwidth()
    info["copy_tbs"] = round(copy_tbs, 3)
    info["graph_floor_us"] = round(graph_floor(), 2)
    if args.decode_floor:
        rows = decode_floor(klora, launch, routes=tuple(args.routes))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(dict(info=info, decode_floor=rows), f, indent=1)
        print(f"\n{info}\n| shape | side | route | ranks | cudagraph median us |\n|---|---|---|---|---:|")
        for r in rows:
            print(f"| {r['shape']} | {r['side']} | {r['route']} | {r['ranks']} | {r['us']} |")
        return
    if args.decode_ab or args.prefill_ab:
        ab = fused_ab(klora, launch) if args.decode_ab else \
            fused_ab(klora, launch, ("prefill-8x2048",), PREFILL_AB, "seg", 1)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(dict(info=info, decode_ab=ab), f, indent=1)
        print(f"\n{info}\n| shape | op | route | config | check | cudagraph median us |\n|---|---|---|---|---|---:|")
        print(f"floor: {ab[0]}")
        for r in ab[1:]:
            print(f"| {r['shape']} | {r['op']} | {r['route']} | {r['cfg']} | {r.get('check', r.get('error'))} | "
                  f"{r.get('us', '')} |")
        return
    sweep_rows = sweep(klora, launch) if args.sweep else []
    if args.sweep_decode:
        sweep_rows += sweep_decode(klora, launch)
    rows = run_shapes(klora, args.shapes, copy_tbs)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(info=info, rows=rows, sweep=sweep_rows), f, indent=1)
    if args.oracle_record:
        from kernel_oracle.reports.bench_convert import save_bench_record

        print("result record:", save_bench_record(dict(info=info, rows=rows), args.oracle_record, "bench_lora"))
    print(f"\n{info}")
    print(f"copy bandwidth (D2D, read+write): {copy_tbs:.2f} TB/s; "
          f"graph replay of one trivial kernel: {info['graph_floor_us']:.1f} us")
    print("| shape | side | variant | median us | MB moved | TB/s | % of copy | bar us | met |")
    print("|---|---|---|---:|---:|---:|---:|---:|---|")
    for r in rows:
        met = "" if r["met"] is None else ("yes" if r["met"] else "NO")
        bar = "" if r["bar_us"] is None else f"{r['bar_us']:g}"
        print(f"| {r['shape']} | {r['side']} | {r['variant']} | {r['us']:.1f} | {r['bytes'] / 1e6:.1f} | "
              f"{r['tbs']:.2f} | {r['pct_copy']:.0f} | {bar} | {met} |")


if __name__ == "__main__":
    main()
