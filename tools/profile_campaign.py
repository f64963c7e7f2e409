"""Where a campaign's time goes: one in-process campaign under cProfile, the top functions printed.

python tools/profile_campaign.py --targets triton --op lora --device cuda --time 15

The campaign runs in this process (``isolate=False``; the process is configured for the device
first), at ``--limits`` (default ``tiny``, the bench's small shapes), after ``--cases``
untimed cases, so the profile shows the steady state: case generation (Hypothesis), data
(``materialize``), the target, the oracle and the comparison, and Triton's own launch and cache
paths.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import tempfile


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default="triton", help="one target spec")
    ap.add_argument("--op", default="lora")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--time", type=float, default=15.0)
    ap.add_argument("--limits", default="tiny")
    ap.add_argument("--cases", type=int, default=30, help="untimed warm-up cases")
    ap.add_argument("--top", type=int, default=45)
    args = ap.parse_args(argv)
    from kernel_oracle.harness.device import configure_process

    configure_process(args.device)
    from kernel_oracle.fuzz.campaign import CampaignConfig, run_campaign

    common = dict(target=args.targets, op=args.op, device=args.device, progress=False, limits=args.limits,
                  isolate=False)
    run_campaign(CampaignConfig(budget=args.cases, out_dir=tempfile.mkdtemp(), seed=1, **common))
    prof = cProfile.Profile()
    prof.enable()
    rec = run_campaign(CampaignConfig(time_s=args.time, out_dir=tempfile.mkdtemp(), seed=2, **common))
    prof.disable()
    c = rec["campaign"]
    print(f"{args.targets} x {args.op} on {args.device}: {c['executed']} cases in {c['elapsed_s']} s "
          f"= {c['executed'] / max(c['elapsed_s'], 1e-9):.1f} cases/s")
    for key in ("cumulative", "tottime"):
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats(key).print_stats(args.top)
        text = out.getvalue()
        print(text[text.index("ncalls"):] if "ncalls" in text else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
