"""``kernel-oracle fuzz``: run (or resume) a fuzzing campaign against one target.

Exit codes: 0 no findings, 1 findings, 2 usage error (or a target that cannot run here, with the
reason).  The library API is :func:`fuzz.campaign.run_campaign`; this module only parses and prints.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["add_arguments", "main"]


def _device_default() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from kernel_oracle.fuzz.campaign import FAMILY_OF

    parser.add_argument("--target", required=True,
                        help="reference, triton, sglang, torch-varlen, flashinfer-cudnn, mutant:NAME or "
                             "package.module[:attr]")
    parser.add_argument("--op", required=True, choices=sorted(FAMILY_OF), help="lora, vision or one LoRA op")
    amount = parser.add_mutually_exclusive_group()
    amount.add_argument("--budget", type=int, default=None, metavar="N",
                        help="cases to execute, shrinking included (default 100)")
    amount.add_argument("--time", dest="time_s", type=float, default=None, metavar="S", help="seconds to run")
    parser.add_argument("--seed", type=int, default=0, metavar="K")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="default: cuda when a GPU is visible, else cpu (Triton interpreter)")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="output directory; rerunning with the same DIR resumes the campaign")
    parser.add_argument("--upstream-contracts-only", action="store_true",
                        help="generate no malformed metadata (for targets without strict validation, e.g. sglang)")
    parser.add_argument("--limits", choices=("tiny", "small", "full"), default=None,
                        help="problem sizes (default: tiny for interpreted Triton, small for the CPU reference, "
                             "full on a GPU)")
    parser.add_argument("--no-isolate", dest="isolate", action="store_false",
                        help="run the target in this process (faster start; a crash ends the campaign)")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")


def main(args: argparse.Namespace) -> int:
    device = args.device or _device_default()
    if device == "cpu":
        import os

        import torch

        if not torch.cuda.is_available():
            os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel import
    from kernel_oracle.fuzz.campaign import CampaignError, run_campaign

    try:
        record = run_campaign(target=args.target, op=args.op, budget=args.budget, time_s=args.time_s, seed=args.seed,
                              device=device, out_dir=args.out, upstream_contracts_only=args.upstream_contracts_only,
                              progress=args.progress, limits=args.limits, isolate=args.isolate)
    except CampaignError as exc:
        print(f"kernel-oracle fuzz: error: {exc}", file=sys.stderr)
        return 2
    t = record["targets"][0] if record["targets"] else {}
    if not t.get("available", True) or record["campaign"]["executed"] == 0 and record.get("notes"):
        for note in record.get("notes", []):
            print(f"kernel-oracle fuzz: {note}", file=sys.stderr)
        if not t.get("available", True):
            return 2
    camp = record["campaign"]
    print(f"{args.target} {args.op}: {camp['executed']} cases in {camp['elapsed_s']:.1f}s "
          f"(precision {t.get('precision')}; dtypes {', '.join(camp['dtypes'])})")
    for note in record.get("notes", []):
        print(f"  note: {note}")
    for g in record["groups"]:
        bad = {k: v for k, v in g["findings"].items() if v}
        print(f"  {g['op']:>13} {g['dtype']:>9} {g['shape_class']:>13}: {g['passes']}/{g['cases']} passed"
              + (f", findings {bad}" if bad else "")
              + (f", max error ratio {g['error_ratio']['max']:.3g}" if g["error_ratio"]["max"] is not None else ""))
    for f in record["findings"]:
        print(f"FINDING {f['id']} [{f['kind']}] {f['op']} {f['dtype']} {f['shape_class']}: "
              f"{f['message'].splitlines()[0] if f['message'] else ''}\n  repro: {f['repro']}")
    print(f"summary: {args.out}/summary.json; findings: {args.out}/findings.jsonl")
    return 1 if record["findings"] else 0
