"""SGLang's real kv_b LoRA kernels on a GPU: ``python -m kernel_oracle.benchmarks.sglang_gpu --wheels DIR``.

Note [What runs on the GPU]
---------------------------
The interpreter cannot run bf16 or CUDA graphs, so three things about SGLang's published kernels
(loaded standalone from wheels in ``--wheels DIR``: no registry needed on the GPU machine; slim
wheels from ``python -m kernel_oracle.fuzz.targets.sglang_slim DIR WHEEL...`` suffice) are
checked here:

1. **differential, every dtype**: the edge cases of ``oracle_tests/fuzz/test_sglang_release.py`` (tile
   edges, rank 0, permutation, odd dims, strided views, stale host ints) for the four split steps in
   fp32 (TF32: the target's declared precision), fp16 and bf16, against the oracle;
2. **CUDA-graph capture and replay** (docs/semantics.md#cuda-graph-host-ints): a graph is captured for one batch (one
   segment, host ints ``bs = num_segments = 1``, ``max_len`` an upper bound, padded to ``PAD``
   segments) and replayed for others (more segments, rotated slots, other lengths within the bound):
   only the device tensors are rewritten in place before each replay, and each replay's output is
   judged against the oracle on the replayed batch.  0.5.12 must fail here (PR #28371), 0.5.15+ pass;
3. **timing** beside ours in the same process (the BENCHMARKS.md LoRA table's same-run column):
   bf16, H=64, qk_nope=v_head_dim=128, kv_lora_rank=512, R=32, 4 slots; the split q side (A then B)
   and v side, prefill-8x2048 eager and decode-bs64 under graph replay; ``triton.testing.do_bench``
   medians.  SGLang's kernels have no fused entry points; ours are timed split and fused.

Exit status: 0 when every check of (1) and (2) went as expected, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

# the LoRA benchmark's problem (dims, ranks, scalings, seeded bf16 inputs) and its rotation of input sets:
# both benches time the same data
from kernel_oracle.benchmarks.bench_lora import QK, VD, _inputs, rotating
from kernel_oracle.benchmarks.bench_lora import SHAPES as BENCH_SHAPES

SPLIT_STEPS = ("step_a_q", "step_b_q", "step_a_v", "step_b_v")
DTYPES = ("float32", "float16", "bfloat16")
# name -> LoRAProblem fields (the CPU test's edge table, at GPU-friendly sizes)
EDGE_CASES = {
    "tile edges 15/16/17 rows": dict(seg_lens=(15, 16, 17), weight_indices=(0, 1, 0), lora_ranks=(16, 8)),
    "tile edges 63/64/65/129 rows": dict(seg_lens=(63, 64, 65, 129), weight_indices=(1, 0, 1, 0), lora_ranks=(16, 16)),
    "empty and 1-row segments": dict(seg_lens=(0, 1, 0, 2), weight_indices=(1, 0, 1, 1), lora_ranks=(16, 16)),
    "rank 0 slot and rank above R": dict(seg_lens=(3, 4), weight_indices=(0, 1), lora_ranks=(0, 19)),
    "permuted rows, odd dims": dict(seg_lens=(5, 33), weight_indices=(1, 0), lora_ranks=(16, 12), permute=True,
                                    qk=127, vd=65, C=129),
    "strided, offset views": dict(seg_lens=(4, 18), weight_indices=(0, 1), lora_ranks=(16, 16), strided=True,
                                  offset_views=True, extra_rows=2),
    "graph replay, stale host ints": dict(seg_lens=(3, 5, 2), weight_indices=(0, 1, 1), lora_ranks=(16, 8),
                                          cuda_graph_pad_to=4, stale_host_ints=(1, 1, 17)),
    "realistic dims": dict(seg_lens=(1, 7, 40), weight_indices=(0, 1, 0), lora_ranks=(16, 16), H=16, qk=128,
                           vd=128, C=512),
}


def _problem(op: str, dtype: str, fields: dict):
    from kernel_oracle.harness.problem_lora import LoRAProblem

    base = dict(H=2, qk=16, vd=16, C=32, R=16, scalings=(1.0, -0.5), seed=7)
    base.update(fields)
    return LoRAProblem(op=op, dtype=dtype, **base)


def differential(spec: str, sources) -> list[dict]:
    from kernel_oracle.fuzz.targets import resolve_target
    from kernel_oracle.harness.check import Case, check_case

    t = resolve_target(spec, "cuda", sources=sources)
    if not t.available:
        return [dict(target=spec, check="differential", ok=False, detail=f"unavailable: {t.reason}")]
    rows = []
    for op in SPLIT_STEPS:
        for dtype in DTYPES:
            for name, fields in EDGE_CASES.items():
                v = check_case(t, Case(_problem(op, dtype, fields)), "cuda")
                rows.append(dict(target=spec, check="differential", op=op, dtype=dtype, case=name, ok=v.ok,
                                 detail="" if v.ok else f"{v.kind}: {(v.message or '').splitlines()[0]}"))
    return rows


# ---- CUDA-graph capture / replay -------------------------------------------------------------------------

PAD, MAX_LEN, ROWS = 8, 24, 8 * 24
REPLAYS = (  # (segment lengths, slots): more segments than captured, rotated slots, lengths within MAX_LEN
    ((5,), (0,)),
    ((3, 7, 1, 12), (1, 0, 1, 0)),
    ((24, 24, 24, 24, 24, 24, 24, 24), (0, 1, 0, 1, 1, 0, 1, 0)),
    ((0, 9, 0, 2, 17), (1, 1, 0, 0, 1)),
    ((1,) * 8, (1, 0, 1, 0, 1, 0, 1, 0)),
)


def _graph_problem(op: str, dtype: str, seg_lens, slots, seed: int):
    return _problem(op, dtype, dict(seg_lens=tuple(seg_lens), weight_indices=tuple(slots), lora_ranks=(16, 8),
                                    cuda_graph_pad_to=PAD, stale_host_ints=(1, 1, MAX_LEN),
                                    extra_rows=ROWS - sum(seg_lens), H=4, qk=64, vd=64, C=128, seed=seed))


def _copy_into(dst_call, src_call) -> None:
    """Rewrite the captured call's device tensors (data and batch-info tensors) in place."""
    for d, s in zip(dst_call.args, src_call.args):
        if isinstance(d, torch.Tensor):
            d.copy_(s)
        elif hasattr(d, "seg_indptr"):
            for name in ("seg_indptr", "weight_indices", "seg_lens", "lora_ranks", "scalings"):
                getattr(d, name).copy_(getattr(s, name))


