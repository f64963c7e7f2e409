"""``kernel-oracle run``: the main job (the README's first command).

Note [The main job]
-------------------
On a fresh machine, within ``--time-budget`` seconds on the best device there is:

1. **device**: ``--device auto`` picks CUDA when torch sees a GPU, else the CPU, where the Triton
   kernels run under the interpreter: ``TRITON_INTERPRET=1`` is set here *before* anything imports a
   kernel module (this module imports nothing heavy at import time: the CLI imports every subcommand
   to build its parser);
2. **selfcheck** (about :data:`SELFCHECK_SHARE` of the budget): the references against independent
   formulations (:func:`kernel_oracle.selfcheck.run_selfcheck`), as target ``selfcheck``;
3. **campaigns**: one fuzz campaign (:func:`fuzz.campaign.run_campaign`) per available target x op
   family (targets from :mod:`fuzz.targets`), the rest of the budget shared equally, each pair
   getting what the earlier ones left;
4. **report**: one record of kind ``"main"`` folding all of it in (:func:`reports.schema.merge`),
   written as ``<out>/latest.{json,md,html}`` (overwritten each run) and
   ``<out>/history/<UTC time>.json`` (never overwritten); each campaign keeps its own files under
   ``<out>/runs/<UTC time>/`` (the findings' repro commands point there).

A part that cannot run (an import fails, a campaign raises) is never a silent pass: the reason goes
into the record's notes, the report shows it, and the exit status is 1, as for findings.  An
unavailable *target* (SGLang not installed, no GPU for a GPU-only peer) is not a failure: the targets
table says why it was skipped.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Optional

__all__ = ["DEFAULT_BUDGET_S", "SELFCHECK_SHARE", "add_arguments", "main", "run_main_job"]

# seconds: a few minutes on the CPU interpreter; a GPU gets through far more cases in the same time
DEFAULT_BUDGET_S = {"cpu": 180.0, "cuda": 300.0}
SELFCHECK_SHARE = 0.15
# selfcheck cases per second of its share, a first estimate (pure torch, float64, small shapes)
_SELFCHECK_RATE = {"cpu": 2.0, "cuda": 10.0}
# kept back from the campaigns for writing and rendering the report (matplotlib start-up included)
REPORT_RESERVE_S = 6.0
FALLBACK_TARGETS = ("reference", "triton")
FAMILIES = ("lora", "vision")


def add_arguments(parser: argparse.ArgumentParser) -> None:
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


# ---- part 1: selfcheck --------------------------------------------------------------------------
def _selfcheck_shape_class(row: dict) -> str:
    case = row.get("case")
    if isinstance(case, str) and case:
        return case if len(case) <= 48 else case[:45] + "..."
    return str(row.get("family") or "-")


def run_selfcheck_part(record: dict, device: str, seed: int, time_s: float, log) -> None:
    from reports.schema import add_finding, add_group, add_note, add_target

    try:
        from kernel_oracle.selfcheck import run_selfcheck
    except Exception as exc:  # noqa: BLE001 - reported, never a silent pass
        add_note(record, f"selfcheck unavailable: {_reason(exc)}")
        add_target(record, name="selfcheck", available=False, reason=f"import failed: {_reason(exc)}")
        log(f"selfcheck unavailable: {_reason(exc)}")
        return
    cases = max(4, int(time_s * _SELFCHECK_RATE.get(device, 2.0)))
    log(f"selfcheck: {cases} cases per op, seed {seed}")
    started = time.monotonic()
    try:
        rows = list(run_selfcheck(device=device, cases=cases, seed=seed))
    except Exception as exc:  # noqa: BLE001
        add_note(record, f"selfcheck failed: {_reason(exc)}")
        add_target(record, name="selfcheck", available=True, reason=f"run failed: {_reason(exc)}")
        log(f"selfcheck failed:\n{traceback.format_exc()}")
        return
    add_target(record, name="selfcheck", available=True, precision="ieee",
               reason="the references against independent formulations (kernel_oracle.independent)")
    n_fail = 0
    for row in rows:
        op, dtype = str(row.get("op")), str(row.get("dtype"))
        shape_class = _selfcheck_shape_class(row)
        ratio = row.get("ratio")
        ratios = [float(ratio)] if isinstance(ratio, (int, float)) else []
        passed = bool(row.get("passed"))
        add_group(record, target="selfcheck", op=op, dtype=dtype, shape_class=shape_class, cases=1,
                  passes=int(passed), findings=None if passed else {"mismatch": 1}, ratios=ratios)
        if not passed:
            n_fail += 1
            add_finding(record, {
                "id": f"selfcheck-{n_fail:04d}", "target": "selfcheck", "op": op, "dtype": dtype,
                "shape_class": shape_class, "kind": "mismatch",
                "message": str(row.get("message") or "reference disagrees with its independent formulation"),
                "figures": {k: row.get(k) for k in ("err", "allowed", "ratio") if row.get(k) is not None},
                "repro": f"kernel-oracle selfcheck --device {device} --seed {seed}",
                "problem": row.get("case") if isinstance(row.get("case"), dict) else None,
            })
    record["summary"]["selfcheck"] = {"rows": len(rows), "failed": n_fail,
                                      "seconds": round(time.monotonic() - started, 1)}
    log(f"selfcheck: {len(rows)} rows, {n_fail} failed, {time.monotonic() - started:.1f}s")


# ---- part 2: campaigns --------------------------------------------------------------------------
def _discover_targets(record: dict, device: str, specs: Optional[list], log) -> list:
    """[(name, Target | None, families)] of the available targets; unavailable ones go to the table."""
    from reports.schema import add_note, add_target

    try:
        from fuzz.targets import BUILTIN_TARGETS, resolve_target
    except Exception as exc:  # noqa: BLE001
        add_note(record, f"fuzz.targets unavailable ({_reason(exc)}): fuzzing {list(specs or FALLBACK_TARGETS)} "
                         f"without availability checks")
        return [(name, None, FAMILIES) for name in (specs or FALLBACK_TARGETS)]
    out = []
    for spec in specs or BUILTIN_TARGETS:
        try:
            t = resolve_target(spec, device)
        except Exception as exc:  # noqa: BLE001 - a bad user spec
            add_note(record, f"target {spec!r} could not be resolved: {_reason(exc)}")
            add_target(record, name=spec, available=False, reason=_reason(exc))
            continue
        row = t.to_record() if hasattr(t, "to_record") else {"name": spec, "available": t.available}
        add_target(record, name=row["name"], available=row.get("available", True), reason=row.get("reason") or None,
                   entry_points=row.get("entry_points"), precision=row.get("precision"))
        for k in ("strict", "excluded_dtypes", "missing"):  # extra columns the report shows as a reason
            if row.get(k):
                record["targets"][-1][k] = row[k]
        if not t.available:
            log(f"target {spec}: unavailable ({t.reason})")
            if specs:  # asked for by name: say so loudly
                add_note(record, f"target {spec!r} is unavailable: {t.reason}")
            continue
        families = tuple(f for f in FAMILIES if t.ops(f))
        out.append((spec, t, families))
    return out


def _campaign(target: str, op: str, *, time_s: float, seed: int, device: str, out_dir: Path) -> dict:
    from fuzz.campaign import run_campaign

    return run_campaign(target=target, op=op, time_s=time_s, seed=seed, device=device, out_dir=str(out_dir),
                        progress=False)


def run_campaign_part(record: dict, device: str, seed: int, deadline: float, run_dir: Path,
                      specs: Optional[list], families: tuple, log) -> None:
    from reports.schema import add_note, merge

    try:
        import fuzz.campaign  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - reported, never a silent pass
        add_note(record, f"fuzz campaign unavailable: {_reason(exc)}")
        log(f"fuzz campaign unavailable: {_reason(exc)}")
        return
    targets = _discover_targets(record, device, specs, log)
    pairs = [(name, fam) for name, _, fams in targets for fam in fams if fam in families]
    if not pairs:
        add_note(record, "no available target x family pair to fuzz")
        return
    campaigns = record["summary"].setdefault("campaigns", [])
    for i, (name, fam) in enumerate(pairs):
        left = deadline - time.monotonic()
        share = left / (len(pairs) - i)
        if share < 1.0:
            skipped = [f"{n} x {f}" for n, f in pairs[i:]]
            add_note(record, f"time budget exhausted: campaigns not run for {', '.join(skipped)}; "
                             f"pass a larger --time-budget")
            log(f"budget exhausted; skipped {skipped}")
            return
        safe = name.replace(":", "_").replace("/", "_")
        out_dir = run_dir / f"campaign-{safe}-{fam}"
        log(f"campaign {name} x {fam}: {share:.0f}s")
        started = time.monotonic()
        try:
            rec = _campaign(name, fam, time_s=share, seed=seed, device=device, out_dir=out_dir)
            merge(record, rec, seeds_key=f"campaign:{name}:{fam}")
        except Exception as exc:  # noqa: BLE001
            add_note(record, f"campaign {name} x {fam} failed: {_reason(exc)}")
            log(f"campaign {name} x {fam} failed:\n{traceback.format_exc()}")
            campaigns.append({"target": name, "family": fam, "error": _reason(exc)})
            continue
        took = time.monotonic() - started
        n_cases = sum(g["cases"] for g in rec.get("groups", []))
        campaigns.append({"target": name, "family": fam, "time_s": round(share, 1), "took_s": round(took, 1),
                          "cases": n_cases, "findings": len(rec.get("findings", [])), "out_dir": str(out_dir)})
        log(f"campaign {name} x {fam}: {n_cases} cases, {len(rec.get('findings', []))} findings, {took:.1f}s")


# ---- the job ------------------------------------------------------------------------------------
def _utc_stamp() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")[:-4] + "Z"


def run_main_job(*, device: str = "auto", time_budget: Optional[float] = None, seed: int = 0,
                 out: str | os.PathLike = "reports/out", targets: Optional[list] = None,
                 families: tuple = FAMILIES, selfcheck: bool = True, quiet: bool = False) -> dict:
    """Run everything and write the reports; returns ``{"record", "json", "md", "html", "history"}``."""
    device = _resolve_device(device)
    if device == "cpu":
        # before anything imports a kernel module (Note [The main job])
        os.environ["TRITON_INTERPRET"] = "1"
    budget = float(time_budget if time_budget is not None else DEFAULT_BUDGET_S[device])
    if budget <= 0:
        raise ValueError(f"--time-budget {budget:g}: pass a positive number of seconds")
    t0 = time.monotonic()
    deadline = t0 + max(budget - REPORT_RESERVE_S, budget * 0.5)

    def log(text: str) -> None:
        _log(quiet, t0, budget, text)

    from reports.schema import add_note, new_record, save

    stamp = _utc_stamp()
    out = Path(out)
    run_dir = out / "runs" / stamp
    record = new_record("main", seeds={"seed": seed}, device=device)
    record["summary"] = {"time_budget_s": budget, "device": device, "run_dir": str(run_dir),
                         "triton_interpret": os.environ.get("TRITON_INTERPRET") == "1"}
    log(f"device {device}" + (" (Triton interpreter)" if device == "cpu" else "") + f", budget {budget:g}s")

    if selfcheck:
        run_selfcheck_part(record, device, seed, budget * SELFCHECK_SHARE, log)
    else:
        record["summary"]["selfcheck"] = "skipped (--no-selfcheck)"
    run_campaign_part(record, device, seed, deadline, run_dir, targets, families, log)

    record["summary"]["duration_s"] = round(time.monotonic() - t0, 1)
    if not record["groups"] and not record["notes"]:
        add_note(record, "nothing ran: no cases in this record")
    out.mkdir(parents=True, exist_ok=True)
    history = save(record, out / "history" / f"{stamp}.json")
    latest = save(record, out / "latest.json", overwrite=True)
    from reports.cli_report import write_reports

    md, html = write_reports(latest, out, name="latest")
    log(f"done in {time.monotonic() - t0:.1f}s")
    return {"record": record, "json": latest, "md": md, "html": html, "history": history}


def main(args: argparse.Namespace) -> int:
    try:
        families = tuple(f.strip() for f in args.families.split(",") if f.strip())
        bad = [f for f in families if f not in FAMILIES]
        if bad or not families:
            raise ValueError(f"--families {args.families!r}: the only valid values are {list(FAMILIES)}")
        targets = [t.strip() for t in args.targets.split(",") if t.strip()] if args.targets else None
        device = _resolve_device(args.device)
        if args.time_budget is not None and not args.time_budget > 0:
            raise ValueError(f"--time-budget {args.time_budget:g}: pass a positive number of seconds")
    except ValueError as exc:  # usage errors only: everything above runs before any work
        print(f"kernel-oracle run: {exc}", file=sys.stderr)
        return 2
    result = run_main_job(device=device, time_budget=args.time_budget, seed=args.seed, out=args.out,
                          targets=targets, families=families, selfcheck=not args.no_selfcheck, quiet=args.quiet)
    rec = result["record"]
    cases = sum(g["cases"] for g in rec["groups"])
    passes = sum(g["passes"] for g in rec["groups"])
    print(f"{cases} cases, {passes} passed, {len(rec['findings'])} findings, {len(rec['notes'])} notes")
    for note in rec["notes"]:
        print(f"  note: {note}")
    print(f"JSON:     {result['json']}")
    print(f"Markdown: {result['md']}")
    print(f"HTML:     {result['html']}")
    print(f"history:  {result['history']}")
    return 1 if rec["findings"] or rec["notes"] else 0
