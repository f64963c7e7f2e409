"""Fuzzing campaigns: Hypothesis-driven search, shrinking, isolated targets, resumable output.

Note [Campaigns]
----------------
A campaign is a sequence of Hypothesis *runs* over :func:`fuzz.strategies.cases` for one target and
one family.  Each run searches until its first new failure, lets Hypothesis shrink it, and the
minimal example becomes a *finding*; cases matching an already recorded finding (same kind, op,
dtype and mutation kind) count as known, so the next run searches for something new.  The budget
(``budget`` cases, or ``time_s`` seconds) covers everything executed, shrinking included, plus a
bounded shrink allowance so a finding is never left half-shrunk.

The target runs in an isolated worker process (:mod:`fuzz.worker`): a crash is recorded as a
finding of kind ``crash`` and a fresh worker goes on.  The expected outcome and the comparison run
in the campaign's own process, against the reference.

Output directory (``out_dir``), all of it resumable -- rerunning with the same directory continues:

* ``findings.jsonl``: one finding per line, appended and flushed as it is found;
* ``cases/<id>.pt`` + ``cases/<id>.json``: the call's tensors and the case as JSON, for
  ``kernel-oracle repro cases/<id>.pt --target T``;
* ``state.json``: cases executed, runs started, per-group counters (rewritten atomically);
* ``.hypothesis/``: Hypothesis's example database (a killed shrink resumes from its best example);
* ``summary.json``: the ``reports.schema`` record of kind ``"campaign"`` (rewritten at the end of
  each run and of the campaign).
"""

from __future__ import annotations

import json
import os
import shlex
import time
from pathlib import Path
from typing import Optional

__all__ = ["CampaignError", "run_campaign", "FAMILY_OF"]

from kernel_oracle.harness.opinfo import FAMILY_OF  # noqa: E402 - op or family -> family, from the op table


# shrink attempts after a crash (each one restarts the worker)
CRASH_SHRINKS = 8
# examples per Hypothesis run when the campaign is time-boxed (--time)
TIME_CHUNK_EXAMPLES = 25


class CampaignError(ValueError):
    """A usage error of :func:`run_campaign` (exit code 2 in the CLI)."""


def _prepare_device(device: str) -> None:
    """Switch the Triton interpreter on before any kernel import when there is no GPU to run on."""
    import torch

    if device == "cpu" or not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


