"""Triage of fp32 vision mismatches found by a GPU soak: re-run each saved problem, judge it under the
baseline sets, and count the rule's misses on fresh large-logit fp32 draws.

python -m kernel_oracle.benchmarks.triage_vision_fp32 [SUMMARY.json ...] [--draws N] [--target triton]

For every example problem in the summaries' fp32 vision findings, and for ``--draws`` fresh fp32
problems with large logits, it prints the worst element's ratio to its allowance for each arithmetic
``--exact`` level of our kernel (``kernels.vision._kernel.exact_level``: 0 = fp32 flash-attention
arithmetic, 1 = softmax in float64, 2 = logits too; Note [Exact fp32]).  A ratio above 1 is a
mismatch.  The level whose misses vanish names the error source.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
from pathlib import Path

import torch

DEFAULT = Path(__file__).resolve().parents[1] / "docs/benchmarks/data/soak_h200_2026-11-30/triton-vision.summary.json"


def _problems(paths) -> list:
    from kernel_oracle.harness.problems import problem_from_dict

    out = []
    for path in paths:
        for f in json.loads(Path(path).read_text()).get("findings", []):
            if f.get("op") != "vision" or f.get("dtype") != "float32" or f.get("kind") != "mismatch":
                continue
            for ex in [{"problem": f["problem"]}] + f.get("examples", []):
                d = ex["problem"]["problem"] if "problem" in ex["problem"] else ex["problem"]
                out.append(problem_from_dict(d))
    return out


@contextlib.contextmanager
def _exact(level: int):
    """KERNEL_ORACLE_VISION_FP32_EXACT=level inside the block; the launch cache cleared on entry and
    exit (the switch is read when a launch is planned, Note [Launch cache])."""
    from kernel_oracle.kernels.vision import clear_launch_cache

    os.environ["KERNEL_ORACLE_VISION_FP32_EXACT"] = str(level)
    clear_launch_cache()
    try:
        yield
    finally:
        os.environ.pop("KERNEL_ORACLE_VISION_FP32_EXACT", None)
        clear_launch_cache()


def _ratio(target, problem, device, level: int) -> tuple[bool, str]:
    from kernel_oracle.harness.check import Case, check_case

    try:
        with _exact(level):
            verdict = check_case(target, Case(problem), device)
    except Exception as exc:  # a level that does not compile on this Triton: say so, go on
        return False, f"raised {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    line = next((ln for ln in (verdict.message or "").splitlines() if ln.startswith("Worst element")), "")
    return verdict.ok, line


# (sequences, tokens each, heads, head dim): an fp32 vision tower's sizes
TIMED_SHAPES = ((4, 1024, 16, 80), (2, 4096, 16, 128), (64, 256, 16, 64))


def _time_levels(levels, device) -> None:
    """Median time of our kernel on fp32 random data at each arithmetic level (exact products)."""
    import triton.testing

    from kernel_oracle.benchmarks.bench_vision import _inputs
    from kernel_oracle.kernels.vision import flashinfer_cudnn_attention, prepare_flashinfer_cudnn_metadata

    for b, n, h, d in TIMED_SHAPES:
        q, k, v, cu = _inputs([n] * b, h, d, torch.float32, device)
        md = prepare_flashinfer_cudnn_metadata(cu, device, elem_per_token=h * d)
        flops = 4 * b * n * n * h * d
        row = []
        for lv in levels:
            try:
                with _exact(lv):
                    def call():
                        return flashinfer_cudnn_attention(q, k, v, None, None, None, forward_metadata=md)
                    ms = triton.testing.do_bench(call, warmup=50, rep=200)
                row.append(f"exact={lv} {ms * 1e3:9.1f} us {flops / ms / 1e9:6.1f} TFLOP/s")
            except Exception as exc:
                row.append(f"exact={lv} raised {type(exc).__name__}")
        print(f"fp32 {b}x{n} H{h} d{d}: " + " | ".join(row))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("summaries", nargs="*", default=[str(DEFAULT)])
    ap.add_argument("--draws", type=int, default=300, help="fresh large-logit fp32 problems")
    ap.add_argument("--target", default="triton")
    ap.add_argument("--exact", type=int, nargs="+", default=[0, 1, 2], help="kernel arithmetic levels to compare")
    ap.add_argument("--time", action="store_true", help="also time each level on fp32 shapes (do_bench median)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args(argv)
    from kernel_oracle.fuzz.targets import resolve_target
    from kernel_oracle.harness.problems import VisionProblem

    target = resolve_target(args.target, args.device)
    if args.time:
        _time_levels(args.exact, args.device)
    saved = _problems(args.summaries)
    print(f"# {args.target} on {args.device}: {len(saved)} saved problems, {args.draws} fresh draws")
    levels = args.exact
    fails = {lv: 0 for lv in levels}
    for p in saved:
        row = []
        for lv in levels:
            ok, line = _ratio(target, p, args.device, lv)
            fails[lv] += not ok
            row.append(f"exact={lv}: {'ok  ' if ok else 'FAIL'} {line}")
        print(f"D={p.D} lengths={p.lengths} logit_scale={p.logit_scale} seed={p.seed}\n    " + "\n    ".join(row))
    print("saved problems failing: " + ", ".join(f"exact={lv} {fails[lv]}" for lv in levels) + f" (of {len(saved)})")
    rng = random.Random(11)
    fresh = {lv: [] for lv in levels}
    for i in range(args.draws):
        lengths = tuple(rng.choice((1, 14, 15, 17, 33, 44, 49, 60, 63, 64, 65, 127, 129)) for _ in range(rng.randint(1, 4)))
        p = VisionProblem(lengths=lengths, H=rng.choice((1, 2)), D=rng.choice((64, 72, 80, 128)), dtype="float32",
                          logit_scale=rng.choice((8.0, 30.0)), seed=rng.randrange(2**16),
                          path=rng.choice(("kwargs", "metadata")))
        for lv in levels:
            ok, line = _ratio(target, p, args.device, lv)
            if not ok:
                fresh[lv].append((p.D, p.lengths, p.logit_scale, p.seed, line))
    for lv in levels:
        print(f"fresh draws failing with exact={lv}: {len(fresh[lv])} of {args.draws}")
        for row in fresh[lv][:8]:
            print("   ", row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
