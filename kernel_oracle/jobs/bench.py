"""How fast the oracle itself is, not the kernels (``kernel-oracle bench``).

Note [Benchmarking the oracle]
------------------------------
Two numbers decide whether the oracle is usable on a machine, and both are measured here, in one
run, with the command and the environment in the record:

* **campaign throughput**: cases per second of a time-boxed campaign, per target and op family, at
  small shapes (``--limits tiny`` by default; ``--limits gpu`` for the GPU campaigns' own mix).  One
  worker per device serves every campaign (as in a job); it is started, and each target warmed up by
  a short untimed campaign (``--cases``: imports, CUDA context, Triton compilations), before
  the clock starts, so the figure is the steady state a long job sees.  Start-up and warm-up seconds
  are recorded beside it.
* **the main job's fuzz cases**: ``kernel-oracle run --device D --time T`` in a fresh process, as a
  user runs it; the record keeps its fuzz-case count (the campaigns' cases, not the selfcheck's), the
  total, the exit status, and every campaign that was killed or failed (``--main-time 0`` skips it).

The record is a ``harness.schema`` result of kind ``bench``: one benchmark row per target x family
(``median_us`` = microseconds per case, so ``kernel-oracle compare`` gates a slowdown of the oracle
like one of a kernel), the campaigns' groups and findings, and ``summary.oracle_bench`` with the
figures above.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

__all__ = ["DEFAULT_TARGETS", "DEFAULT_WARM_UP_S", "main_job_counts", "run_bench"]

DEFAULT_TARGETS = ("triton", "reference")
# seconds the worker's warm-up may take per target on CUDA (Note [Variant warm-up] in harness.warmup)
DEFAULT_WARM_UP_S = 300.0


def main_job_counts(record: dict) -> dict:
    """Fuzz cases, all cases and failed campaigns of a main-job record (``summary.campaigns`` rows)."""
    rows = record.get("summary", {}).get("campaigns") or []
    fuzz = sum(int(r.get("cases") or 0) for r in rows)
    total = sum(int(g.get("cases") or 0) for g in record.get("groups", []))
    failed = [f"{r.get('target')} x {r.get('family')}: {r['problem']}" for r in rows if r.get("problem")]
    return {"fuzz_cases": fuzz, "cases": total, "campaigns": len(rows), "failed_campaigns": failed,
            "failed_parts": list(record.get("summary", {}).get("failed_parts") or [])}


def _run_main_job(device: str, time_s: float, seed: int, log) -> dict:
    """``kernel-oracle run`` in a fresh process (the user's view: imports and start-up included)."""
    with tempfile.TemporaryDirectory(prefix="kernel-oracle-bench-") as tmp:
        cmd = [sys.executable, "-m", "kernel_oracle", "run", "--device", device, "--time", f"{time_s:g}",
               "--seed", str(seed), "--out", tmp, "--quiet"]
        log(f"main job: {' '.join(cmd[1:])}")
        t0 = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=time_s * 3 + 300)
        wall = time.monotonic() - t0
        latest = Path(tmp) / "latest.json"
        out = {"command": f"kernel-oracle run --device {device} --time {time_s:g} --seed {seed}",
               "time_s": time_s, "exit_code": proc.returncode, "wall_s": round(wall, 1)}
        if latest.is_file():
            rec = json.loads(latest.read_text())
            out.update(main_job_counts(rec))
            out["fuzz_cases_per_s"] = round(out["fuzz_cases"] / wall, 2) if wall > 0 else None
        else:
            out["error"] = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no record written"]
        return out


def _measure(worker, target, fam: str, tmp: Path, index: int, *, device: str, time_s: float, limits: str,
             warmup_cases: int, seed: int, warm_up_s: Optional[float]) -> tuple[dict, dict]:
    """One target x family: the untimed warm-up campaign, then the timed one; ``(row, record)``.
    Raises :class:`~kernel_oracle.fuzz.campaign_config.CampaignError` when a campaign cannot run."""
    from kernel_oracle.fuzz.campaign import CampaignConfig, run_campaign

    row = {"target": str(target), "family": fam, "limits": limits}
    warm_s = 0.0
    if warmup_cases:
        t0 = time.monotonic()
        warm_rec = run_campaign(CampaignConfig(target=target, op=fam, budget=warmup_cases, seed=seed + 1, device=device,
                                               out_dir=tmp / f"warm-{index}", progress=False, limits=limits,
                                               warm_up_s=warm_up_s or None), worker=worker)
        warm_s = time.monotonic() - t0
        row["worker_warm_up"] = warm_rec.get("campaign", {}).get("warm_up")
    rec = run_campaign(CampaignConfig(target=target, op=fam, time_s=time_s, seed=seed, device=device,
                                      out_dir=tmp / f"timed-{index}", progress=False, limits=limits), worker=worker)
    camp = rec.get("campaign", {})
    executed, elapsed = int(camp.get("executed") or 0), float(camp.get("elapsed_s") or 0.0)
    row.update({"available": any(t.get("available") for t in rec.get("targets", [])), "cases": executed,
                "seconds": round(elapsed, 2), "cases_per_s": round(executed / elapsed, 2) if elapsed > 0 else None,
                "warmup_s": round(warm_s, 2), "findings": len(rec.get("findings", [])), "ops": camp.get("ops"),
                "dtypes": camp.get("dtypes")})
    return row, rec


