"""The main job (``kernel-oracle run``, the README's first command): selfcheck, campaigns, one report.

Note [The main job]
-------------------
On a fresh machine, within ``--time`` seconds on the best device there is:

1. **device**: ``--device auto`` picks CUDA when torch sees a GPU, else the CPU, where the Triton
   kernels run under the interpreter: :func:`harness.device.configure_process` throws the switch
   in :func:`run_main_job` *before* anything imports a kernel module (the job's modules import
   nothing heavy at import time), and the target worker gets :func:`harness.device.worker_env` of
   the device whatever this process has;
2. **selfcheck** (about :data:`SELFCHECK_SHARE` of the budget): the references against independent
   formulations (:mod:`kernel_oracle.jobs.main_job_selfcheck`), as target ``selfcheck``; where the
   campaigns run side by side it runs in a thread of this process beside them (their children's
   start-up and first cases overlap it), and its rows come first in the record all the same; before
   campaigns that run after it, it stops once it has used :data:`SELFCHECK_MAX_SHARE` of the time to
   the campaigns' deadline (its first round may run past its share, but a loaded machine would
   otherwise leave the campaigns nothing), and an unfinished first round is a failed part;
3. **campaigns**: one fuzz campaign (:func:`fuzz.campaign.run_campaign`) per available target x op
   family (:mod:`kernel_oracle.jobs.main_job_campaigns`).  On a GPU host with cores to spare they
   run side by side, up to :func:`kernel_oracle.jobs.side_by_side.slots` at once, each in a child
   process with its own worker and the whole window (Note [Campaigns side by side]).  Otherwise
   (the CPU, where the interpreter keeps each campaign's core busy) the rest of the budget is shared
   equally, each pair getting what the earlier ones left; they run in this process and share ONE target
   worker per device (:class:`fuzz.worker.Worker`, launched before the selfcheck so its imports and
   CUDA context are paid once, in parallel, and never inside a campaign's clock; it keeps compiled
   kernels between campaigns and is replaced only after a crash or a hang).  The job keeps its
   budget through the campaign's own bounds: its clock gets ``CAMPAIGN_SHARE`` of the slot,
   finishing a shrink at most ``SHRINK_SLACK_SHARE`` more, and a hung kernel one per-case timeout
   (at most ``CASE_TIMEOUT_SHARE`` of the slot, counted in the time the worker could run: Note [Busy
   machines] in :mod:`fuzz.cpu_wait`) before its worker is killed; a campaign that still runs long gets
   a note, and the later ones share what is left;
4. **report**: one record of kind ``"main"`` folding all of it in (:func:`harness.schema.merge`),
   written as ``<out>/latest.{json,md,html}`` (overwritten each run) and
   ``<out>/history/<UTC time>.json`` (never overwritten); each campaign keeps its own files under
   ``<out>/runs/<UTC time>/`` (the findings' repro commands point there).

A part that cannot run (an import fails, a campaign raises, the budget runs out before a pair) is
never a silent pass: the reason goes into the record's notes and ``summary.failed_parts``, the report
shows it, and the exit status is 3 (incomplete) unless there are new findings (1).  A job that ran no
case is 3 too.  A killed campaign keeps what it saved (``main_job_campaigns.salvage`` reads its
directory back through :class:`fuzz.state.CampaignState`).  Other notes (a dtype a target does not
support) are shown but do not fail the run.  An unavailable *target* (SGLang not installed, no GPU
for a GPU-only peer) is not a failure: the targets table says why it was skipped.  Exit codes follow
docs/semantics.md#exit-codes: 0 clean, 1 new findings (a finding that is a known upstream defect of
``harness/known_issues.toml`` is reported as known, with its link, and does not count), 2 usage or
I/O error (one line, checked before any work by the CLI: ``--out`` a file or unwritable, a bad
option, ``nan``/``inf`` seconds, a bad ``$KERNEL_ORACLE_KNOWN_ISSUES`` file), 3 incomplete or
interrupted (SIGTERM / SIGINT end the running campaign, which saves its state, and print one line).
"""

from __future__ import annotations

import datetime as _dt
import os
import sys
import time
from pathlib import Path
from typing import Optional

from kernel_oracle.fuzz.time_budget import resolve_time_s
from kernel_oracle.harness.family import default_family_names
from kernel_oracle.jobs.main_job_campaigns import run_campaign_part, run_cluster_part
from kernel_oracle.jobs.main_job_record import part_failed, reason
from kernel_oracle.jobs.main_job_selfcheck import SelfcheckBeside, run_selfcheck_part

__all__ = ["REPORT_RESERVE_S", "SELFCHECK_MAX_SHARE", "SELFCHECK_SHARE", "check_out",
           "launch_worker", "run_main_job"]

SELFCHECK_SHARE = 0.15
# the most of the time to the campaigns' deadline a selfcheck before them may take, however slow its round
SELFCHECK_MAX_SHARE = 0.5
# kept back from the campaigns for writing and rendering the report (matplotlib start-up included)
REPORT_RESERVE_S = 6.0


def launch_worker(device: str, record: dict):
    """The job's one target worker for ``device`` (started now, ready by the first campaign), or None
    when it cannot start (each campaign then starts its own)."""
    try:
        from kernel_oracle.fuzz.worker import Worker

        return Worker(device).launch()
    except Exception as exc:  # noqa: BLE001 - reported; campaigns still run with their own workers
        from kernel_oracle.harness.schema import add_note

        add_note(record, f"no shared worker ({reason(exc)}): each campaign starts its own")
        return None


