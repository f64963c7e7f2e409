"""Print the tile coverage a campaign's draws reach, without running a kernel (Note [Coverage from the draws] in
fuzz/coverage.py).

python tools/tile_coverage.py --targets triton,sglang-csgmv==0.5.23 --limits gpu --cases 2000 [--seed 0]
                              [--gpu-name "NVIDIA H200"] [--minimum 0.2]

For each target and each family whose blocks it describes: per op and tiled dimension, the share of the cases
with one block, several blocks, a ragged tail and a split reduction, at the blocks the code uses for each case.
``--limits gpu`` (or ``full``) classifies at the blocks the target has on a Hopper GPU named ``--gpu-name``
(our compiled configs; a release's csgmv tables for that name); ``tiny`` / ``small`` at the CPU's.  Exit 1
when a multi-block class of a row is below ``--minimum`` (a class the code cannot have aside).
"""

from __future__ import annotations

import argparse
import sys

from kernel_oracle.fuzz.coverage import GPU_NAME, draw_coverage, on_gpu
from kernel_oracle.fuzz.limits import LIMITS
from kernel_oracle.fuzz.targets import resolve_target
from kernel_oracle.harness.targets import parse_target_list
from kernel_oracle.harness.family import family_names
from kernel_oracle.harness.tile_coverage import CLASSES, CoverageTable, shortfalls


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="triton")
    parser.add_argument("--limits", choices=sorted(LIMITS), default="gpu")
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gpu-name", default=GPU_NAME)
    parser.add_argument("--minimum", type=float, default=0.2)
    args = parser.parse_args(argv)
    table = CoverageTable()
    for spec in parse_target_list(args.targets):
        target = resolve_target(spec, "cpu")
        if not target.available:
            print(f"{spec}: unavailable ({target.reason})")
            continue
        info = target.to_record()
        if args.limits in ("gpu", "full"):
            info = on_gpu(info, args.gpu_name)
        for family in family_names():
            if target.ops(family):
                draw_coverage(info, family, limits=args.limits, cases=args.cases, seed=args.seed, table=table)
    record = table.to_record()
    head = f"{'target':32} {'op':14} {'dimension':12} {'blocks':14} {'cases':>6} "
    print(head + " ".join(f"{c:>8}" for c in CLASSES))
    for r in record["rows"]:
        shares = ["–" if r[c] is None else f"{100 * r[c] / r['cases']:.0f}%" for c in CLASSES]
        print(f"{r['target']:32} {r['op']:14} {r['dim']:12} {str(r['blocks']):14} {r['cases']:>6} "
              + " ".join(f"{s:>8}" for s in shares))
    for target, families in record["unknown"].items():
        for family, why in families.items():
            print(f"{target}, {family}: no rows ({why})")
    low = shortfalls(table, args.minimum)
    for target, op, dim, cls, share in low:
        print(f"below {args.minimum:.0%}: {target} {op} {dim} {cls} {share:.0%}")
    return 1 if low else 0


if __name__ == "__main__":
    sys.exit(main())
