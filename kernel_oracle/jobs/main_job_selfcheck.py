"""The main job's first part: the references' selfcheck, in rounds until its share of the budget is used.

Round 0 runs the OpInfo sample inputs, every error input and a few random variations per (op,
dtype) (:func:`kernel_oracle.jobs.selfcheck.run_selfcheck`); later rounds take another seed and
twice the variations while the last round's pace says they fit, keeping only their random rows, so
nothing is counted twice.  Each row becomes a case of target ``selfcheck`` in the job's record, and
a failed row a finding whose repro is the ``kernel-oracle selfcheck`` command that shows it.

A round runs whole past the share when it must (round 0 is what the references' trust rests on), but
with ``stop_at`` it stops between two checks at that time: on a loaded machine round 0 can take many
times its share, and the campaigns after it would get nothing.  A round 0 stopped so is a failed part
(the references it did not reach went unchecked); a later round stopped so keeps its rows.

On the CPU the checks run on one intra-op thread of torch: their tensors are small, so a second thread
only adds waiting, which a busy machine makes long (measured on 2 cores, round 0 with one random case:
0.7 s on one thread or two when quiet, twice the CPU time on two; beside four busy processes 1.7-1.9 s
on one thread, 6-29 s on two).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
import traceback
from typing import Optional

from kernel_oracle.jobs.main_job_record import part_failed, reason

__all__ = ["SELFCHECK_FIRST_CASES", "SELFCHECK_MAX_CASES", "SELFCHECK_MAX_ROUNDS", "SelfcheckBeside",
           "run_selfcheck_part"]

# selfcheck rounds: random variations per (op, dtype) in the first round, doubling while time allows
SELFCHECK_FIRST_CASES = 4
SELFCHECK_MAX_CASES = 256
SELFCHECK_MAX_ROUNDS = 8


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


def run_selfcheck_part(record: dict, device: str, seed: int, time_s: float, log,
                       stop_at: Optional[float] = None) -> None:
    """Run selfcheck rounds on ``device`` for about ``time_s`` seconds into ``record`` (its groups,
    findings and ``summary.selfcheck``); ``log(text)`` reports progress; ``stop_at``
    (``time.monotonic()``): a round stops at the first check that ends past it (None: every round
    runs whole)."""
    from kernel_oracle.harness.schema import add_target

    try:
        from kernel_oracle.jobs.selfcheck import iter_selfcheck
    except Exception as exc:  # noqa: BLE001 - reported, never a silent pass
        part_failed(record, f"selfcheck unavailable: {reason(exc)}")
        add_target(record, name="selfcheck", available=False, reason=f"import failed: {reason(exc)}")
        log(f"selfcheck unavailable: {reason(exc)}")
        return
    started = time.monotonic()
    deadline = started + time_s
    rounds, n_fail, n_rows = [], 0, 0
    cases = SELFCHECK_FIRST_CASES if time_s >= 15 else 1  # a round runs whole unless stop_at: small first
    add_target(record, name="selfcheck", available=True, precision="ieee",
               reason="the references against independent formulations (kernel_oracle.independent)")
    while True:
        round_seed = seed + 1000 * len(rounds)
        log(f"selfcheck round {len(rounds)}: {cases} random cases per (op, dtype), seed {round_seed}")
        t_round = time.monotonic()
        try:
            with _one_thread_on_cpu(device):
                rows, stopped = _until(iter_selfcheck(device=device, cases=cases, seed=round_seed),
                                       math.inf if stop_at is None else stop_at)
        except Exception as exc:  # noqa: BLE001
            part_failed(record, f"selfcheck failed: {reason(exc)}")
            record["targets"][-1]["reason"] = f"run failed: {reason(exc)}"
            log(f"selfcheck failed:\n{traceback.format_exc()}")
            return
        took = time.monotonic() - t_round
        if stopped and not rounds:
            last = rows[-1] if rows else {}
            part_failed(record, f"selfcheck stopped at {took:.0f}s (its share {time_s:.0f}s) with its first round "
                                f"unfinished after {len(rows)} checks ({last.get('op', '-')} {last.get('dtype', '-')}"
                                f"): the references past them went unchecked, leaving the campaigns their time; "
                                f"pass a larger --time")
            log(record["notes"][-1])
        if rounds:
            rows = [r for r in rows if str(r.get("case") or "").startswith("random-")]
        rounds.append({"seed": round_seed, "cases": cases, "rows": len(rows), "seconds": round(took, 2)})
        if stopped:
            rounds[-1]["stopped"] = True
        n_rows += len(rows)
        for row in rows:
            n_fail += _selfcheck_row(record, row, device, cases, round_seed, n_fail)
        left = deadline - time.monotonic()
        if stopped or left < 2 * took or len(rounds) >= SELFCHECK_MAX_ROUNDS:
            break
        cases = min(cases * 2, SELFCHECK_MAX_CASES)
    record["summary"]["selfcheck"] = {"rows": n_rows, "failed": n_fail, "rounds": rounds,
                                      "seconds": round(time.monotonic() - started, 1)}
    log(f"selfcheck: {n_rows} rows in {len(rounds)} round(s), {n_fail} failed, {time.monotonic() - started:.1f}s")


def _until(rows, stop_at: float) -> tuple[list, bool]:
    """The rows of the iterable ``rows`` until ``time.monotonic()`` passes ``stop_at`` (checked after
    each row; one more row tells whether any were left), and whether it stopped before the end."""
    it, out = iter(rows), []
    for row in it:
        out.append(row)
        if time.monotonic() >= stop_at:
            more = next(it, None)
            if more is None:
                return out, False
            out.append(more)
            return out, True
    return out, False


@contextlib.contextmanager
def _one_thread_on_cpu(device: str):
    """torch's intra-op threads at 1 while the checks run on the CPU (the module's docstring says why),
    then back to what they were."""
    if device != "cpu":
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _selfcheck_row(record: dict, row: dict, device: str, cases: int, seed: int, n_fail: int) -> int:
    """Add one selfcheck row to its group (and as a finding when it failed); returns 1 if it failed."""
    from kernel_oracle.harness.schema import SELFCHECK_TARGET, add_finding, add_group

    op, dtype, case = str(row.get("op")), str(row.get("dtype")), str(row.get("case") or "")
    shape_class = _selfcheck_shape_class(row)
    ratio = row.get("ratio")
    ratios = [float(ratio)] if isinstance(ratio, (int, float)) else []
    passed = bool(row.get("passed"))
    add_group(record, target=SELFCHECK_TARGET, op=op, dtype=dtype, shape_class=shape_class, cases=1,
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


class SelfcheckBeside:
    """:func:`run_selfcheck_part` in a thread of this process, started now, into a record of its own
    (the campaigns' part writes the job's record meanwhile); :meth:`fold_into` waits for it and puts
    its targets, groups and findings first in the job's record, as where it runs first."""

    def __init__(self, device: str, seed: int, time_s: float, log) -> None:
        from kernel_oracle.harness.schema import new_record

        self.part = new_record("main", device=device)
        self.part["summary"] = {}
        self.thread = threading.Thread(target=self._run, args=(device, seed, time_s, log), name="selfcheck",
                                       daemon=True)  # an interrupted job does not wait for it
        self.thread.start()

    def _run(self, device: str, seed: int, time_s: float, log) -> None:
        try:
            run_selfcheck_part(self.part, device, seed, time_s, log)
        except Exception as exc:  # noqa: BLE001 - reported, never a silent pass
            part_failed(self.part, f"selfcheck failed: {reason(exc)}")

    def fold_into(self, record: dict) -> None:
        self.thread.join()
        part = self.part
        for key in ("targets", "groups", "findings"):
            record[key][:0] = part[key]
        record["notes"][:0] = part["notes"]
        failed = part["summary"].pop("failed_parts", [])
        record["summary"]["failed_parts"] = failed + record["summary"].get("failed_parts", [])
        if not record["summary"]["failed_parts"]:
            del record["summary"]["failed_parts"]
        record["summary"].update(part["summary"])
