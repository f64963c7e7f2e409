"""What a target did with malformed metadata it accepted: the consequence classes.

Note [Malformed consequences]
-----------------------------
A target without our strict validation (``Target.strict == False``: SGLang's releases, a module
without ``KERNEL_ORACLE_STRICT``) is judged on upstream's contracts: malformed metadata that it
accepts is no finding by itself.  What it did with it is: :func:`consequence` compares its output
with the float64 reference of the *valid part* of the input and names one class:

* ``rejected``: it raised: for a target without strict validation any error passes (no upstream
  contract names one for malformed metadata: ``harness.check._judge_error``);
* ``harmless``: only the region the malformation leaves undefined differs;
* ``rows dropped``: rows the valid part defines were left unwritten: NaN (the poison, or a fresh
  buffer's garbage read as NaN), bit-identical to the in-place output's rows before the call, or
  all zero where the reference is not;
* ``defined rows changed``: rows the valid part defines hold other values (past the tolerance
  of :func:`reference.tolerance.compare`);
* ``breaks the CUDA context``: a CUDA error of the target's call (an illegal or misaligned address, an
  illegal instruction) left the worker's context broken (Note [A broken device context] in
  :mod:`fuzz.worker`).  Upstream trusts its metadata and has no contract for it, so for a lenient
  target this is a validation gap that says what accepting such metadata costs a server (every later
  CUDA call of the process fails), not a finding; a campaign that has seen one mutation kind break the
  context twice in an op stops drawing it there (:mod:`fuzz.known_avoidance`), since each costs a new
  worker;
* ``out of bounds``: the worker process died on it (a segfault), or on CUDA the
  compute-sanitizer memcheck of its repro reports an access (``fuzz --memcheck``: after the campaign,
  :func:`memcheck` runs the smallest example of each validation-gap row, and a row it reports
  becomes an out-of-bounds finding; an access that neither crashes nor changes a defined row shows
  only there).

``defined rows changed`` and ``out of bounds`` are findings for every target (:data:`FINDING_CLASSES`);
``harmless``, ``rows dropped`` and ``breaks the CUDA context`` are validation gaps of a lenient target
(an informational table).

The valid part.  The reference runs on the case's problem *without* its mutation; of its output,
the valid part keeps the rows of the segments the mutation left intact:

* LoRA kinds that break one segment's metadata (``slot_out_of_range``, ``negative_slot``:
  the segment's weight index; ``seg_indptr_decreasing``, ``seg_indptr_past_rows``,
  ``seg_indptr_negative_start``: its bounds): a segment is intact when its weight index and both
  its ``seg_indptr`` bounds are unchanged; the valid part is the rows the unmutated routing gives
  the intact segments, less every row inside a broken segment's mutated bounds, mapped through the
  permutation when there is one (a kernel may legitimately write there);
* every other kind (``max_len_too_small``, ``seg_lens_mismatch``, ``bad_max_len``: a count every
  segment's tiling uses; ``permutation_*``, ``negative_rank``, ``metadata_dtype``,
  ``short_metadata``, wrong data shapes or dtypes, and the vision and csgmv kinds, whose offsets and
  lengths move every later sequence's placement) has no valid part that a correct kernel must keep:
  such a case is ``harmless`` unless it crashes.

Each family's record names its valid part (``Family.valid_part``: a :class:`ValidPart`, the LoRA one in
:mod:`harness.malformed_lora`); a family without one has none for any kind.
"""

from __future__ import annotations

import shlex
import shutil
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from kernel_oracle.harness.family import get_family

__all__ = ["BROKEN_CONTEXT", "CLASSES", "breaks_context", "FINDING_CLASSES", "GAP_CLASSES", "GapTable", "MEMCHECK_TIMEOUT_S",
           "case_elements", "gap_lines", "in_gap_table",
           "lenient_line", "memcheck", "ValidPart", "consequence", "sanitizer_command",
           "valid_part", "valid_rows"]

BROKEN_CONTEXT = "breaks the CUDA context"
CLASSES = ("rejected", "harmless", "rows dropped", BROKEN_CONTEXT, "defined rows changed", "out of bounds")
FINDING_CLASSES = ("defined rows changed", "out of bounds")
GAP_CLASSES = ("harmless", "rows dropped", BROKEN_CONTEXT)


