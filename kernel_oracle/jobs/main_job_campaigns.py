"""The main job's second part: one fuzz campaign per available target x op family.

The campaigns run in the job's process and share its target worker (Note [The main job]); each gets
an equal share of the time left, its own clock :data:`CAMPAIGN_SHARE` of it, and its findings'
repro commands point into its directory under the run's ``runs/<UTC time>/``.  With ``--gpus`` or
``--scheduler`` they run as shards on Dask instead (:func:`run_cluster_part`).  A target that
cannot run, a campaign that raises or a pair the budget cannot reach is a failed part (a note and
exit 3), never a silent pass; a killed campaign keeps what it saved (:func:`salvage`).
"""

from __future__ import annotations

import os
import time
import traceback
from pathlib import Path
from typing import Optional

from kernel_oracle.harness.family import family_names, get_family
from kernel_oracle.jobs.main_job_record import part_failed, raised, reason

__all__ = ["CAMPAIGN_SHARE", "CASE_TIMEOUT_SHARE", "FALLBACK_TARGETS", "FINISH_S", "OVERRUN_NOTE_S",
           "SHRINK_SLACK_SHARE", "WARM_UP_SHARE", "compiling", "discover_targets", "precompile_beside",
           "run_campaign_part", "run_cluster_part", "run_one_campaign", "salvage"]

FALLBACK_TARGETS = ("reference", "triton")
# a campaign this many seconds past its share gets a note (the next ones had less time)
OVERRUN_NOTE_S = 5.0


def discover_targets(record: dict, device: str, specs: Optional[list], log,
                     sglang_wheel: Optional[str] = None) -> list:
    """[(name, Target | None, families)] of the available targets among ``specs`` (spec strings or
    TargetSpecs; None: every built-in target); unavailable ones go to the targets table."""
    from kernel_oracle.harness.schema import add_note, add_target

    specs = [str(s) for s in specs] if specs else None
    try:
        from kernel_oracle.fuzz.targets import TargetSources, builtin_targets, resolve_target
    except Exception as exc:  # noqa: BLE001
        add_note(record, f"fuzz.targets unavailable ({reason(exc)}): fuzzing {list(specs or FALLBACK_TARGETS)} "
                         f"without availability checks")
        return [(name, None, family_names()) for name in (specs or FALLBACK_TARGETS)]
    out = []
    for spec in specs or builtin_targets():
        try:
            t = resolve_target(spec, device, sources=TargetSources(sglang_wheel=sglang_wheel))
        except Exception as exc:  # noqa: BLE001 - a bad user spec
            part_failed(record, f"target {spec!r} could not be resolved: {reason(exc)}")
            add_target(record, name=spec, available=False, reason=reason(exc))
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
                part_failed(record, f"target {spec!r} is unavailable: {t.reason}")
            continue
        families = tuple(f for f in family_names() if t.ops(f))
        out.append((spec, t, families))
    return out


# a campaign's own clock gets this share of its slot; the rest covers finishing a shrink
# (SHRINK_SLACK_SHARE), writing its summary and merging it into the job's record
CAMPAIGN_SHARE = 0.8
SHRINK_SLACK_SHARE = 0.1
# the per-case timeout is at most this share of the slot (a hang costs one timeout, then a new worker)
CASE_TIMEOUT_SHARE = 0.25
# on a GPU the worker of a target that compiles many kernels (COMPILING) first compiles them for a few
# realistic shapes and every LoRA variant (harness.warmup, fuzz.precompile), once per target, for at
# most this share of the slot, taken off the campaign's clock (one campaign after another; side by
# side the variants compile beside the campaigns instead: precompile_beside)
WARM_UP_SHARE = 0.15


def compiling(target, family: str) -> bool:
    """Does ``target`` (a spec string or TargetSpec) compile many kernel variants for ``family`` (the
    family record's ``compiling_targets``: our LoRA kernels, Note [Specialization] in kernels/lora)?  The
    worker's warm-up compiles those variants, so only that family's campaign spends its share on them."""
    from kernel_oracle.harness.targets import TargetSpec

    return TargetSpec.parse(target).name in get_family(family).compiling_targets


