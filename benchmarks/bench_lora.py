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

``--sweep`` also times alternative segment-major block sizes (``LoRAOptions.blocks`` entries in place of
``kernels.lora.BLOCKS``') on prefill-8x2048; ``--sweep-decode`` times token-major ones on decode-bs64 by graph
replay and keeps the best for the table.  The replay time of a one-kernel graph is printed as the floor.
``--decode-ab`` (``DECODE_AB``, decode shapes) and ``--prefill-ab`` (``PREFILL_AB``, prefill-8x2048) check
each configuration of the fused kernels against the float64 oracle on the device, then time it with
``triton.testing.do_bench_cudagraph`` (a graph of many calls; decode rotates 8 input sets, more than
the L2 holds), beside a graph of one trivial kernel per call as the floor; nothing else is run.
Both take each configuration on a token-major route (``ROUTES``: the options' own choice, the flat grid, the
per-slot slot-sorted grid, logical rows); ``--decode-floor`` times the default fused configuration with real
ranks and with every rank 0 (launch + route) on each route of ``--routes`` (default: auto, flat and sorted).
Every mode runs under one :class:`~kernel_oracle.kernels.options.LaunchOptions` built from the flags
(``--early-reads``), which the sweeps and A/B tables change per configuration (``with options(lora=...)``);
nothing patches the kernels' modules.  ``--json PATH`` writes the results as JSON.
"""

from __future__ import annotations

import argparse
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
    On ``device="meta"`` the same tensors without data, the metadata on the CPU (tools/hopper_sass.py)."""
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


def _plain(entry) -> dict:
    """A block entry as plain dicts (the default table is read-only mappings; JSON takes dicts)."""
    return {k: _plain(v) if hasattr(v, "items") else v for k, v in entry.items()}


def _entry(op: str, path: str, cfg) -> dict:
    """LoRAOptions changes that launch ``op`` on ``path`` with the block entry ``cfg`` (it replaces the default
    entry whole, Note [LoRA block entries] in kernels.options)."""
    return {"blocks": {op: {path: _plain(cfg)}}}


def sweep(klora) -> list[dict]:
    """Time each alternative segment-major block config of each op on prefill-8x2048."""
    from kernel_oracle.kernels.options import options

    d = _inputs(SHAPES["prefill-8x2048"], seed=7)
    call = _op_calls(klora, d)
    out = []
    for op, configs in SWEEP.items():
        for cfg in configs:
            try:
                with options(lora=_entry(op, "seg", cfg)):
                    us = _bench(call[op])
                out.append(dict(op=op, cfg=cfg, us=round(us, 1)))
            except Exception as e:  # a config that does not compile is a result, not a crash
                out.append(dict(op=op, cfg=cfg, error=f"{type(e).__name__}: {str(e)[:120]}"))
            print("sweep", out[-1], flush=True)
    return out


DECODE_SWEEP = {
    # first config of each op: 16-row (4-row for the head-packed steps) tiles, an in-run control
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


def sweep_decode(klora) -> tuple[list[dict], dict]:
    """Graph-replay time of each token-major block config of each op on decode-bs64: all timings, and the
    block entries (``{op: {"tok": entry}}``, for ``LoRAOptions.blocks``) of each op's fastest config."""
    from kernel_oracle.kernels.lora import BLOCKS
    from kernel_oracle.kernels.options import options

    d = _inputs(SHAPES["decode-bs64"], seed=11)
    call = _op_calls(klora, d)
    out, chosen = [], {}
    for op, configs in DECODE_SWEEP.items():
        best = (float("inf"), _plain(BLOCKS[op]["tok"]))
        for cfg in configs:
            try:
                with options(lora=_entry(op, "tok", cfg)):
                    graph = _graphs([call[op]])[0]
                us = _bench(graph)
                out.append(dict(op=op, cfg=cfg, graph_us=round(us, 2)))
                best = min(best, (us, cfg), key=lambda t: t[0])
            except Exception as e:
                out.append(dict(op=op, cfg=cfg, error=f"{type(e).__name__}: {str(e)[:120]}"))
            print("decode sweep", out[-1], flush=True)
        chosen[op] = {"tok": best[1]}
        out.append(dict(op=op, chosen=best[1]))
    return out, chosen


# decode A/B (--decode-ab): token-major configurations of the fused kernels, each checked against the
# float64 oracle on the device, then timed by triton.testing.do_bench_cudagraph (median of replays of a
# graph holding many calls, so one replay's launch cost is spread over them).  Each entry is (route,
# overrides): the token-major route (ROUTES) and overrides of the default blocks (kernels.lora.BLOCKS; {}: the
# default configuration itself).  The table holds the default blocks against Note [Early reads] (EARLY: the
# route, slot metadata and first weight blocks before the grid-dependency wait) on its tiles and routes, and
# the 16-row flat q tiles without it; the last figures are in docs/BENCHMARKS.md.
DECODE_AB = {
    "q_side_fused": [("auto", {}), ("auto", {"EARLY": True, "BT": 16}), ("auto", {"EARLY": True}),
                     ("sorted", {"EARLY": True, "BT": 16}), ("flat", {"BT": 16})],
    "v_side_fused": [("auto", {}), ("auto", {"EARLY": True}), ("flat", {"EARLY": True}), ("sorted", {"EARLY": True})],
}
# token-major routes, as LoRAOptions fields: the flat grid wherever allowed, the per-slot slot-sorted grid, tiles
# of consecutive logical rows (Note [Slot-sorted tiles]), and "auto": the options in force (by default flat
# where it halves the programs, LoRAOptions.flat_slots_min_saving)
ROUTES = {"flat": dict(slot_sorted=True, flat_slots=True, flat_slots_min_saving=0),
          "sorted": dict(slot_sorted=True, flat_slots=False),
          "logical": dict(slot_sorted=False, flat_slots=False), "auto": {}}


def route_options(route: str, blocks: dict | None = None) -> dict:
    """The LoRAOptions changes that launch on token-major ``route`` (a key of :data:`ROUTES`), with the block
    entries ``blocks`` (``{op: {path: entry}}``) if given: ``with options(lora=route_options(...))``."""
    return {**ROUTES[route], **({"blocks": blocks} if blocks else {})}


def ab_configs(table: dict, blocks, path: str) -> dict:
    """``{op: [(route, blocks), ...]}``: each entry of an A/B ``table`` as the full block dict it launches,
    its overrides applied to ``blocks[op][path]`` (kernels.lora.BLOCKS, the defaults)."""
    return {op: [(route, {**_plain(blocks[op][path]), **overrides}) for route, overrides in entries]
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
# overrides of the default segment-major blocks (as DECODE_AB; the route is that of token-major calls only):
# the default q blocks (64-row tiles, 8 warps, heads first, 64-column step-A blocks) against 128-column ones,
# 2 stages and the grid's own order; the v blocks against the grid's own order.
PREFILL_AB = {
    "q_side_fused": [("auto", {}), ("auto", {"BLOCK_K": 128}), ("auto", {"num_stages": 2}),
                     ("auto", {"HEADS_FIRST": False})],
    "v_side_fused": [("auto", {}), ("auto", {"HEADS_FIRST": False})],
}


def fused_ab(klora, shapes=("decode-bs64", "decode-bs256"), table=None, path="tok", nsets=8) -> list[dict]:
    """Each configuration of ``table`` (DECODE_AB) for ``path`` on each shape: oracle check, then
    do_bench_cudagraph median (us), rotating ``nsets`` input sets."""
    import triton.testing

    from kernel_oracle.kernels.lora import BLOCKS
    from kernel_oracle.kernels.options import options

    table = DECODE_AB if table is None else table
    x = torch.zeros(1, device="cuda")
    out = [dict(floor="one x.add_(1) per call", us=round(triton.testing.do_bench_cudagraph(
        lambda: x.add_(1), rep=50, return_mode="median") * 1e3, 2))]
    print("decode ab", out[0], flush=True)
    configs_of = ab_configs(table, BLOCKS, path)
    for name in shapes:
        sets = [_inputs(SHAPES[name], seed=300 + i) for i in range(nsets)]
        for op, configs in configs_of.items():
            side = "q" if op == "q_side_fused" else "v"
            for route, cfg in configs:
                row = dict(shape=name, op=op, route=route, cfg=cfg)
                try:
                    with options(lora=route_options(route, {op: {path: cfg}})):
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
    return out


def decode_floor(klora, shapes=("decode-bs64", "decode-bs256"), nsets=8,
                 routes=("auto", "flat", "sorted")) -> list[dict]:
    """Where a fused decode call's time goes: the default configuration timed as ``fused_ab`` times it,
    on each token-major route of ``routes`` (:data:`ROUTES`), with the real ranks and with every slot's
    rank set to 0 (each program then stops after routing its rows and reading its slot's rank: launch +
    route, the floor under the work)."""
    import dataclasses

    import triton.testing

    from kernel_oracle.kernels.options import options

    out = []
    for name in shapes:
        sets = [_inputs(SHAPES[name], seed=300 + i) for i in range(nsets)]
        idle = [dict(d, bi=dataclasses.replace(d["bi"], lora_ranks=torch.zeros_like(d["bi"].lora_ranks)))
                for d in sets]
        for side in ("q", "v"):
            for route in routes:
                for label, group in (("ranks", sets), ("ranks 0", idle)):
                    with options(lora=route_options(route)):
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


def parse_args(argv=None) -> argparse.Namespace:
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
                    help="launch with LoRAOptions(early_reads=True) (Note [Early reads]: the fused decode kernels "
                         "read metadata and weights before the grid-dependency wait)")
    ap.add_argument("--json", default=None, help="write results to this JSON file")
    ap.add_argument("--oracle-record", default=None,
                    help="also write a kernel-oracle result record (reports.schema) to this file or directory")
    return ap.parse_args(argv)


def flag_options(args: argparse.Namespace):
    """The LaunchOptions every timed call of this run starts from (the A/B modes change routes and blocks on
    top of it): ``--early-reads``."""
    from kernel_oracle.kernels.options import LaunchOptions, LoRAOptions

    return LaunchOptions(lora=LoRAOptions(early_reads=args.early_reads))


def command_line(args: argparse.Namespace) -> str:
    """The command that reproduces this run's mode and flags (the record's ``command``)."""
    return ("python -m kernel_oracle.benchmarks.bench_lora" + (" --sweep" if args.sweep else "")
            + (" --sweep-decode" if args.sweep_decode else "") + (" --decode-ab" if args.decode_ab else "")
            + (" --prefill-ab" if args.prefill_ab else "")
            + (" --decode-floor --routes " + " ".join(args.routes) if args.decode_floor else "")
            + (" --early-reads" if args.early_reads else ""))


def main(argv=None):
    args = parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("kernel_oracle.benchmarks.bench_lora needs a CUDA device; the interpreter is far too slow to time")
    from kernel_oracle.kernels.options import use_options

    with use_options(flag_options(args)):
        _main(args)


def _write_json(path, **parts) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(parts, f, indent=1)


def _main(args) -> None:
    import triton

    import kernel_oracle.kernels.lora as klora

    info = dict(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), gpu=torch.cuda.get_device_name(),
                torch=torch.__version__, triton=triton.__version__, commit=(git_commit() or "unknown")[:12],
                command=command_line(args))
    copy_tbs = copy_bandwidth()
    info["copy_tbs"] = round(copy_tbs, 3)
    info["graph_floor_us"] = round(graph_floor(), 2)
    if args.decode_floor:
        rows = decode_floor(klora, routes=tuple(args.routes))
        _write_json(args.json, info=info, decode_floor=rows)
        print(f"\n{info}\n| shape | side | route | ranks | cudagraph median us |\n|---|---|---|---|---:|")
        for r in rows:
            print(f"| {r['shape']} | {r['side']} | {r['route']} | {r['ranks']} | {r['us']} |")
        return
    if args.decode_ab or args.prefill_ab:
        ab = fused_ab(klora) if args.decode_ab else fused_ab(klora, ("prefill-8x2048",), PREFILL_AB, "seg", 1)
        _write_json(args.json, info=info, decode_ab=ab)
        print(f"\n{info}\n| shape | op | route | config | check | cudagraph median us |\n|---|---|---|---|---|---:|")
        print(f"floor: {ab[0]}")
        for r in ab[1:]:
            print(f"| {r['shape']} | {r['op']} | {r['route']} | {r['cfg']} | {r.get('check', r.get('error'))} | "
                  f"{r.get('us', '')} |")
        return
    _table(klora, args, info, copy_tbs)


def _table(klora, args, info: dict, copy_tbs: float) -> None:
    """The plain mode: the table of every shape (after --sweep / --sweep-decode, with the decode sweep's best
    blocks)."""
    from kernel_oracle.kernels.options import options

    sweep_rows = sweep(klora) if args.sweep else []
    chosen: dict = {}
    if args.sweep_decode:
        decode_rows, chosen = sweep_decode(klora)
        sweep_rows += decode_rows
    with options(lora={"blocks": chosen} if chosen else {}):
        rows = run_shapes(klora, args.shapes, copy_tbs)
    _write_json(args.json, info=info, rows=rows, sweep=sweep_rows)
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
