"""``kernel-oracle run``: the main job (the README's first command).

Note [The main job]
-------------------
On a fresh machine, within ``--time-budget`` seconds on the best device there is:

1. **device**: ``--device auto`` picks CUDA when torch sees a GPU, else the CPU, where the Triton
   kernels run under the interpreter: :func:`harness.device.configure_process` throws the switch
   here *before* anything imports a kernel module (this module imports nothing heavy at import time:
   the CLI imports every subcommand to build its parser), and the target worker gets
   :func:`harness.device.worker_env` of the device whatever this process has;
2. **selfcheck** (about :data:`SELFCHECK_SHARE` of the budget): the references against independent
   formulations (:func:`kernel_oracle.selfcheck.run_selfcheck`), as target ``selfcheck``;
3. **campaigns**: one fuzz campaign (:func:`fuzz.campaign.run_campaign`) per available target x op
   family (targets from :mod:`fuzz.targets`), the rest of the budget shared equally, each pair
   getting what the earlier ones left.  They run in this process and share ONE target worker per
   device (:class:`fuzz.worker.Worker`, launched before the selfcheck so its imports and CUDA context
   are paid once, in parallel, and never inside a campaign's clock; it keeps compiled kernels between
   campaigns and is replaced only after a crash or a hang).  The job keeps its budget through the
   campaign's own bounds: its clock gets :data:`CAMPAIGN_SHARE` of the slot, finishing a shrink at
   most :data:`SHRINK_SLACK_SHARE` more, and a hung kernel one per-case timeout (at most
   :data:`CASE_TIMEOUT_SHARE` of the slot) before its worker is killed; a campaign that still runs
   long gets a note, and the later ones share what is left;
4. **report**: one record of kind ``"main"`` folding all of it in (:func:`reports.schema.merge`),
   written as ``<out>/latest.{json,md,html}`` (overwritten each run) and
   ``<out>/history/<UTC time>.json`` (never overwritten); each campaign keeps its own files under
   ``<out>/runs/<UTC time>/`` (the findings' repro commands point there).

A part that cannot run (an import fails, a campaign raises, the budget runs out before a pair) is
never a silent pass: the reason goes into the record's notes and ``summary.failed_parts``, the report
shows it, and the exit status is 3 (incomplete) unless there are new findings (1).  A job that ran no
case is 3 too.  A killed campaign keeps what it saved: :func:`_salvage` reads its directory back
through :class:`fuzz.state.CampaignState`.  Other notes (a dtype a target does not support) are
shown but do not fail the run.  An unavailable *target* (SGLang not installed, no GPU for a
GPU-only peer) is not a failure: the targets table says why it was skipped.  Exit codes follow
SPEC.md: 0 clean, 1 new findings (a finding that is a known upstream defect of
``harness/known_issues.toml`` is reported as known, with its link, and does not count), 2 usage or
I/O error (one line, checked before any work: ``--out`` a file or unwritable, a bad option,
``nan``/``inf`` seconds, a bad ``$KERNEL_ORACLE_KNOWN_ISSUES`` file), 3 incomplete or interrupted (SIGTERM /
SIGINT end the running campaign, which saves its state, and print one line).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Optional

from kernel_oracle.cli_errors import one_line_errors

__all__ = ["DEFAULT_BUDGET_S", "SELFCHECK_SHARE", "add_arguments", "main", "run_main_job"]

# seconds: a few minutes on the CPU interpreter; a GPU gets through far more cases in the same time
DEFAULT_BUDGET_S = {"cpu": 180.0, "cuda": 300.0}
SELFCHECK_SHARE = 0.15
# selfcheck rounds: random variations per (op, dtype) in the first round, doubling while time allows
SELFCHECK_FIRST_CASES = 4
SELFCHECK_MAX_CASES = 256
SELFCHECK_MAX_ROUNDS = 8
# kept back from the campaigns for writing and rendering the report (matplotlib start-up included)
REPORT_RESERVE_S = 6.0
# a campaign this many seconds past its share gets a note (the next ones had less time)
OVERRUN_NOTE_S = 5.0
FALLBACK_TARGETS = ("reference", "triton")
FAMILIES = ("lora", "vision")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    one_line_errors(parser)  # a usage error: one line, exit 2 (SPEC.md)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="auto: the GPU if torch sees one, else the CPU with the Triton interpreter")
    parser.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                        help=f"wall-clock budget of the whole job (default {DEFAULT_BUDGET_S['cpu']:g} s on CPU, "
                             f"{DEFAULT_BUDGET_S['cuda']:g} s on GPU)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the selfcheck and of every campaign")
    parser.add_argument("--out", default="reports/out", metavar="DIR",
                        help="where latest.{json,md,html}, history/ and runs/ go (default reports/out)")
    parser.add_argument("--targets", default=None, metavar="LIST",
                        help="comma-separated target specs to fuzz (default: every built-in target that is "
                             "available here; also package.module[:attr])")
    parser.add_argument("--families", default=",".join(FAMILIES), metavar="LIST",
                        help="comma-separated op families to fuzz (default: lora,vision)")
    parser.add_argument("--no-selfcheck", action="store_true", help="skip the references' selfcheck")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.add_argument("--triton-cache", default=None, metavar="DIR",
                        help="a directory for Triton's compiled kernels, kept between runs (TRITON_CACHE_DIR of this "
                             "process and its workers): a later run loads binaries instead of compiling")
    parser.add_argument("--gpus", default=None, metavar="N|all",
                        help="run the campaigns as shards on one pinned Dask worker per GPU (fuzz.cluster)")
    parser.add_argument("--scheduler", default=None, metavar="tcp://HOST:8786",
                        help="run the campaigns as shards on an existing Dask cluster")
    parser.add_argument("--db", default=None, metavar="redis://HOST:6379/N",
                        help="with --gpus/--scheduler: one Hypothesis example database in Redis for all shards")


def _log(args_quiet: bool, t0: float, budget: float, text: str) -> None:
    if not args_quiet:
        print(f"[{time.monotonic() - t0:6.1f}s / {budget:g}s] {text}", file=sys.stderr, flush=True)


def _resolve_device(requested: str) -> str:
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: torch sees no CUDA device (torch.cuda.is_available() is False); "
                         "pass --device cpu or --device auto")
    return requested


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _part_failed(record: dict, text: str) -> None:
    """A part that could not run: a note for the reader and a non-zero exit (never a silent pass)."""
    from kernel_oracle.harness.schema import add_note

    add_note(record, text)
    record["summary"].setdefault("failed_parts", []).append(text)


# ---- part 1: selfcheck --------------------------------------------------------------------------
def _selfcheck_shape_class(row: dict) -> str:
    """Fixed samples keep their name; ``random-<i>`` -> ``random``; ``error:<id>#<i>`` -> ``errors``."""
    case = row.get("case")
    if not isinstance(case, str) or not case:
        return str(row.get("family") or "-")
    if case.startswith("random-"):
        return "random"
    if case.startswith("error:"):
        return "errors"
    return case if len(case) <= 48 else case[:45] + "..."


