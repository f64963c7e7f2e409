"""``kernel-oracle bench``: how fast the oracle itself is (issue 12.4), not the kernels.

Note [Benchmarking the oracle]
------------------------------
Two numbers decide whether the oracle is usable on a machine, and both are measured here, in one
run, with the command and the environment in the record:

* **campaign throughput**: cases per second of a time-boxed campaign, per target and op family, at
  small shapes (``--limits tiny`` by default; ``--limits gpu`` for the GPU campaigns' own mix).  One
  worker per device serves every campaign (as in a job); it is started, and each target warmed up by
  a short untimed campaign (``--warmup-cases``: imports, CUDA context, Triton compilations), before
  the clock starts, so the figure is the steady state a long job sees.  Start-up and warm-up seconds
  are recorded beside it.
* **the main job's fuzz cases**: ``kernel-oracle run --device D --time-budget T`` in a fresh process,
  as a user runs it; the record keeps its fuzz-case count (the campaigns' cases, not the selfcheck's),
  the total, the exit status, and every campaign that was killed or failed (``--main-budget 0`` skips it).

The record is a ``harness.schema`` result of kind ``bench``: one benchmark row per target x family
(``median_us`` = microseconds per case, so ``kernel-oracle compare`` gates a slowdown of the oracle
like one of a kernel), the campaigns' groups and findings, and ``summary.oracle_bench`` with the
figures above.  Exit 0 when everything ran, 1 when a campaign or the main job failed, 2 on usage errors.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from kernel_oracle.cli_errors import one_line_errors

__all__ = ["add_arguments", "main", "main_job_counts", "run_bench"]

DEFAULT_TARGETS = ("triton", "reference")
FAMILIES = ("lora", "vision")


# seconds the worker's warm-up may take per target on CUDA (Note [Variant warm-up] in harness.warmup: a cold
# cache took 85 s on the H200 for 624 LoRA variants; the set is 1,248 now)
DEFAULT_WARM_UP_S = 300.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    one_line_errors(parser)  # a usage error: one line, exit 2 (SPEC.md)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="auto: the GPU if torch sees one, else the CPU (Triton interpreter)")
    parser.add_argument("--targets", default=",".join(DEFAULT_TARGETS), metavar="LIST",
                        help=f"comma-separated target specs (default {','.join(DEFAULT_TARGETS)})")
    parser.add_argument("--families", default=",".join(FAMILIES), metavar="LIST",
                        help="comma-separated op families (default lora,vision)")
    parser.add_argument("--seconds", type=float, default=20.0, metavar="S",
                        help="timed seconds of each target x family campaign (default 20)")
    parser.add_argument("--limits", default="tiny", metavar="PRESET",
                        help="size preset of the timed campaigns (fuzz.strategies.LIMITS; default tiny: small shapes)")
    parser.add_argument("--warmup-cases", type=int, default=10, metavar="N",
                        help="cases of the untimed warm-up campaign per target x family (default 10; 0: none)")
    parser.add_argument("--warm-up-s", type=float, default=None, metavar="S",
                        help="seconds the worker may spend on its untimed warm-up per target before the first "
                             "campaign (harness.warmup: our LoRA kernels' variants compiled in parallel on CUDA); "
                             "default 300 on CUDA, none on the CPU; 0: none")
    parser.add_argument("--main-budget", type=float, default=120.0, metavar="SECONDS",
                        help="--time-budget of the measured main job (default 120; 0: do not run it)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="reports/out/oracle-bench.json", metavar="FILE",
                        help="where the record goes (default reports/out/oracle-bench.json)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")


def _usage(text: str) -> int:
    print(f"kernel-oracle bench: error: {text}", file=sys.stderr)
    return 2


def _list(value: str, name: str, allowed: Optional[tuple] = None) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise ValueError(f"{name} {value!r} names nothing; pass a comma-separated list")
    if allowed is not None:
        bad = [v for v in items if v not in allowed]
        if bad:
            raise ValueError(f"{name} {value!r}: {bad} unknown; the only valid values are {list(allowed)}")
    return items


def _seconds(value: float, name: str, *, zero_ok: bool) -> float:
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        raise ValueError(f"{name} {value:g}: pass a {'non-negative' if zero_ok else 'positive'}, finite number of seconds")
    return float(value)


def main_job_counts(record: dict) -> dict:
    """Fuzz cases, all cases and failed campaigns of a main-job record (``summary.campaigns`` rows)."""
    rows = record.get("summary", {}).get("campaigns") or []
    fuzz = sum(int(r.get("cases") or 0) for r in rows)
    total = sum(int(g.get("cases") or 0) for g in record.get("groups", []))
    failed = [f"{r.get('target')} x {r.get('family')}: {r['problem']}" for r in rows if r.get("problem")]
    return {"fuzz_cases": fuzz, "cases": total, "campaigns": len(rows), "failed_campaigns": failed,
            "failed_parts": list(record.get("summary", {}).get("failed_parts") or [])}


def _run_main_job(device: str, budget: float, seed: int, log) -> dict:
    """``kernel-oracle run`` in a fresh process (the user's view: imports and start-up included)."""
    with tempfile.TemporaryDirectory(prefix="kernel-oracle-bench-") as tmp:
        cmd = [sys.executable, "-m", "kernel_oracle", "run", "--device", device, "--time-budget", f"{budget:g}",
               "--seed", str(seed), "--out", tmp, "--quiet"]
        log(f"main job: {' '.join(cmd[1:])}")
        t0 = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=budget * 3 + 300)
        wall = time.monotonic() - t0
        latest = Path(tmp) / "latest.json"
        out = {"command": f"kernel-oracle run --device {device} --time-budget {budget:g} --seed {seed}",
               "time_budget_s": budget, "exit_code": proc.returncode, "wall_s": round(wall, 1)}
        if latest.is_file():
            rec = json.loads(latest.read_text())
            out.update(main_job_counts(rec))
            out["fuzz_cases_per_s"] = round(out["fuzz_cases"] / wall, 2) if wall > 0 else None
        else:
            out["error"] = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no record written"]
        return out