@dataclass(frozen=True)
class ValidPart:
    """A family's valid part of a malformed case (its record's ``valid_part``): ``kinds``, the mutation kinds
    that leave one; ``rows(call, clean_call)``, the bool mask over the output's rows the valid part defines
    (``clean_call``: the case's call without its mutation); ``neighbours(problem, call, clean_call)``, the
    valid problems nearest to the malformed one (Note [One defect through malformed input] in
    :mod:`harness.through_malformed`), the problem itself first."""

    kinds: frozenset
    rows: Callable
    neighbours: Callable


def valid_part(case) -> Optional[ValidPart]:
    """The :class:`ValidPart` of ``case``'s family when its mutation leaves one, else None."""
    if case.mutation is None:
        return None
    part = get_family(case.family).resolve("valid_part")
    return part if part is not None and case.mutation.kind in part.kinds else None


def valid_rows(case, call, clean_call) -> Optional[torch.Tensor]:
    """The bool mask over the output's rows of the valid part (``clean_call``: the case's call
    without its mutation), or None when the malformation has none (Note [Malformed consequences])."""
    part = valid_part(case)
    return None if part is None else part.rows(call, clean_call)


def breaks_context(observed) -> bool:
    """Whether a crash observation is a CUDA context the target's call broke (the worker answered
    ``device-lost``: :meth:`fuzz.worker.Worker.check`), not a dead process."""
    return observed.kind == "crash" and "left the CUDA context broken" in (observed.message or "")


def in_gap_table(verdict, strict: Optional[bool], with_malformed: bool = False) -> bool:
    """Whether a failing ``verdict`` is a row of the validation-gap table rather than a finding: accepted
    malformed metadata whose consequence is ``harmless`` or ``rows dropped``, on a target without strict
    validation (``strict`` False), unless ``with_malformed`` counts every gap.  The one rule of
    ``kernel-oracle fuzz`` and of the pytest plugin's properties."""
    return (not verdict.ok and verdict.kind == "validation-gap" and verdict.consequence in GAP_CLASSES
            and strict is False and not with_malformed)


def consequence(case, call, observed, clean_call, reference) -> tuple:
    """``(class, rows text or None)`` of an accepted malformed case (Note [Malformed consequences]);
    ``observed``: the target's :class:`~harness.check.Observed` on ``call``; ``clean_call``: the call
    without its mutation (None where there is no valid part), ``reference()``: its expected
    :class:`~harness.check.ExpectedOutcome`."""
    if observed.kind == "crash":
        return "out of bounds", None
    if observed.kind == "raise":
        return "rejected", None
    mask = valid_rows(case, call, clean_call) if clean_call is not None else None
    if mask is None or observed.output is None:
        return "harmless", None
    ref = reference()
    if ref.kind != "result" or not bool(mask.any()):
        return "harmless", None
    actual = observed.output.detach().to("cpu", torch.float64)
    value = ref.value.detach().to("cpu", torch.float64)
    defined = ref.defined.to("cpu") if ref.defined is not None else torch.ones_like(value, dtype=torch.bool)
    defined = defined.expand_as(value) if defined.shape != value.shape else defined
    before = call.args[call.inplace].detach().to("cpu", torch.float64) if call.inplace is not None else None
    # a corrupted row is off by O(1) (another slot's weights, garbage); a right one by the target's own
    # rounding, which in fp16 / bf16 / TF32 is far above 1e-4: only a float64 output is held tighter
    tol = 1e-6 if observed.output.dtype == torch.float64 else 1e-2
    dropped, changed = [], []
    for r in torch.nonzero(mask).flatten().tolist():
        d = defined[r]
        if not bool(d.any()):
            continue
        a, v = actual[r][d], value[r][d]
        if bool(torch.isnan(a).any()) or (before is not None and torch.equal(a, before[r][d])
                                          and not torch.allclose(a, v, rtol=tol, atol=tol)) \
                or (bool((a == 0).all()) and not bool((v == 0).all())):
            dropped.append(r)
        elif not torch.allclose(a, v, rtol=tol, atol=tol * (1 + float(v.abs().max()))):
            changed.append(r)
    if changed:
        return "defined rows changed", f"rows {changed[:8]}" + (f" (+{len(changed) - 8})" if len(changed) > 8 else "")
    if dropped:
        return "rows dropped", f"rows {dropped[:8]}" + (f" (+{len(dropped) - 8})" if len(dropped) > 8 else "")
    return "harmless", None