def run_selfcheck_part(record: dict, device: str, seed: int, time_s: float, log) -> None:
    from kernel_oracle.harness.schema import add_target

    try:
        from kernel_oracle.selfcheck import run_selfcheck
    except Exception as exc:  # noqa: BLE001 - reported, never a silent pass
        _part_failed(record, f"selfcheck unavailable: {_reason(exc)}")
        add_target(record, name="selfcheck", available=False, reason=f"import failed: {_reason(exc)}")
        log(f"selfcheck unavailable: {_reason(exc)}")
        return
    # Rounds until the share is used: round 0 runs the fixed samples, the error inputs and a few random
    # variations per (op, dtype); later rounds (another seed, twice the variations while the last
    # round's pace says they fit) keep only their random rows, so nothing is counted twice.
    started = time.monotonic()
    deadline = started + time_s
    rounds, n_fail, n_rows = [], 0, 0
    cases = SELFCHECK_FIRST_CASES if time_s >= 15 else 1  # a round cannot be interrupted: small first
    add_target(record, name="selfcheck", available=True, precision="ieee",
               reason="the references against independent formulations (kernel_oracle.independent)")
    while True:
        round_seed = seed + 1000 * len(rounds)
        log(f"selfcheck round {len(rounds)}: {cases} random cases per (op, dtype), seed {round_seed}")
        t_round = time.monotonic()
        try:
            rows = list(run_selfcheck(device=device, cases=cases, seed=round_seed))
        except Exception as exc:  # noqa: BLE001
            _part_failed(record, f"selfcheck failed: {_reason(exc)}")
            record["targets"][-1]["reason"] = f"run failed: {_reason(exc)}"
            log(f"selfcheck failed:\n{traceback.format_exc()}")
            return
        took = time.monotonic() - t_round
        if rounds:
            rows = [r for r in rows if str(r.get("case") or "").startswith("random-")]
        rounds.append({"seed": round_seed, "cases": cases, "rows": len(rows), "seconds": round(took, 2)})
        n_rows += len(rows)
        for row in rows:
            n_fail += _selfcheck_row(record, row, device, cases, round_seed, n_fail)
        left = deadline - time.monotonic()
        if left < 2 * took or len(rounds) >= SELFCHECK_MAX_ROUNDS:
            break
        cases = min(cases * 2, SELFCHECK_MAX_CASES)
    record["summary"]["selfcheck"] = {"rows": n_rows, "failed": n_fail, "rounds": rounds,
                                      "seconds": round(time.monotonic() - started, 1)}
    log(f"selfcheck: {n_rows} rows in {len(rounds)} round(s), {n_fail} failed, {time.monotonic() - started:.1f}s")


