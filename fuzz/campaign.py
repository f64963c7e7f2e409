"""Fuzzing campaigns: the Hypothesis-driven search loop over one target and one op family.

Note [Campaigns]
----------------
A campaign is a sequence of Hypothesis *runs* over :func:`fuzz.strategies.cases` for one target and one family. Each
run searches until its first new failure, lets Hypothesis shrink it, and the minimal example becomes a *finding*. A
failing case in the root-cause bucket of a recorded finding (:mod:`harness.buckets`, Note [Buckets]) is one more hit
of it (its ``count``, ``dtypes``, regions and a few examples), so the next run searches for something new: one
defect is one finding, whichever dtype, size, region or seed shows it. The budget (``budget`` cases or ``time_s``
seconds) covers everything executed, shrinking included, plus a bounded shrink allowance; the clock starts once the
worker is ready (``startup_s`` in the record); worker restarts count.

The target runs in an isolated worker process (:mod:`fuzz.worker`, its own process group; what the target prints goes
to ``out_dir/target-output.log``, bounded), beside the oracle and the comparison (:func:`harness.check.check_case`):
only the verdict and its bucket come back, and a finding's tensors are rebuilt from the seed and saved here. A case
that kills the worker is a ``crash`` finding; one that does not answer within ``case_timeout_s``, nor on a retry with a
longer wait, a ``hang`` (Note [Confirmed hangs] in :mod:`fuzz.hangs`: an answer on the retry is the verdict); a fresh
worker goes on. A global setting of torch the target changed (restored after each call, Note [Global state]) is one
finding per setting. SIGTERM and SIGINT stop a campaign at any moment (:mod:`fuzz.stopping`): the worker is ended,
state and summary saved, :class:`CampaignInterrupted` raised (exit 3); rerunning with the same ``out_dir`` resumes the
same campaign (Note [Campaign identity] in :mod:`fuzz.state`). A failed write to ``out_dir`` (a full disk) ends it with
a summary and :class:`CampaignError` (exit 2), except a finding's case files: the finding is kept with a note. A target
without strict validation is judged on upstream contracts (Note [Malformed consequences] in :mod:`harness.malformed`):
accepted malformed metadata that only leaves rows undefined or dropped joins the validation-gap table unless
``with_malformed``. A known upstream defect (:mod:`harness.known_issues`) is ``known``, with its link.

Everything on disk belongs to :class:`fuzz.state.CampaignState` (Note [Campaign state]): the lock on ``out_dir``,
``findings.jsonl``, ``cases/``, ``state.json``, ``summary.json``, and recovery from torn files; Hypothesis's example
database is ``out_dir/.hypothesis/`` (a killed shrink resumes from its best example), or the ``database`` passed in
(:mod:`fuzz.cluster` passes one Redis database to every worker). With a passed database, each finding's case is also
saved there under :func:`shared_findings_key` and every campaign of the same target and family replays those cases
first, so a failure found by one worker is replayed (and recorded) by all others, whatever their seed; Hypothesis
itself deletes an example once it stops failing, so its own entries cannot carry that.
"""

from __future__ import annotations

import json
import shlex
import signal
import threading
import time
from pathlib import Path
from typing import Optional