def run_bench(*, device: str, targets: list, families: list, seconds: float, limits: str, warmup_cases: int,
              main_budget: float, seed: int, quiet: bool = False, warm_up_s: Optional[float] = None) -> dict:
    """Measure (Note [Benchmarking the oracle]) and return the ``bench`` record (not saved)."""
    from kernel_oracle.fuzz.campaign import CampaignConfig, CampaignError, run_campaign
    from kernel_oracle.fuzz.worker import Worker, WorkerError
    from kernel_oracle.harness.schema import add_benchmark, add_note, merge, new_record

    t_start = time.monotonic()

    def log(text: str) -> None:
        if not quiet:
            print(f"[{time.monotonic() - t_start:6.1f}s] {text}", file=sys.stderr, flush=True)

    record = new_record("bench", seeds={"seed": seed}, device=device)
    rows: list = []
    failed: list = []
    worker = Worker(device)
    try:
        t0 = time.monotonic()
        try:
            worker.start()
        except WorkerError as exc:
            failed.append(f"worker: {exc}")
        startup = round(time.monotonic() - t0, 2)
        log(f"{device} worker started in {startup:.1f}s")
        with tempfile.TemporaryDirectory(prefix="kernel-oracle-bench-") as tmp:
            for target in targets:
                for fam in families:
                    if failed and failed[0].startswith("worker:"):
                        break
                    row = {"target": target, "family": fam, "limits": limits}
                    try:
                        warm_s = 0.0
                        if warmup_cases:
                            t0 = time.monotonic()
                            warm_rec = run_campaign(CampaignConfig(
                                target=target, op=fam, budget=warmup_cases, seed=seed + 1, device=device,
                                out_dir=Path(tmp) / f"warm-{len(rows)}", progress=False, limits=limits,
                                warm_up_s=warm_up_s or None), worker=worker)
                            warm_s = time.monotonic() - t0
                            row["worker_warm_up"] = warm_rec.get("campaign", {}).get("warm_up")
                        rec = run_campaign(CampaignConfig(
                            target=target, op=fam, time_s=seconds, seed=seed, device=device,
                            out_dir=Path(tmp) / f"timed-{len(rows)}", progress=False, limits=limits), worker=worker)
                    except CampaignError as exc:
                        failed.append(f"{target} x {fam}: {exc}")
                        log(f"{target} x {fam}: {exc}")
                        continue
                    camp = rec.get("campaign", {})
                    executed, elapsed = int(camp.get("executed") or 0), float(camp.get("elapsed_s") or 0.0)
                    available = any(t.get("available") for t in rec.get("targets", []))
                    row.update({"available": available, "cases": executed, "seconds": round(elapsed, 2),
                                "cases_per_s": round(executed / elapsed, 2) if elapsed > 0 else None,
                                "warmup_s": round(warm_s, 2), "findings": len(rec.get("findings", [])),
                                "ops": camp.get("ops"), "dtypes": camp.get("dtypes")})
                    rows.append(row)
                    merge(record, rec, seeds_key=f"bench:{target}:{fam}")
                    if not available:
                        add_note(record, f"{target} x {fam}: target unavailable; no throughput measured")
                    elif row["cases_per_s"] is not None:
                        add_benchmark(record, {"target": target, "op": fam, "shape": f"campaign/{limits}",
                                               "dtype": "mixed", "median_us": round(1e6 / row["cases_per_s"], 1),
                                               "cases_per_s": row["cases_per_s"], "cases": executed})
                    ww = row.get("worker_warm_up") or {}
                    log(f"{target} x {fam}: {executed} cases in {elapsed:.1f}s = {row['cases_per_s']} cases/s "
                        f"(warm-up {warm_s:.1f}s" + (f"; worker warm-up {ww.get('cases')}/{ww.get('of')} cases in "
                                                     f"{ww.get('seconds')}s, parallel {ww.get('parallel')}" if ww else "")
                        + ")")
    finally:
        worker.close()
    main_job = None
    if main_budget > 0:
        main_job = _run_main_job(device, main_budget, seed, log)
        log(f"main job: {main_job.get('fuzz_cases')} fuzz cases of {main_job.get('cases')} in "
            f"{main_job['wall_s']}s, exit {main_job['exit_code']}")
        if main_job.get("failed_campaigns") or "error" in main_job:
            failed.append(f"main job: {main_job.get('failed_campaigns') or main_job.get('error')}")
    record["summary"]["oracle_bench"] = {"device": device, "worker_startup_s": startup, "limits": limits,
                                         "seconds_per_campaign": seconds, "warmup_cases": warmup_cases,
                                         "campaigns": rows, "main_job": main_job, "failed": failed,
                                         "duration_s": round(time.monotonic() - t_start, 1)}
    for text in failed:
        add_note(record, f"bench: {text}")
    return record