def _selfcheck_row(record: dict, row: dict, device: str, cases: int, seed: int, n_fail: int) -> int:
    """Add one selfcheck row to its group (and as a finding when it failed); returns 1 if it failed."""
    from kernel_oracle.harness.schema import add_finding, add_group

    op, dtype, case = str(row.get("op")), str(row.get("dtype")), str(row.get("case") or "")
    shape_class = _selfcheck_shape_class(row)
    ratio = row.get("ratio")
    ratios = [float(ratio)] if isinstance(ratio, (int, float)) else []
    passed = bool(row.get("passed"))
    add_group(record, target="selfcheck", op=op, dtype=dtype, shape_class=shape_class, cases=1,
              passes=int(passed), findings=None if passed else {"mismatch": 1}, ratios=ratios)
    if passed:
        return 0
    add_finding(record, {
        "id": f"selfcheck-{n_fail + 1:04d}", "target": "selfcheck", "op": op, "dtype": dtype,
        "shape_class": shape_class, "kind": "mismatch",
        "message": str(row.get("message") or "reference disagrees with its independent formulation"),
        "figures": {k: row.get(k) for k in ("err", "allowed", "ratio") if row.get(k) is not None},
        "repro": f"kernel-oracle selfcheck --device {device} --cases {cases} --seed {seed}  # case {case}",
        "contract": case[len("error:"):].split("#")[0] if case.startswith("error:") else None,
    })
    return 1


# ---- part 2: campaigns --------------------------------------------------------------------------
def _discover_targets(record: dict, device: str, specs: Optional[list], log,
                      sglang_wheel: Optional[str] = None) -> list:
    """[(name, Target | None, families)] of the available targets; unavailable ones go to the table."""
    from kernel_oracle.harness.schema import add_note, add_target

    try:
        from kernel_oracle.fuzz.targets import TargetSources, builtin_targets, resolve_target
    except Exception as exc:  # noqa: BLE001
        add_note(record, f"fuzz.targets unavailable ({_reason(exc)}): fuzzing {list(specs or FALLBACK_TARGETS)} "
                         f"without availability checks")
        return [(name, None, FAMILIES) for name in (specs or FALLBACK_TARGETS)]
    out = []
    for spec in specs or builtin_targets():
        try:
            t = resolve_target(spec, device, sources=TargetSources(sglang_wheel=sglang_wheel))
        except Exception as exc:  # noqa: BLE001 - a bad user spec
            _part_failed(record, f"target {spec!r} could not be resolved: {_reason(exc)}")
            add_target(record, name=spec, available=False, reason=_reason(exc))
            continue
        row = t.to_record() if hasattr(t, "to_record") else {"name": spec, "available": t.available}
        add_target(record, name=row["name"], available=row.get("available", True), reason=row.get("reason") or None,
                   entry_points=row.get("entry_points"), precision=row.get("precision"))
        # extra columns the report shows as a reason; the release selects the known issues that apply
        for k in ("strict", "excluded_dtypes", "missing", "release"):
            if row.get(k):
                record["targets"][-1][k] = row[k]
        if not t.available:
            log(f"target {spec}: unavailable ({t.reason})")
            if specs:  # asked for by name: say so loudly
                _part_failed(record, f"target {spec!r} is unavailable: {t.reason}")
            continue
        families = tuple(f for f in FAMILIES if t.ops(f))
        out.append((spec, t, families))
    return out