def graph_replay(spec: str, op: str, dtype: str, sources) -> list[dict]:
    from kernel_oracle.fuzz.targets import resolve_target
    from kernel_oracle.harness.check import Case, Observed, expected_outcome, judge
    from kernel_oracle.harness.problems import materialize

    t = resolve_target(spec, "cuda", sources=sources)
    if not t.available:
        return [dict(target=spec, check="graph", ok=False, detail=f"unavailable: {t.reason}")]
    fn = t.entry(op)
    captured = materialize(_graph_problem(op, dtype, (MAX_LEN,), (0,), seed=1), "cuda")
    inplace = captured.inplace
    fn(*captured.args, **captured.kwargs)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*captured.args, **captured.kwargs)
    rows = []
    for k, (lens, slots) in enumerate(REPLAYS):
        p = _graph_problem(op, dtype, lens, slots, seed=10 + k)
        call = materialize(p, "cuda")
        _copy_into(captured, call)
        graph.replay()
        torch.cuda.synchronize()
        got = (captured.args[inplace] if inplace is not None else out).detach().cpu().clone()
        case = Case(p)
        expected = expected_outcome(case, "cuda", precision=t.precision_for(op), call=call)
        v = judge(case, expected, Observed("ok", output=got), call=call, device="cuda")
        rows.append(dict(target=spec, check="graph", op=op, dtype=dtype, case=f"replay {k}: {len(lens)} segments",
                         ok=v.ok, detail="" if v.ok else f"{v.kind}: {(v.message or '').splitlines()[0]}"))
    return rows


# ---- timing ----------------------------------------------------------------------------------------------

SHAPES = {name: BENCH_SHAPES[name] for name in ("decode-bs64", "decode-bs256", "prefill-8x2048")}
# do_bench_cudagraph replays a graph of many calls without flushing L2, so decode rotates this many input
# sets (8 x 9-42 MB > the 60 MB L2): each call reads from HBM, as in bench_lora --decode-ab
GRAPH_SETS = 8


def _bench(fn) -> float:
    import triton.testing

    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3  # us


def _side_calls(entries: dict, d: dict, side: str, ours: bool) -> dict:
    kw = {"strict": False} if ours else {}
    bi = d["bi"]
    if side == "q":
        def split():
            mid = entries["step_a_q"](d["q"], d["B"], bi, QK + VD, **kw)
            entries["step_b_q"](mid, d["A"], bi, d["base_q"], **kw)
        calls = {"split": split}
        if "q_side_fused" in entries:
            calls["fused"] = lambda: entries["q_side_fused"](d["q"], d["B"], d["A"], bi, d["base_q"], QK + VD, **kw)
    else:
        def split():
            mid = entries["step_a_v"](d["attn"], d["A"], bi, **kw)
            entries["step_b_v"](mid, d["B"], bi, d["base_v"], QK, VD, **kw)
        calls = {"split": split}
        if "v_side_fused" in entries:
            calls["fused"] = lambda: entries["v_side_fused"](d["attn"], d["A"], d["B"], bi, d["base_v"], QK, VD, **kw)
    return calls