def main(args: argparse.Namespace) -> int:
    from kernel_oracle.fuzz.strategies import LIMITS
    from kernel_oracle.harness.device import cuda_available
    from kernel_oracle.harness.schema import save

    try:
        device = args.device if args.device != "auto" else ("cuda" if cuda_available() else "cpu")
        if device == "cuda" and not cuda_available():
            raise ValueError("--device cuda: torch sees no CUDA device; pass --device cpu or --device auto")
        targets = _list(args.targets, "--targets")
        families = _list(args.families, "--families", FAMILIES)
        seconds = _seconds(args.seconds, "--seconds", zero_ok=False)
        main_budget = _seconds(args.main_budget, "--main-budget", zero_ok=True)
        if args.limits not in LIMITS:
            raise ValueError(f"--limits {args.limits!r} is unknown; the only valid values are {sorted(LIMITS)}")
        warm_up_s = (_seconds(args.warm_up_s, "--warm-up-s", zero_ok=True) if args.warm_up_s is not None
                     else DEFAULT_WARM_UP_S if device == "cuda" else 0.0)
        if args.warmup_cases < 0:
            raise ValueError(f"--warmup-cases {args.warmup_cases}: pass a non-negative number of cases")
        out = Path(args.out)
        if out.is_dir():
            raise ValueError(f"--out {out}: is a directory; pass a file name")
    except ValueError as exc:
        return _usage(str(exc))
    record = run_bench(device=device, targets=targets, families=families, seconds=seconds, limits=args.limits,
                       warmup_cases=args.warmup_cases, main_budget=main_budget, seed=args.seed, quiet=args.quiet,
                       warm_up_s=warm_up_s)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        save(record, out, overwrite=True)
    except OSError as exc:
        return _usage(f"--out {out}: cannot write there ({exc.strerror or exc})")
    bench = record["summary"]["oracle_bench"]
    for row in bench["campaigns"]:
        print(f"{row['target']} x {row['family']}: {row['cases_per_s']} cases/s ({row['cases']} cases, "
              f"{row['seconds']}s, limits {row['limits']})")
    if bench["main_job"]:
        mj = bench["main_job"]
        print(f"main job ({mj['command']}): {mj.get('fuzz_cases')} fuzz cases, {mj.get('cases')} cases, "
              f"exit {mj['exit_code']}")
    print(f"record: {out}")
    return 1 if bench["failed"] else 0