# a campaign's own clock gets this share of its slot; the rest covers finishing a shrink
# (SHRINK_SLACK_SHARE), writing its summary and merging it into the job's record
CAMPAIGN_SHARE = 0.8
SHRINK_SLACK_SHARE = 0.1
# the per-case timeout is at most this share of the slot (a hang costs one timeout, then a new worker)
CASE_TIMEOUT_SHARE = 0.25
# on a GPU the worker first compiles a target's kernels for a few realistic shapes (harness.warmup),
# once per target, for at most this share of the slot, taken off the campaign's clock
WARM_UP_SHARE = 0.15


def _campaign(target: str, op: str, *, share_s: float, seed: int, device: str, out_dir: Path,
              upstream_contracts_only: bool = False, worker=None, sglang_wheel: Optional[str] = None) -> tuple:
    """Run one campaign in this process on the job's shared ``worker``; returns (record or None,
    problem or None).  A campaign that raises keeps what it saved (:func:`_salvage`)."""
    from kernel_oracle.fuzz.campaign import CampaignConfig, CampaignError, case_timeout_for, run_campaign

    warm_up_s = WARM_UP_SHARE * share_s if device == "cuda" else None
    time_s = max(1.0, (CAMPAIGN_SHARE - (WARM_UP_SHARE if warm_up_s else 0.0)) * share_s)
    case_timeout_s = max(1.0, min(case_timeout_for(time_s), CASE_TIMEOUT_SHARE * share_s))
    try:
        config = CampaignConfig(target=target, op=op, time_s=round(time_s, 1), seed=seed, device=device,
                                out_dir=out_dir, upstream_contracts_only=upstream_contracts_only, progress=False,
                                case_timeout_s=case_timeout_s, shrink_slack_s=SHRINK_SLACK_SHARE * share_s,
                                warm_up_s=warm_up_s, sglang_wheel=sglang_wheel)
        record = run_campaign(config, worker=worker)
        return record, None
    except CampaignError as exc:
        return None, f"could not run: {exc}"
    except Exception as exc:  # noqa: BLE001 - our own failure: reported, never a silent pass
        problem = f"raised {_reason(exc)}"
        record = _salvage(target, out_dir, seed, device)
        if record is not None:
            problem += (f"; kept the {sum(g['cases'] for g in record['groups'])} cases and "
                        f"{len(record['findings'])} findings it had saved")
        return record, problem


def _salvage(target: str, out_dir: Path, seed: int, device: str) -> Optional[dict]:
    """A campaign record rebuilt from a killed campaign's files through the campaign's own state
    object (:meth:`fuzz.state.CampaignState.read`), or None when it saved nothing."""
    from kernel_oracle.fuzz.state import CampaignState

    try:
        state = CampaignState.read(out_dir)
        state.seed = seed
        record = state.to_record(device=device)
    except (OSError, ValueError, KeyError):
        return None
    return record if record["groups"] or record["findings"] else None