def sanitizer_command(repro: str, device: str) -> Optional[list]:
    """The ``compute-sanitizer --tool memcheck`` command line of a repro command on CUDA, or None
    where it cannot run (no CUDA device, no compute-sanitizer on PATH): on the CPU only a crash is
    ``out of bounds``."""
    tool = shutil.which("compute-sanitizer")
    if device != "cuda" or tool is None or not repro:
        return None
    return [tool, "--tool", "memcheck", "--error-exitcode", "99", *shlex.split(repro)]


def lenient_line(target: str, with_malformed: bool) -> str:
    """The one console line saying how a target without strict validation is judged."""
    if with_malformed:
        return f"{target} has no strict validation: accepted malformed metadata counts as findings (--with-malformed)"
    return (f"{target} has no strict validation: judged on upstream contracts; accepted malformed metadata is listed "
            f"as validation gaps (pass --with-malformed to count them as findings)")


class GapTable:
    """The validation-gap table of one campaign: one row per op x malformation x consequence."""

    def __init__(self) -> None:
        self.rows: dict = {}

    def add(self, case, verdict, target: str) -> None:
        """Count ``case`` in its row (op x malformation x consequence); the row's example is its smallest
        case (:func:`case_elements`), the one a memcheck runs."""
        key = (case.op, case.mutation.kind if case.mutation else "-", verdict.consequence)
        row = self.rows.setdefault(key, {"dtypes": set(), "count": 0})
        row["dtypes"].add(case.dtype)
        row["count"] += 1
        if "case" not in row or case_elements(case) < case_elements(row["case"]):
            row.update(case=case, verdict=verdict, rows=verdict.rows,
                       example=f"kernel-oracle repro --case-json {shlex.quote(case.to_json())} --targets {shlex.quote(target)}")

    def pop(self, key) -> dict:
        """Remove a row (it became a finding); returns it."""
        return self.rows.pop(key)

    def to_list(self) -> list:
        return [{"op": op, "malformation": kind, "consequence": cls, "dtypes": sorted(r["dtypes"]),
                 "count": r["count"], "example": r["example"], "rows": r["rows"]}
                for (op, kind, cls), r in sorted(self.rows.items())]


def case_elements(case) -> int:
    """A case's size for picking the smallest example: its rows (tokens) times heads times the widest
    head or rank dimension."""
    return case.problem.example_size()  # each family's problem knows its own


# seconds one memcheck run may take (python and torch start-up under the sanitizer, one call)
MEMCHECK_TIMEOUT_S = 180.0


def memcheck(command: list, timeout_s: float = MEMCHECK_TIMEOUT_S) -> tuple:
    """Run ``command`` (from :func:`sanitizer_command`); ``("clean" | "access" | "failed", summary)``:
    ``access`` when memcheck reports an error (exit 99), with its first error line and its summary."""
    import subprocess

    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return "failed", f"memcheck did not finish in {timeout_s:g} s"
    except OSError as exc:
        return "failed", f"memcheck could not start: {exc.strerror or exc}"
    lines = [ln.strip("= ").strip() for ln in (done.stdout + done.stderr).splitlines() if ln.startswith("=========")]
    errors = [ln for ln in lines if ln and not ln.startswith(("COMPUTE-SANITIZER", "ERROR SUMMARY"))]
    summary = next((ln for ln in lines if ln.startswith("ERROR SUMMARY")), "")
    if done.returncode == 99:
        return "access", "; ".join(x for x in (errors[0] if errors else "", summary) if x)
    return "clean", summary


def gap_lines(gaps: list, limit: int = 6) -> list:
    """A few console lines of a validation-gap table (empty for none)."""
    if not gaps:
        return []
    lines = [f"validation gaps (accepted malformed metadata, informational): {sum(g['count'] for g in gaps)} cases"]
    for g in gaps[:limit]:
        lines.append(f"  {g['op']} {g['malformation']}: {g['consequence']}, {g['count']}x "
                     f"[{','.join(g['dtypes'])}]" + (f" {g['rows']}" if g.get("rows") else ""))
    if len(gaps) > limit:
        lines.append(f"  ... {len(gaps) - limit} more rows in summary.json (validation_gaps)")
    return lines