class _Progress:
    def __init__(self, total: Optional[int], enabled: bool, desc: str):
        self.bar = None
        if enabled:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, desc=desc, unit="case", dynamic_ncols=True)
            except ImportError:  # tqdm is optional at run time: no bar, same results
                self.bar = None

    def update(self, n: int = 1, **postfix) -> None:
        if self.bar is not None:
            self.bar.update(n)
            if postfix:
                self.bar.set_postfix(**postfix, refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _signature(case, verdict) -> str:
    return "|".join((verdict.kind, case.op, case.dtype, case.mutation.kind if case.mutation else "valid"))


def run_campaign(*, target: str, op: str, budget: int | None = None, time_s: float | None = None, seed: int = 0,
                 device: str = "cpu", out_dir, upstream_contracts_only: bool = False, progress: bool = True,
                 limits: Optional[str] = None, isolate: bool = True, shrink_allowance: Optional[int] = None) -> dict:
    """Run (or resume) a campaign; returns the ``reports.schema`` record it writes to ``out_dir/summary.json``.

    ``op``: ``lora``, ``vision`` or one LoRA op name.  ``budget``: cases to execute (shrinking
    included); ``time_s``: wall-clock seconds; with neither, ``budget=100``.  ``limits``: the size
    preset of :data:`fuzz.strategies.LIMITS` (default: ``tiny`` for an interpreted target, ``small``
    for a CPU reference, ``full`` on a GPU).  ``isolate``: run the target in a worker process.
    """
    if op not in FAMILY_OF:
        raise CampaignError(f"op={op!r} is unknown; the only valid values are {sorted(FAMILY_OF)}")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 0):
        raise CampaignError(f"Expected a non-negative int but got budget={budget!r}")
    if time_s is not None and (not isinstance(time_s, (int, float)) or time_s <= 0):
        raise CampaignError(f"Expected a positive number of seconds but got time_s={time_s!r}")
    if device not in ("cpu", "cuda"):
        raise CampaignError(f"device={device!r} is invalid; the only valid values are 'cpu', 'cuda'")
    if budget is None and time_s is None:
        budget = 100
    _prepare_device(device)

    import torch
    from hypothesis import HealthCheck, Phase, given, seed as hseed, settings
    from hypothesis.database import DirectoryBasedExampleDatabase

    from kernel_oracle.harness.schema import add_finding, add_group, add_note, add_target, new_record, save

    from kernel_oracle.harness.check import Observed, _prepared_call, expected_outcome, judge, shape_class
    from kernel_oracle.fuzz.strategies import ALL_DTYPES, cases
    from kernel_oracle.fuzz.targets import TargetError, resolve_target

    if device == "cuda" and not torch.cuda.is_available():
        raise CampaignError("device='cuda' but torch sees no GPU; pass --device cpu")
    family = FAMILY_OF[op]
    out = Path(out_dir)
    (out / "cases").mkdir(parents=True, exist_ok=True)
    try:
        tgt = resolve_target(target, device)
    except TargetError as exc:
        raise CampaignError(str(exc)) from None

    state_path = out / "state.json"
    state = {"target": target, "op": op, "seed": seed, "executed": 0, "runs": 0, "elapsed_s": 0.0, "groups": {},
             "finding_count": 0}
    if state_path.exists():
        old = json.loads(state_path.read_text())
        if (old.get("target"), old.get("op")) != (target, op):
            raise CampaignError(f"{out} holds a campaign of target={old.get('target')!r} op={old.get('op')!r}; "
                                f"pass another --out to fuzz target={target!r} op={op!r}")
        state.update(old)
    findings_path = out / "findings.jsonl"
    findings: list[dict] = []
    if findings_path.exists():
        findings = [json.loads(line) for line in findings_path.read_text().splitlines() if line.strip()]
    known = {f["signature"] for f in findings if "signature" in f}
    state["finding_count"] = max(state.get("finding_count", 0), len(findings))

    ops = tgt.ops(family) if family == "lora" and op == "lora" else ((op,) if family == "lora" else ("vision",))
    ops = tuple(o for o in ops if tgt.has(o))
    dtypes = tgt.dtypes(ALL_DTYPES)
    if limits is None:
        limits = "full" if device == "cuda" else ("small" if target == "reference" else "tiny")
    categories = ("valid", "partial", "upstream") + (() if upstream_contracts_only else ("malformed",))

    def finish(record_notes=()) -> dict:
        record = new_record("campaign", seeds={"seed": seed, "runs": state["runs"]}, device=device)
        add_target(record, name=target, available=tgt.available, reason=tgt.reason or None,
                   entry_points=sorted(tgt.entries), precision=tgt.precision_summary())
        record["targets"][-1].update({"strict": tgt.strict, "excluded_dtypes": dict(tgt.excluded_dtypes),
                                      "missing": dict(tgt.notes)})
        for key, g in sorted(state["groups"].items()):
            t, o, d, sc = key.split("|")
            add_group(record, target=t, op=o, dtype=d, shape_class=sc, cases=g["cases"], passes=g["passes"],
                      findings=g["findings"], ratios=g["ratios"], precision=tgt.precision_for(o))
        for f in findings:
            add_finding(record, {k: v for k, v in f.items() if k != "signature"})
        record["campaign"] = {"target": target, "op": op, "ops": list(ops), "dtypes": list(dtypes),
                              "budget": budget, "time_s": time_s, "executed": state["executed"],
                              "elapsed_s": round(state["elapsed_s"], 3), "limits": limits,
                              "upstream_contracts_only": upstream_contracts_only, "categories": list(categories),
                              "interpreter": os.environ.get("TRITON_INTERPRET") == "1", "isolated": isolate}
        for d, why in tgt.excluded_dtypes.items():
            add_note(record, f"{target}: {d} not fuzzed: {why}")
        for note in record_notes:
            add_note(record, note)
        save(record, out / "summary.json", overwrite=True)
        return record

    if not tgt.available or not ops:
        why = tgt.reason if not tgt.available else f"no {family} entry point ({tgt.notes})"
        return finish([f"target {target!r} unavailable for {op}: {why}"])

    worker = None
    if isolate:
        from kernel_oracle.fuzz.worker import Worker

        worker = Worker(target, device)

    def observe(case) -> Observed:
        if worker is not None:
            return worker.run(case.to_dict())
        from kernel_oracle.harness.check import execute

        return execute(tgt, case, device)

    def save_state() -> None:
        _atomic_write(state_path, json.dumps(state, indent=1, sort_keys=True))

    strategy = cases(family, categories=categories, dtypes=dtypes, ops=ops if family == "lora" else None,
                     limits=limits)
    allowance = shrink_allowance if shrink_allowance is not None else max(40, (budget or 200) // 2)
    bar = _Progress(budget, progress, f"fuzz {target} {op}")
    started = time.monotonic()
    base_elapsed = state["elapsed_s"]

    def elapsed() -> float:
        return base_elapsed + time.monotonic() - started

    def out_of_budget(extra: int = 0) -> bool:
        if budget is not None and state["executed"] >= budget + extra:
            return True
        return time_s is not None and elapsed() >= time_s + (extra and 60.0)

    def group(case) -> dict:
        key = "|".join((target, case.op, case.dtype, shape_class(case)))
        return state["groups"].setdefault(key, {"cases": 0, "passes": 0, "ratios": [],
                                                "findings": {"mismatch": 0, "contract": 0, "validation-gap": 0,
                                                             "crash": 0}})

    def record_finding(case, verdict, call) -> dict:
        state["finding_count"] += 1
        fid = f"F{state['finding_count']:04d}-{verdict.kind}-{case.op}-{case.dtype}"
        pt = out / "cases" / f"{fid}.pt"
        torch.save({"case": case.to_dict(), "entry": call.entry, "args": call.args, "kwargs": call.kwargs,
                    "inplace": call.inplace, "target": target, "device": device}, pt)
        (out / "cases" / f"{fid}.json").write_text(case.to_json() + "\n")
        repro = f"kernel-oracle repro {shlex.quote(str(pt))} --target {shlex.quote(target)}"
        figures = dict(verdict.figures or {})
        figures.setdefault("where", {})
        finding = {"id": fid, "target": target, "op": case.op, "dtype": case.dtype,
                   "shape_class": shape_class(case), "kind": verdict.kind,
                   "message": verdict.message.replace("\nReproduce: ", "\nReproduce (in-memory): ")
                   if verdict.message else verdict.kind,
                   "figures": {k: figures.get(k) for k in ("max_abs", "max_rel", "ratio", "where")},
                   "repro": repro, "problem": case.to_dict(), "expected": verdict.expected,
                   "signature": _signature(case, verdict)}
        with open(findings_path, "a") as fh:
            fh.write(json.dumps(finding, sort_keys=True, default=str) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        findings.append(finding)
        known.add(finding["signature"])
        group(case)["findings"][verdict.kind] += 1
        return finding

    memo: dict = {}
    try:
        stalled = 0
        while not out_of_budget():
            state["runs"] += 1
            save_state()
            run_seed = seed * 1_000_003 + state["runs"]
            failing: dict = {}  # the latest (= most shrunk) new failure of this run
            crash_shrinks = [0]
            before = state["executed"]

            # a time-boxed campaign runs Hypothesis in short chunks so the budget is checked between them:
            # once the time is spent, examples return at once but Hypothesis would keep generating them
            chunk = max(1, budget - state["executed"]) if budget is not None else 10**6
            if time_s is not None:
                chunk = min(chunk, TIME_CHUNK_EXAMPLES)

            @settings(max_examples=chunk,
                      deadline=None, derandomize=False, report_multiple_bugs=False,
                      database=DirectoryBasedExampleDatabase(str(out / ".hypothesis")),
                      suppress_health_check=list(HealthCheck), print_blob=False,
                      phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink))
            @hseed(run_seed)
            @given(strategy)
            def body(case):
                key = case.to_json()
                if key in memo:
                    ok, sig, verdict = memo[key]
                    if not ok and sig not in known:
                        failing["case"], failing["verdict"] = case, verdict
                        raise AssertionError(sig)
                    return
                if out_of_budget(extra=allowance if failing else 0):
                    return
                if failing and failing["verdict"].kind == "crash":
                    crash_shrinks[0] += 1  # each crash costs a fresh worker: shrink crashes briefly
                    if crash_shrinks[0] > CRASH_SHRINKS:
                        return
                call = _prepared_call(case, device)
                expected = expected_outcome(case, device, precision=tgt.precision_for(case.op), call=call)
                observed = observe(case)
                verdict = judge(case, expected, observed, call=call, device=device)
                state["executed"] += 1
                g = group(case)
                g["cases"] += 1
                if verdict.ok:
                    g["passes"] += 1
                if verdict.ratio is not None and verdict.ratio == verdict.ratio and verdict.ratio != float("inf"):
                    g["ratios"].append(round(float(verdict.ratio), 6))
                bar.update(1, findings=len(findings))
                if state["executed"] % 10 == 0:
                    state["elapsed_s"] = elapsed()
                    save_state()
                sig = None if verdict.ok else _signature(case, verdict)
                memo[key] = (verdict.ok, sig, verdict)
                if verdict.ok or sig in known:
                    return
                failing["case"], failing["verdict"] = case, verdict
                raise AssertionError(sig)

            try:
                body()
            except Exception:  # noqa: BLE001 - the failure itself; its minimal example is in `failing`
                pass
            if failing:
                record_finding(failing["case"], failing["verdict"], _prepared_call(failing["case"], device))
            state["elapsed_s"] = elapsed()
            save_state()
            finish()
            if state["executed"] == before and not failing:
                stalled += 1
                if stalled >= 3:  # Hypothesis has nothing new to try (tiny search space)
                    break
            else:
                stalled = 0
    finally:
        bar.close()
        if worker is not None:
            worker.close()
    state["elapsed_s"] = elapsed()
    save_state()
    return finish()