def run_cluster_part(record: dict, device: str, seed: int, deadline: float, run_dir: Path, specs: Optional[list],
                     families: tuple, log, cluster: dict) -> None:
    """The campaigns as shards (target x family) on a Dask cluster (:mod:`fuzz.cluster`); each
    shard gets the time left, less the shrink slack (they run side by side)."""
    from kernel_oracle.harness.schema import merge

    from kernel_oracle.fuzz.cluster import ClusterError, plan_shards, run_cluster

    targets = _discover_targets(record, device, specs, log, cluster.get("sglang_wheel"))
    lenient = {name for name, t, _ in targets if t is not None and not getattr(t, "strict", True)}
    shards = [s for name, _, fams in targets for s in plan_shards([name], [f for f in fams if f in families],
                                                                    None, [seed])]
    if not shards:
        _part_failed(record, "no available target x family pair to fuzz")
        return
    groups = [g for g in ([s for s in shards if s.target in lenient], [s for s in shards if s.target not in lenient])
              if g]
    workers = cluster.get("gpus")  # None: a cluster of unknown size, taken as one wave per group
    waves = sum(-(-len(g) // (workers or len(g))) for g in groups)
    left = deadline - time.monotonic()
    time_s = max(1.0, CAMPAIGN_SHARE * left / waves)
    from kernel_oracle.fuzz.campaign import CampaignConfig

    for group in groups:
        kind = "lenient" if group[0].target in lenient else "strict"
        try:
            settings = CampaignConfig(target=group[0].target, op=group[0].op, out_dir=run_dir / f"cluster-{kind}",
                                      device=device, time_s=round(time_s, 1), upstream_contracts_only=kind == "lenient",
                                      shrink_slack_s=SHRINK_SLACK_SHARE * left / waves,
                                      sglang_wheel=cluster.get("sglang_wheel"))
            rec = run_cluster(group, settings, gpus=cluster.get("gpus"), scheduler=cluster.get("scheduler"),
                              db_url=cluster.get("db"), log=log)
        except (ClusterError, OSError) as exc:
            _part_failed(record, f"cluster campaigns: {exc}")
            return
        rec.pop("campaign", None)
        merge(record, rec, seeds_key="cluster")
        record["summary"].setdefault("campaigns", []).extend(
            {"target": s.target, "family": s.op, "seed": s.seed, "out_dir": str(run_dir)} for s in group)


def run_campaign_part(record: dict, device: str, seed: int, deadline: float, run_dir: Path,
                      specs: Optional[list], families: tuple, log, worker=None,
                      sglang_wheel: Optional[str] = None) -> None:
    from kernel_oracle.harness.schema import add_note, merge

    try:
        import kernel_oracle.fuzz.campaign as campaign
    except Exception as exc:  # noqa: BLE001 - reported, never a silent pass
        _part_failed(record, f"fuzz campaign unavailable: {_reason(exc)}")
        log(f"fuzz campaign unavailable: {_reason(exc)}")
        return
    targets = _discover_targets(record, device, specs, log, sglang_wheel)
    pairs = [(name, fam) for name, _, fams in targets for fam in fams if fam in families]
    # targets without strict validation (sglang, flashinfer-cudnn) get no malformed metadata: it would
    # reach their kernels unchecked (validation gaps by construction, out-of-bounds reads at worst)
    lenient = {name for name, t, _ in targets if t is not None and not getattr(t, "strict", True)}
    if not pairs:
        _part_failed(record, "no available target x family pair to fuzz")
        return
    campaigns = record["summary"].setdefault("campaigns", [])
    for i, (name, fam) in enumerate(pairs):
        left = deadline - time.monotonic()
        share = left / (len(pairs) - i)
        if share < 1.0:
            skipped = [f"{n} x {f}" for n, f in pairs[i:]]
            _part_failed(record, f"time budget exhausted: campaigns not run for {', '.join(skipped)}; "
                                 f"pass a larger --time-budget")
            log(f"budget exhausted; skipped {skipped}")
            return
        safe = name.replace(":", "_").replace("/", "_")
        out_dir = run_dir / f"campaign-{safe}-{fam}"
        log(f"campaign {name} x {fam}: {share:.0f}s")
        started = time.monotonic()
        try:
            rec, problem = _campaign(name, fam, share_s=share, seed=seed, device=device, out_dir=out_dir,
                                     upstream_contracts_only=name in lenient, worker=worker,
                                     sglang_wheel=sglang_wheel)
            if rec is not None:
                merge(record, rec, seeds_key=f"campaign:{name}:{fam}")
        except Exception as exc:  # noqa: BLE001 - our own failure around the campaign: still reported
            rec, problem = None, _reason(exc)
            log(traceback.format_exc())
        took = time.monotonic() - started
        rec = rec or {}
        n_cases = sum(g["cases"] for g in rec.get("groups", []))
        row = {"target": name, "family": fam, "share_s": round(share, 1), "took_s": round(took, 1),
               "cases": n_cases, "findings": len(rec.get("findings", [])), "out_dir": str(out_dir)}
        if problem:
            row["problem"] = problem
            _part_failed(record, f"campaign {name} x {fam}: {problem}")
        elif took > share + OVERRUN_NOTE_S:
            add_note(record, f"campaign {name} x {fam} took {took:.0f}s of a {share:.0f}s share (a slow case or "
                             f"shrink); the later campaigns got less time")
        if worker is not None:
            row["worker_restarts"] = worker.restarts
        campaigns.append(row)
        log(f"campaign {name} x {fam}: {n_cases} cases, {row['findings']} findings, {took:.1f}s"
            + (f" ({problem})" if problem else ""))


# ---- the job ------------------------------------------------------------------------------------
def _launch_worker(device: str, record: dict):
    """The job's one target worker for ``device`` (started now, ready by the first campaign), or None
    when it cannot start (each campaign then starts its own)."""
    try:
        from kernel_oracle.fuzz.worker import Worker

        return Worker(device).launch()
    except Exception as exc:  # noqa: BLE001 - reported; campaigns still run with their own workers
        from kernel_oracle.harness.schema import add_note

        add_note(record, f"no shared worker ({_reason(exc)}): each campaign starts its own")
        return None


def _utc_stamp() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")[:-4] + "Z"


def run_main_job(*, device: str = "auto", time_budget: Optional[float] = None, seed: int = 0,
                 out: str | os.PathLike = "reports/out", targets: Optional[list] = None,
                 families: tuple = FAMILIES, selfcheck: bool = True, quiet: bool = False,
                 cluster: Optional[dict] = None, sglang_wheel: Optional[str] = None) -> dict:
    """Run everything and write the reports; returns ``{"record", "json", "md", "html", "history"}``.
    ``cluster``: ``{"gpus": N}`` or ``{"scheduler": URL}`` (and ``"db"``) runs the campaigns on Dask.
    ``sglang_wheel``: the wheels of ``sglang==X.Y.Z`` targets (``--sglang-wheel``)."""
    from kernel_oracle.harness.device import configure_process, needs_interpreter

    device = _resolve_device(device)
    try:
        configure_process(device)  # before anything imports a kernel module (Note [The main job])
        too_late = None
    except RuntimeError as exc:  # campaigns still run right: their worker gets its own environment
        too_late = str(exc)
    budget = float(time_budget if time_budget is not None else DEFAULT_BUDGET_S[device])
    if not math.isfinite(budget) or budget <= 0:
        raise ValueError(f"--time-budget {budget:g}: pass a positive, finite number of seconds")
    t0 = time.monotonic()
    deadline = t0 + max(budget - REPORT_RESERVE_S, budget * 0.5)

    def log(text: str) -> None:
        _log(quiet, t0, budget, text)

    from kernel_oracle.harness.schema import add_note, new_record, save

    stamp = _utc_stamp()
    out = Path(out)
    run_dir = out / "runs" / stamp
    record = new_record("main", seeds={"seed": seed}, device=device)
    record["summary"] = {"time_budget_s": budget, "device": device, "run_dir": str(run_dir),
                         "triton_interpret": needs_interpreter(device)}
    log(f"device {device}" + (" (Triton interpreter)" if device == "cpu" else "") + f", budget {budget:g}s")
    if too_late:
        add_note(record, f"in-process kernel calls of this run (the selfcheck) use the wrong Triton mode: {too_late}")

    worker = None if cluster else _launch_worker(device, record)  # starts during the selfcheck
    try:
        if selfcheck:
            run_selfcheck_part(record, device, seed, budget * SELFCHECK_SHARE, log)
        else:
            record["summary"]["selfcheck"] = "skipped (--no-selfcheck)"
        if cluster:
            run_cluster_part(record, device, seed, deadline, run_dir, targets, families, log,
                             {**cluster, "sglang_wheel": sglang_wheel})
        else:
            run_campaign_part(record, device, seed, deadline, run_dir, targets, families, log, worker=worker,
                              sglang_wheel=sglang_wheel)
    finally:
        if worker is not None:
            record["summary"]["worker"] = {"startup_s": [round(x, 2) for x in worker.startup_s],
                                           "restarts": worker.restarts}
            worker.close()

    record["summary"]["duration_s"] = round(time.monotonic() - t0, 1)
    _mark_known(record)
    if not record["groups"] and not record["notes"]:
        _part_failed(record, "nothing ran: no cases in this record")
    out.mkdir(parents=True, exist_ok=True)
    history = save(record, out / "history" / f"{stamp}.json")
    latest = save(record, out / "latest.json", overwrite=True)
    from kernel_oracle.report_cli import write_reports

    md, html = write_reports(latest, out, name="latest")
    log(f"done in {time.monotonic() - t0:.1f}s")
    return {"record": record, "json": latest, "md": md, "html": html, "history": history}


def _check_out(path: str) -> None:
    """``--out`` must be a directory this process can write (checked before any work)."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: is a file, not a directory; pass a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".write-probe-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise ValueError(f"--out {out}: cannot write there ({exc.strerror or exc}); pass a writable "
                         f"directory") from None


def _mark_known(record: dict) -> None:
    """Mark the findings that are known upstream defects (harness/known_issues.toml) and count them."""
    from kernel_oracle.harness.known_issues import KnownIssuesError, mark_known

    try:
        new = mark_known(record)
    except KnownIssuesError as exc:  # checked before any work by main(); a library caller gets a note
        _part_failed(record, f"known issues not applied: {exc}")
        new = len(record["findings"])
    record["summary"].update(new_findings=new, known_findings=len(record["findings"]) - new)


class _Interrupted(KeyboardInterrupt):
    def __init__(self, signame: str):
        super().__init__(signame)
        self.signame = signame


def main(args: argparse.Namespace) -> int:
    """Exit codes (SPEC.md): 0 clean, 1 findings, 2 usage or I/O error (one line), 3 incomplete (a
    part could not run, nothing was tested) or interrupted (SIGTERM / SIGINT)."""
    import signal

    try:
        families = tuple(f.strip() for f in args.families.split(",") if f.strip())
        bad = [f for f in families if f not in FAMILIES]
        if bad or not families:
            raise ValueError(f"--families {args.families!r}: the only valid values are {list(FAMILIES)}")
        targets = [t.strip() for t in args.targets.split(",") if t.strip()] if args.targets else None
        device = _resolve_device(args.device)
        if args.time_budget is not None and not (math.isfinite(args.time_budget) and args.time_budget > 0):
            raise ValueError(f"--time-budget {args.time_budget:g}: pass a positive, finite number of seconds")
        from kernel_oracle.harness.known_issues import load_known_issues

        load_known_issues()  # a bad $KERNEL_ORACLE_KNOWN_ISSUES file: KnownIssuesError, a ValueError
        _check_out(args.out)
        if args.triton_cache is not None:
            from kernel_oracle.harness.device import use_triton_cache

            use_triton_cache(args.triton_cache)  # before the worker starts: it inherits the cache
        cluster = None
        if args.gpus is not None or args.scheduler is not None:
            from kernel_oracle.fuzz.cluster import ClusterError, resolve_gpus  # ClusterError is a ValueError

            if args.gpus is not None and args.scheduler is not None:
                raise ClusterError("pass --gpus or --scheduler, not both")
            cluster = {"gpus": resolve_gpus(args.gpus) if args.gpus is not None else None,
                       "scheduler": args.scheduler, "db": args.db}
        elif args.db is not None:
            raise ValueError("--db needs --gpus or --scheduler (the main job's campaigns share it)")
    except ValueError as exc:  # usage errors only: everything above runs before any work
        print(f"kernel-oracle run: {exc}", file=sys.stderr)
        return 2

    def on_sigterm(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise _Interrupted("SIGTERM")

    old = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        result = run_main_job(device=device, time_budget=args.time_budget, seed=args.seed, out=args.out,
                              targets=targets, families=families, selfcheck=not args.no_selfcheck, quiet=args.quiet,
                              cluster=cluster)
    except KeyboardInterrupt as exc:
        signame = getattr(exc, "signame", "SIGINT")
        print(f"kernel-oracle run: interrupted by {signame}; no report written (campaign files kept under "
              f"{Path(args.out) / 'runs'})", file=sys.stderr)
        return 3
    except OSError as exc:
        print(f"kernel-oracle run: error: cannot write the report: {exc}", file=sys.stderr)
        return 2
    finally:
        signal.signal(signal.SIGTERM, old)
    rec = result["record"]
    cases = sum(g["cases"] for g in rec["groups"])
    passes = sum(g["passes"] for g in rec["groups"])
    new = [f for f in rec["findings"] if not f.get("known")]
    known = len(rec["findings"]) - len(new)
    print(f"{cases} cases, {passes} passed, {len(rec['findings'])} findings"
          + (f" ({known} known upstream issues)" if known else "") + f", {len(rec['notes'])} notes")
    for note in rec["notes"]:
        print(f"  note: {note}")
    for f in rec["findings"]:
        if f.get("known"):
            print(f"  known: {f['id']} is upstream issue {f['known']}: {f.get('upstream')}")
    print(f"JSON:     {result['json']}")
    print(f"Markdown: {result['md']}")
    print(f"HTML:     {result['html']}")
    print(f"history:  {result['history']}")
    failed = rec["summary"].get("failed_parts") or []
    if new:
        return 1
    if failed:
        print(f"incomplete: {len(failed)} part(s) could not run (exit 3)")
        return 3
    if cases == 0:
        print("incomplete: no case ran (exit 3)")
        return 3
    return 0