def run_one_campaign(target: str, op: str, *, share_s: float, seed: int, device: str, out_dir: Path,
                     upstream_contracts_only: bool = False, worker=None, sglang_wheel: Optional[str] = None,
                     with_malformed: bool = False, warm_up_share: Optional[float] = WARM_UP_SHARE,
                     ends_at: Optional[float] = None, shares_gpu: bool = False) -> tuple:
    """Run one campaign in this process on the job's shared ``worker``; returns (record or None,
    problem or None).  A campaign that raises keeps what it saved (:func:`salvage`).  ``ends_at``
    (``time.monotonic()``): the clock runs until then, less only what the worker's start took
    (``CampaignConfig.ends_at``), instead of :data:`CAMPAIGN_SHARE` of ``share_s``; ``warm_up_share``
    None: no warm-up (the variants compile beside the campaigns, :func:`precompile_beside`);
    ``shares_gpu``: see ``CampaignConfig``."""
    from kernel_oracle.fuzz.campaign import CampaignConfig, CampaignError, case_timeout_for, run_campaign

    from kernel_oracle.harness.family import FAMILY_OF

    compiles = device == "cuda" and compiling(target, FAMILY_OF[op])
    warm_up_s = warm_up_share * share_s if compiles and warm_up_share else None
    time_s = max(1.0, share_s if ends_at is not None else
                 (CAMPAIGN_SHARE - (warm_up_share if warm_up_s else 0.0)) * share_s)
    case_timeout_s = max(1.0, min(case_timeout_for(time_s), CASE_TIMEOUT_SHARE * share_s))
    try:
        config = CampaignConfig(target=target, op=op, time_s=round(time_s, 1), seed=seed, device=device,
                                out_dir=out_dir, upstream_contracts_only=upstream_contracts_only, progress=False,
                                with_malformed=with_malformed,
                                case_timeout_s=case_timeout_s, shrink_slack_s=SHRINK_SLACK_SHARE * share_s,
                                warm_up_s=warm_up_s, sglang_wheel=sglang_wheel, ends_at=ends_at,
                                shares_gpu=shares_gpu)
        record = run_campaign(config, worker=worker)
        return record, None
    except CampaignError as exc:
        return None, f"could not run: {exc}"
    except Exception as exc:  # noqa: BLE001 - our own failure: reported, never a silent pass
        problem = raised(exc)
        record = salvage(target, out_dir, seed, device)
        if record is not None:
            problem += (f"; kept the {sum(g['cases'] for g in record['groups'])} cases and "
                        f"{len(record['findings'])} findings it had saved")
        return record, problem


def salvage(target: str, out_dir: Path, seed: int, device: str) -> Optional[dict]:
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

    targets = discover_targets(record, device, specs, log, cluster.get("sglang_wheel"))
    lenient = {name for name, t, _ in targets if t is not None and not getattr(t, "strict", True)}
    shards = [s for name, _, fams in targets for s in plan_shards([name], [f for f in fams if f in families],
                                                                    None, [seed])]
    if not shards:
        part_failed(record, "no available target x family pair to fuzz")
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
                                      device=device, time_s=round(time_s, 1),
                                      with_malformed=bool(cluster.get("with_malformed")),
                                      shrink_slack_s=SHRINK_SLACK_SHARE * left / waves,
                                      sglang_wheel=cluster.get("sglang_wheel"))
            rec = run_cluster(group, settings, gpus=cluster.get("gpus"), scheduler=cluster.get("scheduler"),
                              db_url=cluster.get("db"), log=log)
        except (ClusterError, OSError) as exc:
            part_failed(record, f"cluster campaigns: {exc}")
            return
        rec.pop("campaign", None)
        merge(record, rec, seeds_key="cluster")
        record.setdefault("validation_gaps", []).extend(rec.get("validation_gaps") or [])
        record["summary"].setdefault("campaigns", []).extend(
            {"target": s.target, "family": s.op, "seed": s.seed, "out_dir": str(run_dir)} for s in group)


