"""The main job's first part: the references' selfcheck, in rounds until its share of the budget is used.

Round 0 runs the OpInfo sample inputs, every error input and a few random variations per (op,
dtype) (:func:`kernel_oracle.jobs.selfcheck.run_selfcheck`); later rounds take another seed and
twice the variations while the last round's pace says they fit, keeping only their random rows, so
nothing is counted twice.  Each row becomes a case of target ``selfcheck`` in the job's record, and
a failed row a finding whose repro is the ``kernel-oracle selfcheck`` command that shows it.
"""

from __future__ import annotations

import threading
import time
import traceback

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


def run_selfcheck_part(record: dict, device: str, seed: int, time_s: float, log) -> None:
    """Run selfcheck rounds on ``device`` for about ``time_s`` seconds into ``record`` (its groups,
    findings and ``summary.selfcheck``); ``log(text)`` reports progress."""
    from kernel_oracle.harness.schema import add_target

    try:
        from kernel_oracle.jobs.selfcheck import run_selfcheck
    except Exception as exc:  # noqa: BLE001 - reported, never a silent pass
        part_failed(record, f"selfcheck unavailable: {reason(exc)}")
        add_target(record, name="selfcheck", available=False, reason=f"import failed: {reason(exc)}")
        log(f"selfcheck unavailable: {reason(exc)}")
        return
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
            part_failed(record, f"selfcheck failed: {reason(exc)}")
            record["targets"][-1]["reason"] = f"run failed: {reason(exc)}"
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
