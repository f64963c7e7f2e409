"""Benchmark of the Triton vision attention against torch's varlen attention and an SDPA loop.

``python -m kernel_oracle.benchmarks.bench_vision`` on any CUDA machine; bf16 random data; median times from
``triton.testing.do_bench``; FLOPs = 4 * sum(n_b^2) * H * D.  Columns:

* ``triton (launch)``: :meth:`kernels.vision.VisionLaunch.run`, metadata resolved once (how a
  model reuses one batch's metadata over its layers): the kernel plus output allocation;
* ``triton (cold call)``: the full ``flashinfer_cudnn_attention`` entry point with its launch cache
  cleared before every call: contract resolution, strict validation and the block table (one host
  sync per call) -- what the first layer of a vision tower pays for a new batch's metadata;
* ``triton (warm call)``: the same entry point called again with the same metadata, as every later
  layer calls it (a launch-cache hit: no resolution, no sync).  The bars are judged on this column;
* ``gluon warm call``: the same warm call on the Gluon Hopper kernel (``VisionOptions(kernel="gluon")``,
  Note [Gluon Hopper kernel]) where it runs (sm_90, fp16/bf16), with its largest difference from the Triton
  kernel's output;
* ``varlen_attn``: ``torch.nn.attention.varlen.varlen_attn`` (absent before torch 2.10: skipped);
* ``sdpa loop``: ``scaled_dot_product_attention`` once per sequence;
* ``flashinfer-cudnn``: the real engine behind SGLang's ``flashinfer_cudnn`` backend (target
  ``flashinfer-cudnn``, :mod:`kernel_oracle.fuzz.targets.flashinfer_cudnn`) called as SGLang calls it, wrapper included
  (metadata checks with their host syncs, then FlashInfer's cuDNN prefill); ``cudnn engine``: the
  FlashInfer call alone with the wrapper's work done once.  Skipped, with the target's reason,
  where FlashInfer or the cuDNN frontend is missing (scripts/flashinfer_wheels.sh installs them).

``--sweep`` also times each candidate :class:`~kernels.vision.KernelConfig` on every shape (passed as
``config=``).  The launch options (:class:`~kernels.options.VisionOptions`: ``--split-head-dim``,
``--fp32-exact``, ``--no-fold-scale``, ``--no-direct-launch``) apply to every timed call.  ``--json PATH``
writes the records (with date, commit, GPU, torch and triton versions and the options).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import inspect
import json
import sys
import types

import torch

from kernel_oracle.harness.schema import git_commit

# (name, sequence lengths, heads, head dim) as in issue 4
SHAPES = (
    ("8 ragged images", (1024, 2048, 576, 4096, 1300, 64, 3000, 2200), 16, 80),
    ("4x4096", (4096,) * 4, 16, 72),
    ("64x256", (256,) * 64, 16, 64),
    ("2x16384", (16384,) * 2, 16, 128),
)
# (block_m, block_n, num_warps, num_stages[, tma[, maxnreg]]) (KernelConfig): the candidates of --sweep, around
# the defaults (kernels.vision._config.default_config): 64- and 128-row blocks of 32 to 128 keys, 3 or 4
# stages, two programs per SM (128 x 32 blocks capped at 128 registers), pointer and descriptor loads
SWEEP = ((128, 128, 8, 3), (128, 64, 8, 3), (64, 64, 4, 3), (64, 128, 4, 3), (64, 32, 4, 3),
         (128, 64, 8, 4), (128, 32, 8, 3, False, 128), (128, 32, 8, 4, False, 128),
         (128, 64, 8, 3, True), (64, 64, 4, 3, True), (128, 64, 8, 4, True),
         (128, 128, 8, 3, True), (128, 32, 8, 4, True, 128))
# --split-head-dim: VisionOptions.split_head_dim
SPLIT_HEAD_DIM = {"auto": None, "on": True, "off": False}


GLUON = {"kernel": "gluon"}  # the vision options of the "gluon warm call" column


def _varlen():
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


def _inputs(lens, H, D, dtype, device):
    T = sum(lens)
    q, k, v = (torch.randn(T, H, D, dtype=dtype, device=device) for _ in range(3))
    cu = torch.tensor([0] + list(lens), dtype=torch.int64).cumsum(0)
    return q, k, v, cu


def bench_shape(name, lens, H, D, *, sweep=False, dtype=torch.bfloat16, device="cuda", configs=SWEEP):
    import triton.testing

    from kernel_oracle.kernels.vision import KernelConfig, clear_launch_cache, flashinfer_cudnn_attention, plan_attention
    from kernel_oracle.reference.vision_metadata import prepare_flashinfer_cudnn_metadata

    q, k, v, cu = _inputs(lens, H, D, dtype, device)
    md = prepare_flashinfer_cudnn_metadata(cu, device, elem_per_token=H * D)
    flops = 4.0 * sum(n * n for n in lens) * H * D

    def tflops(ms):
        return flops / (ms * 1e-3) / 1e12

    def timed(fn):
        return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")

    rec = {"shape": name, "lens": list(lens), "heads": H, "head_dim": D, "dtype": str(dtype), "flops": flops}
    launch = plan_attention(q, k, v, None, None, None, forward_metadata=md)
    rec["config"] = list(launch.config)
    out = launch.run()
    rec["triton_launch_ms"] = timed(launch.run)
    def call():
        return flashinfer_cudnn_attention(q, k, v, None, None, None, forward_metadata=md)

    def cold_call():
        clear_launch_cache()
        return call()

    rec["triton_call_cold_ms"] = timed(cold_call)
    clear_launch_cache()
    torch.testing.assert_close(call(), out, rtol=0, atol=0)  # a miss, then ...
    torch.testing.assert_close(call(), out, rtol=0, atol=0)  # ... a hit: the same output
    rec["triton_call_warm_ms"] = timed(call)
    if _gluon_runs(q, k, v, md):  # Note [Gluon Hopper kernel]: the same warm call on the Gluon kernel
        from kernel_oracle.kernels.options import options

        with options(vision=GLUON):  # entered once, outside the timed calls
            rec["max_abs_diff_gluon_vs_triton"] = float((call().float() - out.float()).abs().max())
            rec["gluon_call_warm_ms"] = timed(call)
    varlen = _varlen()
    if varlen is not None:
        cu_dev = cu.to(device=device, dtype=torch.int32)
        mx = max(lens)
        kw = {"scale": D ** -0.5} if "scale" in inspect.signature(varlen).parameters else {}
        ref = varlen(q, k, v, cu_dev, cu_dev, mx, mx, **kw)
        rec["max_abs_diff_vs_varlen"] = float((out.float() - ref.float()).abs().max())
        rec["varlen_ms"] = timed(lambda: varlen(q, k, v, cu_dev, cu_dev, mx, mx, **kw))
    bounds = cu.tolist()
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def loop():
        for s, e in zip(bounds[:-1], bounds[1:]):
            sdpa(q[s:e].transpose(0, 1)[None], k[s:e].transpose(0, 1)[None], v[s:e].transpose(0, 1)[None])

    rec["sdpa_loop_ms"] = timed(loop)
    engine = _flashinfer_cudnn(device)
    if engine is not None:
        engine_out = engine.flashinfer_cudnn_attention(q, k, v, None, None, None, forward_metadata=md)
        rec["max_abs_diff_vs_flashinfer_cudnn"] = float((out.float() - engine_out.float()).abs().max())
        rec["flashinfer_cudnn_ms"] = timed(
            lambda: engine.flashinfer_cudnn_attention(q, k, v, None, None, None, forward_metadata=md))
        rec["cudnn_engine_ms"] = timed(engine.prepare(q, k, v, None, None, None, forward_metadata=md))
    for key in [k_ for k_ in rec if k_.endswith("_ms")]:
        rec[key[:-3] + "_tflops"] = tflops(rec[key])
    if sweep:
        rec["sweep"] = []
        for cfg in configs:
            try:
                la = plan_attention(q, k, v, None, None, None, forward_metadata=md, config=KernelConfig(*cfg))
                diff = float((la.run().float() - out.float()).abs().max())  # against the chosen config's output
                ms = timed(la.run)
                rec["sweep"].append({"config": list(cfg), "ms": ms, "tflops": tflops(ms), "max_abs_diff": diff})
            except Exception as exc:  # noqa: BLE001 - e.g. out of shared memory: report, keep going
                rec["sweep"].append({"config": list(cfg), "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
    return rec


def _gluon_runs(q, k, v, md) -> bool:
    """Whether a launch under ``VisionOptions(kernel="gluon")`` runs the Gluon Hopper kernel on this
    layout and device (else the reason to stderr)."""
    from kernel_oracle.kernels.options import options
    from kernel_oracle.kernels.vision import plan_attention

    with options(vision=GLUON):
        if plan_attention(q, k, v, None, forward_metadata=md).kernel == "gluon":
            return True
    print("gluon column skipped: this layout or device runs the Triton kernel", file=sys.stderr)
    return False


def _flashinfer_cudnn(device):
    """The engine binding of target ``flashinfer-cudnn``, or None (the reason goes to stderr once)."""
    from kernel_oracle.fuzz.targets.flashinfer_cudnn import ENGINES
    from kernel_oracle.fuzz.targets import resolve_target

    target = resolve_target("flashinfer-cudnn", device)
    if not target.available:
        if not _SKIPPED:
            print(f"flashinfer-cudnn column skipped: {target.reason}", file=sys.stderr)
            _SKIPPED.append(target.reason)
        return None
    return ENGINES[str(torch.device(device))]


_SKIPPED: list = []


# issue 4: at least varlen_attn's speed on every shape, and this much on the long-sequence shape
BAR_TFLOPS = {"2x16384": 450.0}


def bar(r) -> str:
    """'met' / 'missed (...)' for the warm full call against the bars."""
    why = []
    if "varlen_ms" in r and r["triton_call_warm_ms"] > r["varlen_ms"]:
        why.append("slower than varlen_attn")
    need = BAR_TFLOPS.get(r["shape"])
    if need is not None and r["triton_call_warm_tflops"] < need:
        why.append(f"< {need:.0f} TFLOP/s")
    if "varlen_ms" not in r:
        why.append("varlen_attn unavailable")
    return "met" if not why else "missed (" + ", ".join(why) + ")"


def render(records) -> str:
    cols = (("triton_call_warm", "warm call"), ("gluon_call_warm", "gluon warm call"),
            ("triton_call_cold", "cold call"), ("triton_launch", "planned"),
            ("varlen", "varlen_attn"), ("sdpa_loop", "sdpa loop"), ("flashinfer_cudnn", "flashinfer-cudnn"),
            ("cudnn_engine", "cudnn engine"))
    lines = ["| shape | H | D | " + " | ".join(f"{c} TFLOP/s (ms)" for _, c in cols)
             + " | warm vs varlen | bar (warm call) | max abs diff vs varlen | vs flashinfer-cudnn |",
             "|---|---|---|" + "---|" * len(cols) + "---|---|---|---|"]
    for r in records:
        cells = []
        for key, _ in cols:
            cells.append(f"{r[key + '_tflops']:.0f} ({r[key + '_ms']:.3f})" if key + "_ms" in r else "n/a")
        ratio = f"{r['varlen_ms'] / r['triton_call_warm_ms']:.2f}x" if "varlen_ms" in r else "n/a"
        lines.append(f"| {r['shape']} | {r['heads']} | {r['head_dim']} | " + " | ".join(cells)
                     + f" | {ratio} | {bar(r)} | {r.get('max_abs_diff_vs_varlen', float('nan')):.2g} "
                     f"| {r.get('max_abs_diff_vs_flashinfer_cudnn', float('nan')):.2g} |")
    for r in records:
        for s in r.get("sweep", ()):
            val = f"{s['tflops']:.0f} TFLOP/s, max abs diff {s['max_abs_diff']:.2g}" if "tflops" in s else s["error"]
            lines.append(f"sweep {r['shape']} {tuple(s['config'])}: {val}")
    return "\n".join(lines)


def _engine_status() -> str:
    from kernel_oracle.fuzz.targets import resolve_target

    t = resolve_target("flashinfer-cudnn", "cuda")
    return t.to_record()["reason"] if t.available else f"unavailable: {t.reason}"


def host_cost(n: int = 3000, lens=(64, 64, 64, 64), H: int = 2, D: int = 64) -> list[dict]:
    """Host time per call (us): ``n`` calls submitted back to back on a tiny batch, wall time over ``n``
    (the GPU's own time per call, from do_bench, is far below it, so the loop measures the host), for the
    warm entry point (the repeat shortcut, Note [Repeated call], with either metadata form and with a
    no-op C launch: its Python alone; the keyed path; direct launches off: Triton's JIT launch), the planned
    launch, the bare launches and their pieces (the launch-cache key, ``torch.empty`` of the output)."""
    from kernel_oracle.kernels.options import options
    from kernel_oracle.kernels.vision import _direct, attention, flashinfer_cudnn_attention, plan_attention
    from kernel_oracle.kernels.vision._kernel import launch_attention
    from kernel_oracle.reference.vision_metadata import prepare_flashinfer_cudnn_metadata

    q, k, v, cu = _inputs(lens, H, D, torch.bfloat16, "cuda")
    md = prepare_flashinfer_cudnn_metadata(cu, "cuda", elem_per_token=H * D)
    launch = plan_attention(q, k, v, None, None, None, forward_metadata=md)
    out = launch.run()
    plan = launch.plan
    direct = launch._direct[0]

    def warm():
        return flashinfer_cudnn_attention(q, k, v, None, None, None, forward_metadata=md)

    def warm_jit():  # another launch (the cache keys the options), never launched directly
        with options(vision={"direct_launch": False}):
            return _timed("warm call, direct launches off (Triton's JIT launch)", warm, n)

    def hit_path():  # the keyed cache-hit path with the launch stubbed out (once, around the loop): key, lookup
        real = attention.VisionLaunch._launch
        attention.VisionLaunch._launch = lambda self, q3, k3, v3, poison: out
        try:
            return _timed("keyed cache-hit path without the launch", keyed, n)
        finally:
            attention.VisionLaunch._launch = real

    def keyed():  # a keyword the repeat shortcut leaves to the keyed path (the same cache entry: "ieee" is the default)
        return flashinfer_cudnn_attention(q, k, v, None, None, None, forward_metadata=md, fp32_precision="ieee")

    def by_keywords():  # SGLang's other metadata form: cu_seqlens (the packed indptrs) with two keywords
        return flashinfer_cudnn_attention(q, k, v, md.packed_indptrs, None, None, sequence_lengths=md.sequence_lengths,
                                          max_seqlen=md.flashinfer_max_seqlen)

    def python_alone():  # the warm call with a launcher whose C launch does nothing: its Python alone
        warm()
        entry = attention._LAST[1]  # the warm call's cache entry
        real = entry.launch._direct[0]
        entry.launch._direct[0] = noop_direct_launch(entry.launch, q, k, v, out)
        attention._REPEAT = None  # remembered again, with the no-op launcher, by the next calls
        try:
            return _timed("warm call, repeat shortcut, no-op C launch (the Python alone)", warm, n)
        finally:
            entry.launch._direct[0] = real
            attention._REPEAT = None

    calls = {
        "warm call (flashinfer_cudnn_attention, cache hit)": warm,
        "warm call, cu_seqlens + sequence_lengths/max_seqlen keywords (repeat shortcut)": by_keywords,
        "warm call through the cache key (no repeat shortcut)": keyed,
        "planned (VisionLaunch.run)": launch.run,
        "kernel launch alone, Triton's JIT (launch_attention)":
            lambda: launch_attention(q, k, v, out, launch.table, launch.num_blocks, plan.scale, launch.config,
                                     launch.precision, launch.options),
        "kernel launch alone, direct (DirectLaunch)": lambda: direct(q, k, v, out),
        "launch-cache key alone": lambda: attention._cache_key(q, k, v, None, None, md, {}),
        "output allocation alone (torch.empty)": lambda: torch.empty_like(out),
    }
    if not direct:
        print("no direct launcher:", _direct.direct_launch_info(), file=sys.stderr)
        del calls["kernel launch alone, direct (DirectLaunch)"]
    # three interleaved rounds, the fastest of each: one slow round (a clock change, a GC pass) does not decide
    extra = [hit_path, python_alone, warm_jit] if direct else [hit_path, warm_jit]
    rounds = [[_timed(name, fn, n) for name, fn in calls.items()] + [f() for f in extra] for _ in range(3)]
    return [min(group, key=lambda r: r["host_us"]) for group in zip(*rounds)]


def noop_direct_launch(launch, q, k, v, out):
    """A direct launcher of ``launch``'s arguments whose C launch does nothing (``"".format`` ignores its
    arguments), as :class:`~kernels.vision.attention.VisionLaunch` holds one (its launch function, or the
    :class:`DirectLaunch` itself before it had one): the direct launch's Python without the GPU.  On CPU
    tensors (a launch planned under the interpreter) C functions of the same arity stand in for torch's
    device and stream queries."""

    from kernel_oracle.kernels.vision import _direct
    from kernel_oracle.kernels.vision._kernel import _vision_attn_fwd, attention_arguments

    kernel = types.SimpleNamespace(_init_handles=lambda: None, run="".format, function=1, packed_metadata=2)
    grid, args, _ = attention_arguments(q, k, v, out, launch.table, launch.num_blocks, launch.plan.scale,
                                        launch.config, launch.precision, launch.options)
    if q.is_cuda:
        runtime = None  # the real device and stream queries and Triton's hooks
    else:
        from triton import knobs
        runtime = (int, abs, knobs.runtime)
    direct = _direct.DirectLaunch(kernel, grid, args, _vision_attn_fwd.arg_names, 4, runtime=runtime)
    return getattr(direct, "launch", direct)


def host_us(fn, n: int) -> float:
    """Host time per call (us): 50 warm-up calls, then ``n`` calls back to back, wall time over ``n``."""
    import time

    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    return round(host, 2)


def _timed(name: str, fn, n: int) -> dict:
    import triton.testing

    host = host_us(fn, n)
    device = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3
    return dict(call=name, host_us=host, do_bench_us=round(device, 2))


def _config_arg(text: str) -> tuple:
    """``--configs`` entry: M,N,WARPS,STAGES[,TMA[,MAXNREG]] as a :class:`~kernels.vision.KernelConfig`'s fields."""
    try:
        fields = tuple(int(x) for x in text.split(","))
    except ValueError:
        fields = ()
    if not 4 <= len(fields) <= 6:
        raise argparse.ArgumentTypeError(f"expected M,N,WARPS,STAGES[,TMA[,MAXNREG]] (integers) but got {text!r}")
    return fields[:4] + tuple(bool(x) if i == 4 else x for i, x in enumerate(fields[4:], 4))


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", action="store_true", help="also time each candidate kernel config")
    ap.add_argument("--json", default=None, help="write the records to this path")
    ap.add_argument("--oracle-record", default=None,
                    help="also write a kernel-oracle result record (reports.schema) to this file or directory")
    ap.add_argument("--shapes", default=None, help="comma-separated subset of shape names")
    ap.add_argument("--configs", nargs="+", type=_config_arg, default=None, metavar="M,N,WARPS,STAGES[,TMA,MAXNREG]",
                    help="--sweep only these configs (KernelConfig fields, comma-separated integers)")
    ap.add_argument("--split-head-dim", choices=list(SPLIT_HEAD_DIM), default="auto",
                    help="cut a head dim that is not a power of two into two tiles: auto (with descriptor loads), "
                         "on, off (VisionOptions.split_head_dim)")
    ap.add_argument("--no-fold-scale", action="store_true",
                    help="scale the logits before the row max (VisionOptions.fold_scale=False)")
    ap.add_argument("--no-direct-launch", action="store_true",
                    help="warm calls through Triton's JIT launch (VisionOptions.direct_launch=False)")
    ap.add_argument("--host", action="store_true",
                    help="only the host cost per call (us) on a tiny batch: warm call, planned launch, bare launch")
    return ap


def vision_options(args: argparse.Namespace):
    """The :class:`~kernels.options.VisionOptions` of the parsed flags."""
    from kernel_oracle.kernels.options import VisionOptions

    return VisionOptions(split_head_dim=SPLIT_HEAD_DIM[args.split_head_dim], fold_scale=not args.no_fold_scale,
                         direct_launch=not args.no_direct_launch)


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    vision = vision_options(args)
    if not torch.cuda.is_available():
        print("kernel_oracle.benchmarks.bench_vision needs a CUDA device (the interpreter is far too slow to time)", file=sys.stderr)
        return 2
    import triton

    from kernel_oracle.kernels.options import options

    torch.manual_seed(0)
    if args.host:
        from kernel_oracle.kernels.vision import direct_launch_info

        with options(vision=vision):
            rows = host_cost()
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                           "triton": triton.__version__, "options": dataclasses.asdict(vision), "host": rows,
                           "direct_launches": direct_launch_info()}, f, indent=1)
        print("| call (4 x 64 tokens, H=2, D=64, bf16) | host us per call | do_bench us |\n|---|---:|---:|")
        for r in rows:
            print(f"| {r['call']} | {r['host_us']} | {r['do_bench_us']} |")
        print("direct launches:", direct_launch_info())
        return 0
    wanted = None if args.shapes is None else set(args.shapes.split(","))
    configs = SWEEP if args.configs is None else tuple(args.configs)
    with options(vision=vision):
        records = [bench_shape(*s, sweep=args.sweep, configs=configs) for s in SHAPES
                   if wanted is None or s[0] in wanted]
    meta = {"version": 1, "utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": (git_commit() or "unknown")[:12], "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "triton": triton.__version__, "flashinfer_cudnn": _engine_status(), "options": dataclasses.asdict(vision),
            "command": "python -m kernel_oracle.benchmarks.bench_vision" + " ".join([""] + list(argv or sys.argv[1:]))}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "records": records}, f, indent=1)
    if args.oracle_record:
        from kernel_oracle.reports.bench_convert import save_bench_record

        print("result record:", save_bench_record({"meta": meta, "records": records}, args.oracle_record,
                                                  "bench_vision"))
    print(json.dumps(meta))
    print(render(records))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