def _utc_stamp() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")[:-4] + "Z"


def run_main_job(*, device: str = "auto", time_s: Optional[float] = None, seed: int = 0,
                 out: str | os.PathLike = "reports/out", targets: Optional[list] = None,
                 families: Optional[tuple] = None, selfcheck: bool = True, quiet: bool = False,
                 cluster: Optional[dict] = None, sglang_wheel: Optional[str] = None,
                 with_malformed: bool = False) -> dict:
    """Run everything and write the reports; returns ``{"record", "json", "md", "html", "history"}``.

    ``device``: ``auto``, ``cpu`` or ``cuda``; ``time_s``: seconds for the whole job (default: the
    ``run`` row of :data:`kernel_oracle.fuzz.time_budget.DEFAULT_TIME_S`); ``targets``: spec strings or
    TargetSpecs (default: every built-in target available here); ``families``: family names (default:
    every registered family taken by default, :mod:`kernel_oracle.harness.family`); ``cluster``: ``{"gpus": N}`` or ``{"scheduler": URL}`` (and ``"db"``)
    runs the campaigns on Dask; ``sglang_wheel``: the wheels of ``sglang==X.Y.Z`` targets;
    ``with_malformed``: a target without strict validation has its accepted malformed metadata counted
    as findings (default: validation gaps, Note [Malformed consequences])."""
    from kernel_oracle.harness.device import configure_process, needs_interpreter, resolve_device
    from kernel_oracle.harness.schema import add_note, new_record

    device = resolve_device(device)
    families = tuple(families) if families is not None else default_family_names()
    try:
        configure_process(device)  # before anything imports a kernel module (Note [The main job])
        too_late = None
    except RuntimeError as exc:  # campaigns still run right: their worker gets its own environment
        too_late = str(exc)
    time_s = resolve_time_s(time_s, "run", device)
    t0 = time.monotonic()
    deadline = t0 + max(time_s - REPORT_RESERVE_S, time_s * 0.5)

    def log(text: str) -> None:
        if not quiet:
            print(f"[{time.monotonic() - t0:6.1f}s / {time_s:g}s] {text}", file=sys.stderr, flush=True)

    stamp = _utc_stamp()
    run_dir = Path(out) / "runs" / stamp
    record = new_record("main", seeds={"seed": seed}, device=device)
    record["summary"] = {"time_s": time_s, "device": device, "run_dir": str(run_dir),
                         "triton_interpret": needs_interpreter(device)}
    log(f"device {device}" + (" (Triton interpreter)" if device == "cpu" else "") + f", budget {time_s:g}s")
    if too_late:
        add_note(record, f"in-process kernel calls of this run (the selfcheck) use the wrong Triton mode: {too_late}")
    from kernel_oracle.jobs.side_by_side import slots

    at_once = 1 if cluster else slots(device)  # Note [Campaigns side by side]: each then starts its own worker
    worker = None if cluster or at_once > 1 else launch_worker(device, record)  # starts during the selfcheck
    beside = None
    try:
        if not selfcheck:
            record["summary"]["selfcheck"] = "skipped (--no-selfcheck)"
        elif at_once > 1:  # the campaigns' children start (and then fuzz) while this process selfchecks
            beside = SelfcheckBeside(device, seed, time_s * SELFCHECK_SHARE, log)
        else:
            run_selfcheck_part(record, device, seed, time_s * SELFCHECK_SHARE, log,
                               stop_at=t0 + max(time_s * SELFCHECK_SHARE, SELFCHECK_MAX_SHARE * (deadline - t0)))
        if cluster:
            run_cluster_part(record, device, seed, deadline, run_dir, targets, families, log,
                             {**cluster, "sglang_wheel": sglang_wheel, "with_malformed": with_malformed})
        else:
            run_campaign_part(record, device, seed, deadline, run_dir, targets, families, log, worker=worker,
                              sglang_wheel=sglang_wheel, with_malformed=with_malformed, at_once=at_once)
    finally:
        if worker is not None:
            record["summary"]["worker"] = {"startup_s": [round(x, 2) for x in worker.startup_s],
                                           "restarts": worker.restarts}
            worker.close()
    if beside is not None:
        beside.fold_into(record)
    record["summary"]["duration_s"] = round(time.monotonic() - t0, 1)
    result = _write(record, Path(out), stamp)
    log(f"done in {time.monotonic() - t0:.1f}s")
    return result


def _write(record: dict, out: Path, stamp: str) -> dict:
    """Mark the known findings, then save the record (``latest`` and ``history``) and render it."""
    from kernel_oracle.harness.schema import save
    from kernel_oracle.jobs.reports import write_reports

    _mark_known(record)
    if not record["groups"] and not record["notes"]:
        part_failed(record, "nothing ran: no cases in this record")
    out.mkdir(parents=True, exist_ok=True)
    history = save(record, out / "history" / f"{stamp}.json")
    latest = save(record, out / "latest.json", overwrite=True)
    md, html = write_reports(latest, out, name="latest")
    return {"record": record, "json": latest, "md": md, "html": html, "history": history}


def check_out(path) -> None:
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
    """Mark the findings that are known upstream defects (the known-issues file, named in the record) and count them."""
    from kernel_oracle.harness.known_issues import KnownIssuesError, mark_known

    try:
        new = mark_known(record)
    except KnownIssuesError as exc:  # checked before any work by the CLI; a library caller gets a note
        part_failed(record, f"known issues not applied: {exc}")
        new = len(record["findings"])
    record["summary"].update(new_findings=new, known_findings=len(record["findings"]) - new)