def run_campaign_part(record: dict, device: str, seed: int, deadline: float, run_dir: Path,
                      specs: Optional[list], families: tuple, log, worker=None,
                      sglang_wheel: Optional[str] = None, with_malformed: bool = False, at_once: int = 1) -> None:
    """Run every available target x family pair of ``specs`` until ``deadline`` (time.monotonic) into
    ``record``, each campaign in ``run_dir/campaign-<target>-<family>``: one after another on the
    shared ``worker``, or with ``at_once`` > 1 that many at a time in child processes, each with its
    own worker (Note [Campaigns side by side] in :mod:`kernel_oracle.jobs.side_by_side`)."""
    try:
        import kernel_oracle.fuzz.campaign  # noqa: F401 - the campaigns need it: a failed import is a failed part
    except Exception as exc:  # noqa: BLE001 - reported, never a silent pass
        part_failed(record, f"fuzz campaign unavailable: {reason(exc)}")
        log(f"fuzz campaign unavailable: {reason(exc)}")
        return
    targets = discover_targets(record, device, specs, log, sglang_wheel)
    pairs = [(name, fam) for name, _, fams in targets for fam in fams if fam in families]
    # targets without strict validation (sglang, flashinfer-cudnn) are judged on upstream contracts and, as in
    # `fuzz` and `matrix`, on what they do with malformed metadata (Note [Malformed consequences]): defined rows
    # changed or out-of-bounds memory are findings, the rest validation gaps (a worker whose CUDA context an
    # out-of-bounds access broke is replaced: Note [A broken device context])
    lenient = {name for name, t, _ in targets if t is not None and not getattr(t, "strict", True)}
    if not pairs:
        part_failed(record, "no available target x family pair to fuzz")
        return
    for name in sorted({n for n, _ in pairs} & lenient):
        from kernel_oracle.harness.malformed import lenient_line

        log(lenient_line(name, with_malformed))
    common = dict(seed=seed, device=device, sglang_wheel=sglang_wheel, with_malformed=with_malformed)
    record["summary"]["campaigns_at_once"] = min(at_once, len(pairs))
    if at_once > 1 and len(pairs) > 1:
        _side_by_side(record, pairs, targets, lenient, common, deadline, run_dir, log, at_once)
        return
    for i, (name, fam) in enumerate(pairs):
        left = deadline - time.monotonic()
        share = left / (len(pairs) - i)
        if share < 1.0:
            _exhausted(record, pairs[i:], log)
            return
        out_dir = _out_dir(run_dir, name, fam)
        log(f"campaign {name} x {fam}: {share:.0f}s")
        started = time.monotonic()
        try:
            rec, problem = run_one_campaign(name, fam, share_s=share, out_dir=out_dir, worker=worker,
                                            **common)
        except Exception as exc:  # noqa: BLE001 - our own failure around the campaign: still reported
            rec, problem = None, reason(exc)
            log(traceback.format_exc())
        _add_campaign(record, name, fam, share, time.monotonic() - started, rec, problem, out_dir, log,
                      restarts=None if worker is None else worker.restarts)


# seconds a campaign in a child process spends before its clock starts (the child's imports, then its
# worker's imports and CUDA context): a window shorter than this and a second runs no campaign
CHILD_STARTUP_S = 12.0
# seconds after a side-by-side campaign's clock for its summary, its answer and the merge (a shrink in
# progress has SHRINK_SLACK_SHARE of the window on top)
FINISH_S = 3.0


