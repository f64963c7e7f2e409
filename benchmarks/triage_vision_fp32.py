"""Triage of fp32 vision mismatches found by a GPU soak: re-run each saved problem, judge it under the
baseline sets, and count the rule's misses on fresh large-logit fp32 draws.

python -m kernel_oracle.benchmarks.triage_vision_fp32 [SUMMARY.json ...] [--draws N] [--target triton]

For every example problem in the summaries' fp32 vision findings, and for ``--draws`` fresh fp32
problems with large logits, it prints the worst element's ratio to its allowance with the
flash-attention-form alternates (``reference.vision.FA_FORM_ALTERNATES``) off and on.  A ratio
above 1 is a mismatch.  A target whose misses vanish with the FA form computes what an fp32
flash-attention kernel computes; one whose misses stay is worth a closer look.
"""

from __future__ import annotations

import argparse
import json
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


def _ratio(target, problem, device, fa: bool) -> tuple[bool, str]:
    import kernel_oracle.reference.vision as V
    from kernel_oracle.harness.check import Case, check_case

    V.FA_FORM_ALTERNATES = fa
    try:
        verdict = check_case(target, Case(problem), device)
    finally:
        V.FA_FORM_ALTERNATES = True
    line = next((ln for ln in (verdict.message or "").splitlines() if ln.startswith("Worst element")), "")
    return verdict.ok, line


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("summaries", nargs="*", default=[str(DEFAULT)])
    ap.add_argument("--draws", type=int, default=300, help="fresh large-logit fp32 problems")
    ap.add_argument("--target", default="triton")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args(argv)
    from kernel_oracle.fuzz.targets import resolve_target
    from kernel_oracle.harness.problems import VisionProblem

    target = resolve_target(args.target, args.device)
    saved = _problems(args.summaries)
    print(f"# {args.target} on {args.device}: {len(saved)} saved problems, {args.draws} fresh draws")
    fails = {False: 0, True: 0}
    for p in saved:
        row = []
        for fa in (False, True):
            ok, line = _ratio(target, p, args.device, fa)
            fails[fa] += not ok
            row.append(f"FA={'on ' if fa else 'off'}: {'ok  ' if ok else 'FAIL'} {line}")
        print(f"D={p.D} lengths={p.lengths} logit_scale={p.logit_scale} seed={p.seed}\n    " + "\n    ".join(row))
    print(f"saved problems failing: FA off {fails[False]}, FA on {fails[True]} (of {len(saved)})")
    rng = random.Random(11)
    fresh = {False: [], True: []}
    for i in range(args.draws):
        lengths = tuple(rng.choice((1, 14, 15, 17, 33, 44, 49, 60, 63, 64, 65, 127, 129)) for _ in range(rng.randint(1, 4)))
        p = VisionProblem(lengths=lengths, H=rng.choice((1, 2)), D=rng.choice((64, 72, 80, 128)), dtype="float32",
                          logit_scale=rng.choice((8.0, 30.0)), seed=rng.randrange(2**16),
                          path=rng.choice(("kwargs", "metadata")))
        for fa in (False, True):
            ok, line = _ratio(target, p, args.device, fa)
            if not ok:
                fresh[fa].append((p.D, p.lengths, p.logit_scale, p.seed, line))
    for fa in (False, True):
        print(f"fresh draws failing with FA {'on' if fa else 'off'}: {len(fresh[fa])} of {args.draws}")
        for row in fresh[fa][:8]:
            print("   ", row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