from kernel_oracle.fuzz.campaign_config import CampaignConfig, CampaignError, HarnessError, case_timeout_for
from kernel_oracle.fuzz.crashes import confirmed_crash, fault_verdict
from kernel_oracle.fuzz.coverage import count_case, tile_model_of
from kernel_oracle.fuzz.hangs import confirmed_check
from kernel_oracle.fuzz.known_avoidance import KnownAvoidance
from kernel_oracle.fuzz.known_cases import name_known_findings
from kernel_oracle.fuzz.memcheck_gaps import memcheck_gaps
from kernel_oracle.fuzz.minimal_examples import minimal_example
from kernel_oracle.fuzz.process_tree import InProcess
from kernel_oracle.fuzz.shared_findings import replay_shared, shared_findings_key
from kernel_oracle.fuzz.state import TARGET_OUTPUT_LOG, CampaignState, CaseNotSaved, GroupKey, StateError
from kernel_oracle.fuzz.console import Progress, print_finding
from kernel_oracle.fuzz.stopping import CampaignInterrupted, Stop, sigterm_interrupts
from kernel_oracle.fuzz.stream import TIME_CHUNK_EXAMPLES, left_out_notes, run_seed
from kernel_oracle.harness import oracle_integrity
from kernel_oracle.harness.entry_signatures import EntrySignatureError, raise_for
from kernel_oracle.harness.features import with_needs
from kernel_oracle.harness.family import FAMILY_OF
from kernel_oracle.harness.malformed import GapTable

__all__ = ["CampaignConfig", "CampaignError", "CampaignInterrupted", "FAMILY_OF", "case_timeout_for", "run_campaign",
           "shared_findings_key"]

# shrink attempts after a crash (each restarts the worker) and a hang (each waits out the case timeout and a retry)
CRASH_SHRINKS = 8
HANG_SHRINKS = 0


def _as_found(case, verdict):
    """The case a failure is recorded with: the valid neighbour of a malformed case that shows its failure
    too (Note [One defect through malformed input] in :mod:`harness.through_malformed`), else the case."""
    valid = getattr(verdict, "valid_problem", None)
    return type(case)(valid, None) if valid is not None else case


def run_campaign(config: CampaignConfig, *, worker=None, database=None, announce=None) -> dict:
    """Run (or resume) the campaign of ``config`` (Note [Campaign config]); returns the ``harness.schema``
    record it writes to ``config.out_dir/summary.json``.

    ``worker``: a started :class:`fuzz.worker.Worker` for ``config.device`` to use (and leave
    running) instead of a fresh one (the main job shares one per device between its campaigns).
    ``database``: a Hypothesis ``ExampleDatabase`` shared with other campaigns (default:
    ``out_dir/.hypothesis/``, nothing shared); findings' cases are shared through it too (Note
    [Campaigns]).  Raises :class:`CampaignError` on usage and I/O errors, :class:`CampaignInterrupted`
    on SIGTERM / SIGINT.  ``announce``: called with the one line saying the campaign resumes or
    starts afresh (:meth:`fuzz.state.CampaignState.opening_line`), when it does.
    """
    if not isinstance(config, CampaignConfig):
        raise CampaignError(f"Expected a CampaignConfig but got config={config!r}")
    config.check_runnable(worker)
    from kernel_oracle.harness.known_issues import KnownIssuesError, known_issues_path, load_known_issues

    with sigterm_interrupts() as stop:
        try:
            known_issues = (known_issues_path(), load_known_issues())  # checked before any work: a usage error
        except KnownIssuesError as exc:
            raise CampaignError(str(exc)) from None
        try:
            state = CampaignState.open(config.out_dir, target=str(config.target), op=config.op, seed=config.seed,
                                       identity=config.identity(), fresh=config.fresh)
        except StateError as exc:
            raise CampaignError(str(exc)) from None
        if announce is not None and state.opened != "new":
            announce(state.opening_line())
        try:
            search = _Search(state, config, worker=worker, database=database, known_issues=known_issues, stop=stop)
            return search.run()
        finally:
            state.close()