def _side_by_side(record: dict, pairs: list, targets: list, lenient: set, common: dict, deadline: float,
                  run_dir: Path, log, at_once: int) -> None:
    """The pairs in child processes, ``at_once`` at a time; each gets the time left shared among the
    waves still to come, and its clock ends at the end of that share less the shrink slack and
    :data:`FINISH_S`, however long its start took (Note [Campaigns side by side])."""
    from kernel_oracle.jobs.side_by_side import ChildCall, run_side_by_side

    with_malformed = common["with_malformed"]
    precompile = precompile_beside(targets, pairs, common["device"], deadline - time.monotonic(), log,
                                   seed=common["seed"], upstream_contracts_only=False)
    calls = [ChildCall((name, fam), run_one_campaign,
                       dict(target=name, op=fam, out_dir=_out_dir(run_dir, name, fam),
                            warm_up_share=None if precompile is not None and compiling(name, fam) else WARM_UP_SHARE,
                            shares_gpu=True, **common))
             for name, fam in pairs]
    shares, skipped = {}, []

    def before_start(call, started: int, pending: int):
        now = time.monotonic()
        window = (deadline - now) / -(-pending // at_once)
        if window - CHILD_STARTUP_S < 1.0:
            skipped.append(call.key)
            window = CHILD_STARTUP_S + 1.0  # still started, with the floor: its row says it ran past the budget
        shares[call.key] = window
        log(f"campaign {call.key[0]} x {call.key[1]}: {window:.0f}s, in a child process")
        ends_at = now + max(CHILD_STARTUP_S + 1.0, (1 - SHRINK_SLACK_SHARE) * window - FINISH_S)
        return ChildCall(call.key, call.fn, {**call.kwargs, "share_s": window, "ends_at": ends_at})

    def on_done(d) -> None:
        log(f"campaign {d.key[0]} x {d.key[1]}: ended after {d.took_s:.0f}s" + (f" ({d.problem})" if d.problem else ""))

    try:
        dones = run_side_by_side(calls, at_once=at_once, before_start=before_start, on_done=on_done)
    finally:
        if precompile is not None:
            record["summary"]["precompile"] = {"target": precompile.target, **precompile.stop()}
    for d in dones:
        # run_one_campaign's (record, problem); else what the child said went wrong (and what it saved)
        rec, problem = d.result if d.problem is None else (d.result, d.problem)
        if rec is None:
            rec = salvage(d.key[0], _out_dir(run_dir, *d.key), common["seed"], common["device"])
        _add_campaign(record, d.key[0], d.key[1], shares.get(d.key, 0.0), d.took_s, rec, problem,
                      _out_dir(run_dir, *d.key), log, restarts=None)
    if skipped:
        part_failed(record, f"time budget too short for {len(skipped)} campaigns side by side: "
                             f"{', '.join(f'{n} x {f}' for n, f in skipped)} ran past it; pass a larger --time")


def precompile_beside(targets: list, pairs: list, device: str, seconds: float, log, *, seed: int = 0,
                      upstream_contracts_only: bool = False):
    """On CUDA, when a COMPILING pair is among ``pairs``: start one child per core that compiles (only)
    the cases its LoRA campaign of ``seed`` is about to run (Note [The campaign's own stream] in
    :mod:`fuzz.stream`), then its LoRA variants, for up to ``seconds``, beside the campaigns at the lowest
    CPU priority (Note [Parallel precompilation] in :mod:`fuzz.precompile`); returns the running
    :class:`~kernel_oracle.fuzz.precompile.Precompile`, or None.  ``targets``: discover_targets's."""
    from kernel_oracle.fuzz.precompile import BESIDE_NICE, start_variants
    from kernel_oracle.fuzz.strategies import default_limits
    from kernel_oracle.fuzz.stream import CampaignStream
    from kernel_oracle.harness.warmup import variant_cases, variant_ops, warm_up_dtypes

    if device != "cuda":
        return None
    for name, target, _ in targets:
        if target is None or not any((name, fam) in pairs and compiling(name, fam) for fam in family_names()):
            continue
        ops, dtypes = variant_ops(sorted(target.entries)), warm_up_dtypes(target)
        n = os.cpu_count() or 1
        stream = CampaignStream(seed, default_limits(device, name), upstream_contracts_only)
        log(f"{name}: compiling the first {stream.runs} runs of its LoRA campaign, then its "
            f"{len(variant_cases(ops, dtypes))} LoRA kernel variants, in {n} processes (nice {BESIDE_NICE}) beside "
            f"the campaigns")
        return start_variants(name, device, seconds=seconds, dtypes=dtypes, ops=ops, processes=n, nice=BESIDE_NICE,
                              stream=stream)
    return None


def _out_dir(run_dir: Path, name: str, fam: str) -> Path:
    return run_dir / f"campaign-{name.replace(':', '_').replace('/', '_')}-{fam}"


def _exhausted(record: dict, pairs: list, log) -> None:
    skipped = [f"{n} x {f}" for n, f in pairs]
    part_failed(record, f"time budget exhausted: campaigns not run for {', '.join(skipped)}; pass a larger --time")
    log(f"budget exhausted; skipped {skipped}")


def _add_campaign(record: dict, name: str, fam: str, share: float, took: float, rec: Optional[dict],
                  problem: Optional[str], out_dir: Path, log, restarts: Optional[int]) -> None:
    """Merge one campaign's record into the job's and add its row to ``summary.campaigns``."""
    from kernel_oracle.harness.schema import add_note, merge

    if rec is not None:
        merge(record, rec, seeds_key=f"campaign:{name}:{fam}")
        record.setdefault("validation_gaps", []).extend({**g, "target": name} for g in rec.get("validation_gaps") or [])
    rec = rec or {}
    n_cases = sum(g["cases"] for g in rec.get("groups", []))
    row = {"target": name, "family": fam, "share_s": round(share, 1), "took_s": round(took, 1),
           "cases": n_cases, "findings": len(rec.get("findings", [])), "out_dir": str(out_dir)}
    camp = rec.get("campaign") or {}
    if camp.get("warm_up"):  # what the worker compiled before the clock (the job's record drops "campaign")
        row["warm_up"] = camp["warm_up"]
    if camp.get("startup_s") is not None:
        row["startup_s"] = camp["startup_s"]
    if problem:
        row["problem"] = problem
        part_failed(record, f"campaign {name} x {fam}: {problem}")
    elif took > share + OVERRUN_NOTE_S:
        add_note(record, f"campaign {name} x {fam} took {took:.0f}s of a {share:.0f}s share (a slow case or "
                         f"shrink); the later campaigns got less time")
    if restarts is not None:
        row["worker_restarts"] = restarts
    record["summary"].setdefault("campaigns", []).append(row)
    log(f"campaign {name} x {fam}: {n_cases} cases, {row['findings']} findings, {took:.1f}s"
        + (f" ({problem})" if problem else ""))