def _add_row(record: dict, row: dict, rec: dict, limits: str, log) -> None:
    """Fold one measured target x family into the bench record (its benchmark row, groups, findings)."""
    from kernel_oracle.harness.schema import add_benchmark, add_note, merge

    target, fam = row["target"], row["family"]
    merge(record, rec, seeds_key=f"bench:{target}:{fam}")
    if not row["available"]:
        add_note(record, f"{target} x {fam}: target unavailable; no throughput measured")
    elif row["cases_per_s"] is not None:
        add_benchmark(record, {"target": target, "op": fam, "shape": f"campaign/{limits}", "dtype": "mixed",
                               "median_us": round(1e6 / row["cases_per_s"], 1), "cases_per_s": row["cases_per_s"],
                               "cases": row["cases"]})
    ww = row.get("worker_warm_up") or {}
    log(f"{target} x {fam}: {row['cases']} cases in {row['seconds']:.1f}s = {row['cases_per_s']} cases/s "
        f"(warm-up {row['warmup_s']:.1f}s" + (f"; worker warm-up {ww.get('cases')}/{ww.get('of')} cases in "
                                             f"{ww.get('seconds')}s, parallel {ww.get('parallel')}" if ww else "")
        + ")")


def run_bench(*, device: str, targets: list, families: list, time_s: Optional[float], limits: str, warmup_cases: int,
              main_time_s: float, seed: int, quiet: bool = False, warm_up_s: Optional[float] = None) -> dict:
    """Measure (Note [Benchmarking the oracle]) and return the ``bench`` record (not saved).

    ``targets``: spec strings or TargetSpecs; ``time_s``: the timed campaign of each target x
    family (None: its default, Note [Time budget]); ``main_time_s``: seconds of the measured main job
    (0: none)."""
    from kernel_oracle.fuzz.time_budget import resolve_time_s

    time_s = resolve_time_s(time_s, "bench")
    from kernel_oracle.fuzz.campaign import CampaignError
    from kernel_oracle.fuzz.worker import Worker, WorkerError
    from kernel_oracle.harness.schema import add_note, new_record

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
            pairs = [(t, f) for t in targets for f in families] if not failed else []
            for target, fam in pairs:
                try:
                    row, rec = _measure(worker, target, fam, Path(tmp), len(rows), device=device, time_s=time_s,
                                        limits=limits, warmup_cases=warmup_cases, seed=seed, warm_up_s=warm_up_s)
                except CampaignError as exc:
                    failed.append(f"{target} x {fam}: {exc}")
                    log(f"{target} x {fam}: {exc}")
                    continue
                rows.append(row)
                _add_row(record, row, rec, limits, log)
    finally:
        worker.close()
    main_job = None
    if main_time_s > 0:
        main_job = _run_main_job(device, main_time_s, seed, log)
        log(f"main job: {main_job.get('fuzz_cases')} fuzz cases of {main_job.get('cases')} in "
            f"{main_job['wall_s']}s, exit {main_job['exit_code']}")
        if main_job.get("failed_campaigns") or "error" in main_job:
            failed.append(f"main job: {main_job.get('failed_campaigns') or main_job.get('error')}")
    record["summary"]["oracle_bench"] = {"device": device, "worker_startup_s": startup, "limits": limits,
                                         "time_s": time_s, "warmup_cases": warmup_cases,
                                         "campaigns": rows, "main_job": main_job, "failed": failed,
                                         "duration_s": round(time.monotonic() - t_start, 1)}
    for text in failed:
        add_note(record, f"bench: {text}")
    return record