class _Search:
    """The search loop of one campaign (Note [Campaigns]); ``state`` persists everything."""

    def __init__(self, state: CampaignState, config: CampaignConfig, *, worker=None, database=None,
                 known_issues: Optional[tuple] = None, stop: Optional[Stop] = None):
        self.state, self.config = state, config
        self.stop = stop if stop is not None else Stop()
        self.target, self.op = str(config.target), config.op
        self.budget, self.time_s, self.seed, self.device = config.case_budget, config.time_s, config.seed, config.device
        self.upstream_contracts_only, self.isolate = config.upstream_contracts_only, config.isolate
        self.family, self.limits, self.case_timeout_s = config.family, config.limits, config.case_timeout
        self.shrink_slack_s = config.shrink_slack_s
        self.allowance = (config.shrink_allowance if config.shrink_allowance is not None
                          else max(40, (self.budget or 200) // 2))
        self.worker, self.own_worker, self.local_target, self.prior_oracle = worker, worker is None, None, None
        self.info: dict = {}
        self.started, self.startup_s, self.base_elapsed = time.monotonic(), 0.0, state.elapsed_s
        self.memo: dict = {}
        self.harness_error: Optional[str] = None
        self.state_error: Optional[StateError] = None  # a failed write inside Hypothesis's body
        self.output_dropped = 0  # bytes of the target's output past its log's limit (Note [Target output])
        self.buckets: list = []  # (Bucket, finding id) of the recorded findings
        self.known_issues = known_issues  # (the file, its harness.known_issues entries); None: known_issues_path's
        self.known = KnownAvoidance(None, config.target, None)  # Note [Known-issue triggers]: run() sets it up
        self.database = database  # a shared Hypothesis ExampleDatabase (None: out_dir/.hypothesis/)
        self.wanted_dtypes: Optional[tuple] = config.dtypes
        self.memcheck_notes: list = []  # where --memcheck could not run (the summary's notes)
        self.gaps = GapTable()  # accepted malformed metadata judged a validation gap (Note [Malformed consequences])
        self.previous_case, self.crash_previous, self.after_case = None, {}, {}  # Note [Confirmed crashes]
        self.bar, self.tile_model = None, None  # Note [Coverage from the draws] in fuzz.coverage

    # ---- budget --------------------------------------------------------------------------------
    def elapsed(self) -> float:
        return self.base_elapsed + time.monotonic() - self.started

    def out_of_budget(self, extra: int = 0) -> bool:
        if self.budget is not None and self.state.executed >= self.budget + extra:
            return True
        return self.time_s is not None and self.elapsed() >= self.time_s + (extra and self.shrink_slack_s)

    # ---- the target --------------------------------------------------------------------------------
    def _describe(self) -> dict:
        """The target as the process that runs it sees it (``to_record()`` + ``interpreting``)."""
        if not self.isolate:
            from kernel_oracle.fuzz.targets import TargetError, resolve_target
            from kernel_oracle.harness.device import interpreting

            self.prior_oracle = oracle_integrity.rebase()  # what this process's caller changed is not the target's
            try:
                self.local_target = resolve_target(self.config.target, self.device, sources=self.config.sources)
            except TargetError as exc:
                raise CampaignError(str(exc)) from None
            return {**self.local_target.to_record(), "precisions": self.local_target.precisions(),
                    "interpreting": interpreting()}
        from kernel_oracle.fuzz.worker import Worker, WorkerError

        c = self.config
        self.worker = self.worker or Worker(self.device, case_timeout_s=self.case_timeout_s, yield_waits=c.shares_gpu)
        self.worker.case_timeout_s = self.case_timeout_s
        try:  # Note [Target output]: the target's prints go to this campaign's log
            self.worker.log_to(Path(self.state.out) / TARGET_OUTPUT_LOG)
        except OSError as exc:
            raise CampaignError(f"--out {self.state.out}: cannot write {TARGET_OUTPUT_LOG} ({exc.strerror or exc})") \
                from None
        try:
            return self.worker.describe(self.target, warm_up_s=c.warm_up_s, sources=c.sources)
        except WorkerError as exc:
            raise CampaignError(str(exc)) from None

    def observe(self, case):
        if self.local_target is not None:
            from kernel_oracle.harness.check import execute

            return execute(self.local_target, case, self.device)
        return self.worker.run(self.target, case.to_dict(), sources=self.config.sources)

    # ---- the loop ------------------------------------------------------------------------------
    def run(self) -> dict:
        from kernel_oracle.harness.buckets import bucket_of_record
        from kernel_oracle.harness.family import FAMILY_OPS
        from kernel_oracle.fuzz.strategies import default_limits
        from kernel_oracle.fuzz.stream import campaign_strategy, excluded_dtypes

        children = InProcess(active=not self.isolate)  # Note [Worker processes]: the in-process case
        try:
            self.info = self._describe()
            self.known = KnownAvoidance(self.known_issues[1] if self.known_issues else None, self.target,
                                        self.info.get("release"))
            # the worker's start-up (imports, a CUDA context) is not the target's time: the clock starts now
            self.startup_s = time.monotonic() - self.started
            self.started = time.monotonic()
            self.time_s = self.config.clock_s(self.started, self.base_elapsed)
            wanted = self.config.wanted_ops
            try:  # Note [Entry-point signatures]: a usage error before any case
                raise_for(self.info.get("signature_errors") or {}, wanted)
            except EntrySignatureError as exc:
                raise CampaignError(str(exc)) from None
            if self.limits is None:
                self.limits = default_limits(self.device, self.config.target.name)
            # Note [The campaign's own stream]: the strategy and the run seeds the precompile children predict
            self.ops, self.dtypes, self.strategy = campaign_strategy(
                self.info, self.family, self.op, self.limits, upstream_contracts_only=self.upstream_contracts_only,
                wanted_dtypes=self.wanted_dtypes)
            self.buckets = [(bucket_of_record(f), f["id"]) for f in self.state.findings]
            self.tile_model = tile_model_of(self.info, self.family, self.target, self.state.coverage)
            if not self.info.get("available", True) or self.strategy is None:
                why = (self.info.get("reason") if not self.info.get("available", True)
                       else f"no {self.family} entry point ({self.info.get('missing') or {}})" if not self.ops
                       else f"none of dtypes {list(self.wanted_dtypes or ())} is supported "
                            f"({excluded_dtypes(self.info, self.family)})")
                return self.finish([f"target {self.target!r} unavailable for {self.op}: {why}"])
            self.bar = Progress(self.budget, self.config.progress, f"fuzz {self.target} {self.op}")
            replay_shared(self)
            self._loop()
            name_known_findings(self)  # Note [Known cases]
            if self.config.memcheck:
                memcheck_gaps(self)
        except KeyboardInterrupt as exc:
            self._interrupted(exc.signame if isinstance(exc, CampaignInterrupted) else "SIGINT")
        except StateError as exc:  # the out directory failed under us (a full disk): exit 2 with what it holds
            self._state_failed(exc)
        finally:
            if self.bar is not None:
                self.bar.close()
            self._stop_worker(kill=False)
            children.end()
            oracle_integrity.restore(self.prior_oracle)  # the caller's baseline (Note [The oracle's own code])
        self.state.elapsed_s = self.elapsed()
        self.state.save()
        notes = [n for n in (self.harness_error, self.state.unreadable_note()) if n]  # Note [Campaign state]
        return self.finish(notes + self.memcheck_notes + self._output_notes(), status="incomplete" if notes else None)

    def _interrupted(self, signame: str) -> None:
        """SIGTERM / SIGINT: end the worker, save the state and an interrupted summary, raise
        :class:`CampaignInterrupted` (Note [Stopping a campaign])."""
        self.stop.cleaning = True  # one clean-up: a further SIGTERM is noted, not raised
        main = threading.current_thread() is threading.main_thread()
        old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None  # and a second Ctrl-C ignored
        record = None
        try:
            self._stop_worker(kill=True)
            self.state.elapsed_s = self.elapsed()
            note = (f"interrupted by {signame} after {self.state.executed} cases; rerun with the same out "
                    f"directory to resume")
            self.state.save()
            record = self.finish([note, *self._output_notes()], status="interrupted")
        except StateError:  # a full disk as well: the findings written so far are what is left
            pass
        finally:
            if main:
                signal.signal(signal.SIGINT, old)
        raise CampaignInterrupted(signame, record, self.state.executed) from None

    def _state_failed(self, exc: StateError) -> None:
        """A write to the out directory failed: a summary if it can still be written, then
        :class:`CampaignError` (exit 2, one line)."""
        self._stop_worker(kill=True)
        note = f"stopped: {exc}"
        try:
            self.finish([note, *self._output_notes()], status="incomplete")
        except (OSError, StateError):
            note += "; the summary could not be written either"
        raise CampaignError(note) from None

    def _output_notes(self) -> list:
        """A note when the target printed more than its log keeps (Note [Target output])."""
        dropped = self.output_dropped + (self.worker.output_dropped if self.worker is not None else 0)
        if not dropped:
            return []
        from kernel_oracle.fuzz.worker import OUTPUT_LIMIT

        return [f"the target printed {dropped} bytes past the {OUTPUT_LIMIT} kept in "
                f"{Path(self.state.out) / TARGET_OUTPUT_LOG}; the rest was dropped"]

    def _stop_worker(self, *, kill: bool) -> None:
        if self.worker is None:
            return
        self.worker.kill() if kill else (self.worker.close() if self.own_worker else None)
        if self.own_worker or kill:
            self.output_dropped += self.worker.output_dropped  # before log_to resets it
            self.worker.log_to(None)

    def _loop(self) -> None:
        stalled = 0
        while not self.out_of_budget() and self.harness_error is None:
            self.stop.check()
            before = self.state.executed
            found = self._one_run()
            self.state.elapsed_s = self.elapsed()
            self.state.save(force=False)
            self.finish(status="running")
            if self.state.executed == before and not found:
                stalled += 1
                if stalled >= 3:  # Hypothesis has nothing new to try (tiny search space)
                    break
            else:
                stalled = 0

    def _one_run(self) -> bool:
        """One Hypothesis run: search until a new failure, shrink it, record it; True if it found one."""
        from hypothesis import HealthCheck, Phase, given, seed as hseed, settings
        from hypothesis.database import DirectoryBasedExampleDatabase

        from kernel_oracle.harness.check import prepared_call

        self.state.runs += 1
        self.state.save(force=False)
        seed = run_seed(self.seed, self.state.runs)
        failing: dict = {}  # the latest (= most shrunk) new failure of this run
        fault_shrinks = [0]
        # a time-boxed campaign runs Hypothesis in short chunks so the budget is checked between them:
        # once the time is spent, examples return at once but Hypothesis would keep generating them
        chunk = max(1, self.budget - self.state.executed) if self.budget is not None else 10**6
        if self.time_s is not None:
            chunk = min(chunk, TIME_CHUNK_EXAMPLES)

        @settings(max_examples=chunk, deadline=None, derandomize=False, report_multiple_bugs=False,
                  database=(self.database if self.database is not None
                            else DirectoryBasedExampleDatabase(str(self.state.out / ".hypothesis"))),
                  suppress_health_check=list(HealthCheck), print_blob=False,
                  phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink))
        @hseed(seed)
        @given(self.strategy)
        def body(case):
            self._check(case, failing, fault_shrinks)

        try:
            body()
        except HarnessError as exc:
            if not failing:  # a bug of ours, not the target's: say so and stop rather than report it
                self.harness_error = (f"harness error (a bug of kernel-oracle, not of the target), campaign "
                                      f"stopped: {str(exc).splitlines()[0]}")
        except Exception:  # noqa: BLE001 - the failure itself; its minimal example is in `failing`
            pass
        if self.state_error is not None:
            raise self.state_error
        if not failing:
            return False
        case, verdict, bucket = failing["case"], failing["verdict"], failing["bucket"]
        if self.known.issue_of(case, verdict, bucket) is not None:  # Note [Known-issue triggers]: not minimised
            self._record(case, verdict, bucket, prepared_call(case, self.device))
            return True
        least = minimal_example(self, failing["case"], failing["verdict"], failing["bucket"])
        if (verdict := confirmed_crash(self, least.case, least.verdict)) is None:  # Note [Confirmed crashes]
            return True
        fid = self._record(least.case, verdict, least.bucket, prepared_call(least.case, self.device),
                           depends_on=least.depends_on)["id"]
        for other in least.replaced:
            self._hit(fid, other)
        return True

    def _check(self, case, failing: dict, fault_shrinks: list) -> None:
        """Hypothesis's test body: run one case; raise for a failure of a root cause not yet found.  A
        failed write to the out directory is kept for :meth:`_one_run` to raise outside Hypothesis
        (which would take it for the target's failure)."""
        if self.state_error is not None:
            return
        try:
            self._check_case(case, failing, fault_shrinks)
        except StateError as exc:
            self.state_error = exc

    def _check_case(self, case, failing: dict, fault_shrinks: list) -> None:
        key = case.to_json()
        if key in self.memo:
            verdict, bucket = self.memo[key]
            if not verdict.ok and not self._gap(case, verdict, count=False) and self._known(bucket) is None:
                failing.update(case=_as_found(case, verdict), verdict=verdict, bucket=bucket)
                raise AssertionError(bucket.label)
            return
        if self.out_of_budget(extra=self.allowance if failing else 0):
            return
        if self.known.skips(case):  # a known issue this campaign has found already: spend the time elsewhere
            return
        if failing and failing["verdict"].kind in ("crash", "hang"):
            fault_shrinks[0] += 1  # each costs a fresh worker (and a hang its timeout): shrink briefly
            if fault_shrinks[0] > (CRASH_SHRINKS if failing["verdict"].kind == "crash" else HANG_SHRINKS):
                return
        verdict, bucket = self._execute(case)
        if verdict.ok or self._gap(case, verdict):
            return
        case = _as_found(case, verdict)
        fid = self._known(bucket)
        if fid is not None:
            self._hit(fid, case, bucket, seen_through=verdict.seen_through)
            return
        failing.update(case=case, verdict=verdict, bucket=bucket)
        raise AssertionError(bucket.label)

    def _execute(self, case) -> tuple:
        """Run and count one case: ``(verdict, bucket or None)``, remembered for Hypothesis's replays.
        The verdict is computed beside the target (in the worker, on its device); a harness error
        raises :class:`HarnessError`."""
        from kernel_oracle.harness.check import check_case, shape_class

        self.stop.check()  # Note [Stopping a campaign]: a signal whose raise was swallowed stops here
        if self.local_target is not None:
            try:
                verdict = check_case(self.local_target, case, self.device)
            except Exception as exc:  # noqa: BLE001 - ours, not the target's (its errors are observations)
                raise HarnessError(f"{type(exc).__name__}: {exc}") from exc
        else:
            from kernel_oracle.fuzz.worker import WorkerError

            try:
                answer = confirmed_check(self, case)  # a silent case is tried again (Note [Confirmed hangs])
            except WorkerError as exc:
                raise HarnessError(str(exc)) from None
            verdict = fault_verdict(self, case, answer)  # a hang or crash: its finding, or a gap (Note [Confirmed crashes])
        from kernel_oracle.harness.malformed import in_gap_table

        group = GroupKey(self.target, case.op, case.dtype, shape_class(case))
        self.state.count_case(group, passed=verdict.ok, ratio=verdict.ratio,
                              gap=in_gap_table(verdict, self.info.get("strict"), self.config.with_malformed))
        count_case(self.state.coverage, self.target, self.tile_model, case)
        if self.bar is not None:
            self.bar.update(1, findings=len(self.state.findings))
        if self.state.executed % 10 == 0:
            self.state.elapsed_s = self.elapsed()
            self.state.save(force=False)
        bucket = None if verdict.ok else with_needs(case, verdict.bucket, self._execute)  # Note [Needed features]
        verdict.bucket = bucket if bucket is not None else verdict.bucket
        self.memo[case.to_json()] = (verdict, bucket)
        for switch, text in verdict.state_changes:  # Note [Global state]: one finding per setting
            self._state_change(case, switch, text)
        return verdict, bucket

    def _state_change(self, case, switch: str, text: str) -> None:
        """The target changed a global setting of torch (restored already): a finding the first
        time, one more hit of it afterwards; the case's own verdict is unaffected."""
        from kernel_oracle.harness.check import prepared_call, state_change_verdict

        verdict = state_change_verdict(case, switch, text)
        fid = self._known(verdict.bucket)
        if fid is not None:
            self._hit(fid, case, verdict.bucket)
        else:
            self._record(case, verdict, verdict.bucket, prepared_call(case, self.device))

    def _gap(self, case, verdict, *, count: bool = True) -> bool:
        """Whether ``verdict`` is a validation gap of a target judged on upstream contracts (no strict
        validation, no ``with_malformed``: Note [Malformed consequences]) rather than a finding."""
        from kernel_oracle.harness.malformed import in_gap_table

        if not in_gap_table(verdict, self.info.get("strict"), self.config.with_malformed):
            return False
        self.gaps.add(case, verdict, self.target) if count else None
        return True

    def _hit(self, fid: str, case, bucket=None, *, seen_through: Optional[str] = None) -> None:
        """One more failing case of the finding ``fid`` (its dtype and region join the finding's;
        ``seen_through``: the mutation of the malformed case that showed it, Note [One defect through
        malformed input])."""
        from kernel_oracle.harness.check import shape_class

        example = {"op": case.op, "dtype": case.dtype, "shape_class": shape_class(case), "problem": case.to_dict()}
        if seen_through:
            example["seen_through"] = seen_through
        self.state.add_hit(fid, example, region=getattr(bucket, "where", None))
        if self.bar is not None:
            self.bar.update(0, findings=len(self.state.findings), hits=sum(h["count"] for h in self.state.hits.values()))

    def _known(self, bucket) -> Optional[str]:
        return next((fid for b, fid in self.buckets if b.covers(bucket)), None)

    def _record(self, case, verdict, bucket, call, *, depends_on=()) -> dict:
        from kernel_oracle.harness.check import shape_class

        state = self.state
        fid = state.next_finding_id(verdict.kind, case.op)
        target = shlex.quote(self.target)
        try:
            pt = state.save_case(fid, {"case": case.to_dict(), "entry": call.entry, "args": call.args,
                                       "kwargs": call.kwargs, "inplace": call.inplace, "target": self.target,
                                       "device": self.device}, case.to_json())
            repro, unsaved = f"kernel-oracle repro {shlex.quote(str(pt))} --targets {target}", None
        except CaseNotSaved as exc:  # the finding is kept; its case is rebuilt from the seed instead
            repro, unsaved = f"kernel-oracle repro --case-json {shlex.quote(case.to_json())} --targets {target}", str(exc)
        figures = dict(verdict.figures or {})
        figures.setdefault("where", {})
        message = verdict.message or verdict.kind
        finding = {"id": fid, "target": self.target, "op": case.op, "dtype": case.dtype,
                   "shape_class": shape_class(case), "kind": verdict.kind,
                   "message": message.replace("\nReproduce: ", "\nReproduce (in-memory): "),
                   "figures": {k: figures.get(k) for k in ("max_abs", "max_rel", "ratio", "where")},
                   "repro": repro, "problem": case.to_dict(), "expected": verdict.expected,
                   "bucket": bucket.to_dict()}
        if depends_on:  # Note [Minimal examples]
            finding["depends_on"] = list(depends_on)
        if case.to_json() in self.after_case:  # Note [Confirmed crashes]: it crashes only after this case
            finding["after_case"] = self.after_case[case.to_json()].to_dict()
        if verdict.seen_through:  # Note [One defect through malformed input]
            finding["malformed_sightings"] = {verdict.seen_through: 1}
        if case.category == "malformed":  # Note [Malformed consequences]
            finding.update(consequence=verdict.consequence or ("out of bounds" if verdict.kind == "crash" else None),
                           rows=verdict.rows)
        if unsaved is not None:
            finding["note"] = f"its tensors were not saved ({unsaved}); the repro line rebuilds the case from its seed"
        state.append_finding(finding, GroupKey(self.target, case.op, case.dtype, finding["shape_class"]))
        self.buckets.append((bucket, fid))
        self.known.recorded(finding)
        if self.config.progress:
            print_finding(state.findings_with_hits(), self.bar, fid)
        if self.database is not None:  # every other campaign of this target x family replays it first
            self.database.save(shared_findings_key(self.target, self.family), case.to_json().encode())
        return finding

    # ---- the record ------------------------------------------------------------------------------
    def finish(self, notes=(), status: Optional[str] = None) -> dict:
        from kernel_oracle.harness.known_issues import mark_known
        from kernel_oracle.harness.schema import add_note, add_target, save

        info = self.info
        record = self.state.to_record(device=self.device, precision=info.get("precisions") or info.get("precision"),
                                      notes=())
        add_target(record, name=self.target, available=info.get("available", False), reason=info.get("reason") or None,
                   entry_points=sorted(info.get("entry_points") or ()), precision=info.get("precision"))
        record["targets"][-1].update({"strict": info.get("strict"),
                                      "excluded_dtypes": dict(info.get("excluded_dtypes") or {}),
                                      "missing": dict(info.get("missing") or {}),
                                      "release": info.get("release"), "declines": dict(info.get("declines") or {})})
        record["campaign"] = {"target": self.target, "op": self.op, "ops": list(getattr(self, "ops", ())),
                              "dtypes": list(getattr(self, "dtypes", ())), "budget": self.budget,
                              "time_s": self.time_s, "executed": self.state.executed,
                              "elapsed_s": round(self.state.elapsed_s, 3), "limits": self.limits,
                              "upstream_contracts_only": self.upstream_contracts_only,
                              "with_malformed": self.config.with_malformed,
                              "categories": list(getattr(self, "categories", ())),
                              "interpreter": bool(info.get("interpreting")), "isolated": self.isolate,
                              "case_timeout_s": self.case_timeout_s if self.isolate else None,
                              "worker_restarts": self.worker.restarts if self.worker is not None else 0,
                              "startup_s": round(self.startup_s, 3), "warm_up": info.get("warm_up")}
        record["validation_gaps"] = self.gaps.to_list()
        record["summary"]["status"] = status or "finished"
        # upstream defects of the known-issues file are reported as known, the file named (Note [Known issues])
        source, issues = self.known_issues or (None, None)
        new = mark_known(record, issues, source=source)
        record["summary"].update(new_findings=new, known_findings=len(record["findings"]) - new,
                                 known_skipped=dict(self.known.skipped),
                                 known_cases=sum(f.get("count", 1) for f in record["findings"] if f.get("known")))
        if info:  # the target ran in the worker's Triton mode, not necessarily this process's
            record["environment"]["triton_interpret"] = bool(info.get("interpreting"))
        for note in [*left_out_notes(info, self.target, self.family), *notes]:
            add_note(record, note)
        try:
            save(record, Path(self.state.out) / "summary.json", overwrite=True)
        except OSError as exc:
            raise StateError(f"{Path(self.state.out) / 'summary.json'}: cannot write ({exc.strerror or exc})") from None
        return record