def _graphed(fn):
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def timing(specs: list[str], sources) -> list[dict]:
    """Rows of (target, shape, side, variant): ``us``, do_bench median (decode: of one graph replay, launch
    included; prefill: eager, L2 flushed), and ``cudagraph_us``, do_bench_cudagraph median (a graph of many
    calls, the launch spread over them; decode rotates :data:`GRAPH_SETS` input sets)."""
    import triton.testing

    from kernel_oracle.fuzz.targets import resolve_target

    targets = {"ours (triton)": (resolve_target("triton", "cuda"), True)}
    targets.update({s: (resolve_target(s, "cuda", sources=sources), False) for s in specs})
    rows = []
    for shape, seg in SHAPES.items():
        decode = shape.startswith("decode")
        sets = [_inputs(seg, seed=100 + i) for i in range(GRAPH_SETS if decode else 1)]
        for name, (t, ours) in targets.items():
            if not t.available:
                rows.append(dict(target=name, shape=shape, side="-", variant="-", us=None, detail=t.reason))
                continue
            for side in ("q", "v"):
                per_set = [_side_calls(t.entries, d, side, ours) for d in sets]
                for variant, fn in per_set[0].items():
                    label = f"graph-{variant}" if decode else variant
                    row = dict(target=name, shape=shape, side=side, variant=label)
                    try:  # a call that cannot be timed (or captured) is a result, not a crash
                        row["us"] = round(_bench(_graphed(fn) if decode else fn), 2)
                        row["cudagraph_us"] = round(triton.testing.do_bench_cudagraph(
                            rotating([c[variant] for c in per_set]), rep=50, return_mode="median") * 1e3, 2)
                    except Exception as e:  # noqa: BLE001
                        row.setdefault("us", None)
                        row["detail"] = f"{type(e).__name__}: {str(e)[:160]}"
                    rows.append(row)
        del sets
        torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheels", default=".whl/sglang", metavar="DIR",
                    help="directory of sglang-X.Y.Z-*.whl files (full or slim); default .whl/sglang")
    ap.add_argument("--releases", nargs="*", default=["0.5.12", "0.5.23"], metavar="X.Y.Z")
    ap.add_argument("--bench-release", default="0.5.23", metavar="X.Y.Z", help="the release timed beside ours")
    ap.add_argument("--no-bench", action="store_true", help="checks only")
    ap.add_argument("--bench-only", action="store_true", help="timing only (no differential or graph checks)")
    ap.add_argument("--json", default=None, metavar="PATH", help="write every row as JSON")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("kernel_oracle.benchmarks.sglang_gpu needs a CUDA device (bf16 and CUDA graphs); on the "
                         "CPU run oracle_tests/fuzz/test_sglang_release.py")
    from kernel_oracle.harness.targets import TargetSources

    sources = TargetSources(sglang_wheel=args.wheels)
    started = time.time()
    checks: list[dict] = []
    for rel in ([] if args.bench_only else args.releases):
        for variant in ("sglang", "sglang-trt"):
            spec = f"{variant}=={rel}"
            if variant == "sglang-trt" and rel == "0.5.12":
                continue  # the TRT-LLM-style variant starts in 0.5.15
            checks += differential(spec, sources)
            for op in SPLIT_STEPS:
                for dtype in ("bfloat16", "float16"):
                    checks += graph_replay(spec, op, dtype, sources)
    bench = [] if args.no_bench else timing([f"sglang=={args.bench_release}", f"sglang-trt=={args.bench_release}"],
                                            sources)
    expected_bad = {f"sglang=={r}" for r in args.releases if r == "0.5.12"}  # PR #28371: graph replay fails
    surprises = []
    for spec in sorted({c["target"] for c in checks}):
        mine = [c for c in checks if c["target"] == spec]
        diff = [c for c in mine if c["check"] == "differential"]
        graph = [c for c in mine if c["check"] == "graph"]
        print(f"{spec}: differential {sum(c['ok'] for c in diff)}/{len(diff)} passed; graph replay "
              f"{sum(c['ok'] for c in graph)}/{len(graph)} passed")
        for c in mine:
            if not c["ok"]:
                print(f"   FAIL {c['check']} {c.get('op', '')} {c.get('dtype', '')} [{c.get('case', '')}]: {c['detail']}")
        graph_ok = all(c["ok"] for c in graph)
        # PR #28371 also shows in the differential's stale-host-ints case (a graph-mode batch whose host
        # ints are capture-time values): a release with the bug must fail exactly that case there
        stale = [c for c in diff if "stale host ints" in c.get("case", "")]
        rest = [c for c in diff if "stale host ints" not in c.get("case", "")]
        stale_ok = all(c["ok"] for c in stale)
        if not all(c["ok"] for c in rest) or graph_ok == (spec in expected_bad) or \
                (stale and stale_ok == (spec in expected_bad)):
            surprises.append(spec)
    if bench:
        print("\n| target | shape | side | variant | do_bench median us | do_bench_cudagraph median us |\n"
              "|---|---|---|---|---:|---:|")
        for r in bench:
            print(f"| {r['target']} | {r['shape']} | {r['side']} | {r['variant']} | "
                  f"{'-' if r['us'] is None else r['us']} | {r.get('cudagraph_us', r.get('detail', '-'))} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, checks=checks, bench=bench,
                           elapsed_s=round(time.time() - started, 1)), fh, indent=1)
    print(f"\n{'as expected' if not surprises else 'UNEXPECTED: ' + ', '.join(surprises)} "
          f"({time.time() - started:.0f} s; 0.5.12 is expected to fail graph replay, PR #28371)")
    return 0 if not surprises else 1


if __name__ == "__main__":
    sys.exit(main())
