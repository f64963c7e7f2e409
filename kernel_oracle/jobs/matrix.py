"""Several releases side by side, each finding bucket per release (``kernel-oracle matrix``).

Note [Release matrix]
---------------------
``kernel-oracle matrix --targets sglang==0.5.12,sglang==0.5.23`` runs, for each distinct code, one
fuzz campaign (:func:`fuzz.campaign.run_campaign`, the same strategies and seed for every release)
and the real-bug corpus entries of that target's spec name (:mod:`kernel_oracle.jobs.bug_corpus`), then folds
it all into one record of kind ``"main"`` with a ``release_matrix`` section that the Markdown and
HTML reports render as a table: one row per finding bucket (:mod:`harness.buckets`, one root
cause, whatever release, dtype or shape class it shows in), one column per range of releases that
run the same code, the failing-case count in each cell (``-``: that range did not run), and the
derived **introduced in** (the first column that has the bucket) and **fixed in** (the column after
the last one that has it); a column whose campaign missed a bucket but fails on a replay of its
example has it (Note [Replayed absences] in :mod:`kernel_oracle.jobs.matrix_replay`).  A wrong-values
bucket names its op (a mismatch has no frame to point at); buckets of one kind in several ops that
fail in exactly the same columns, and not in every column that ran, with examples that need the same
config flags, are one row naming those ops: one change of the file introduced them and one removed
them (SGLang 0.5.12's stale host ints, PR #28371, fail every kv_b op from 0.5.12 to 0.5.13.post1, each
example needing ``cuda_graph``; 0.5.13's cuBLAS paths that apply slot 0 to every slot need none, so a
stale-count failure met in the same columns stays a row of its own).  A bucket's target frame is
compared by file and function (``kv_b_lora_absorbed:_max_segment_len``), since releases move their
modules.

Release identity: before anything runs, :func:`~kernel_oracle.fuzz.targets.sglang.release_identity`
hashes the code each spec's campaign would run (the kv_b kernel file and its helpers, or the vision
wrapper's class, metadata type and helper, with the keywords its callers pass; the switches as the
file reads them under the spec's configuration).  Specs of one *lane* (the same name, op family and
configuration) that are consecutive in version order and have the same identity are one column,
labelled as a range (``sglang==0.5.16-0.5.21``) and tested once, on the oldest; a column whose
identity another column already ran (the same code in another lane, e.g. ``@pdl=off`` where the
hardware has no PDL) reuses that campaign and says so.  So "introduced in" and "fixed in" can only
fall where the code changed, and sampling noise between byte-identical releases never reads as
history.  History is per lane: ``history`` holds each lane's introduced / fixed columns, and the
row's own ``introduced_in`` / ``fixed_in`` are those of the first lane that has the bucket.

``--op lora,vision`` runs both families (columns per family; a row counts only in its family's
columns); :func:`expand_targets` turns ``--releases all`` into every release whose wheel is there
and ``--configurations all`` into every configuration a target knows (Note [SGLang switches]).
Campaigns draw malformed metadata too, and judge what a release accepts by its consequence as
``kernel-oracle fuzz`` does (Note [Malformed consequences]): rows the valid part of the batch defines
changed, or memory read or written out of bounds, are findings (rows of the matrix); a rejected or
harmless input is a validation gap, counted per column (``validation_gaps``), not a row, unless
``--with-malformed`` counts every accepted input as a finding.  A worker whose CUDA context an
out-of-bounds access broke is replaced (Note [A broken device context]).  A
campaign is a random search: a bucket absent from a release within its budget is evidence, not
proof (so every absence is replayed before it reads as a fix); the corpus rows are exact.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import re
from pathlib import Path
from typing import Optional

from kernel_oracle.fuzz.targets.flashinfer_engines import ENGINE_RELEASES
from kernel_oracle.jobs.matrix_columns import REGRESSION_CASES, case_split

__all__ = ["CONFIGURATION_VARIANTS", "Column", "build_matrix", "expand_targets", "plan_columns",
           "release_key", "run_matrix", "runs_dir"]

# every configuration of a target name that selects its own code path (Note [SGLang switches]); the
# identities merge those that do not differ on a given machine (pdl=on where PDL is the default)
CONFIGURATION_VARIANTS = {"sglang-trt": ("", "lora_opti=on", "lora_opti=on,cublas=on", "lora_opti=on,cublas_kv_b=on",
                                         "lora_opti=off,cublas=on", "pdl=off", "pdl=on"),
                          "sglang-v2": ("", "pdl=off", "pdl=on"),
                          # Note [csgmv run identity]: 0.5.22+ read both switches, earlier releases neither
                          "sglang-csgmv": ("", "split_k=on", "deterministic=on"),
                          "flashinfer-cudnn": tuple(f"engine={v}" for v in ENGINE_RELEASES),  # Note [Engine versions]
                          # the vision wrapper on the FlashInfer that `import flashinfer` finds, and on each other release
                          "sglang": ("",) + tuple(f"engine={v}" for v in list(ENGINE_RELEASES)[1:])}


def release_key(spec) -> tuple:
    """Sort key of a target spec (a string or TargetSpec): by its ``==X.Y.Z`` release number, then by
    name (a spec without a release first)."""
    from kernel_oracle.harness.targets import TargetSpec

    parsed = TargetSpec.parse(spec)
    nums = tuple(int(n) for n in re.findall(r"\d+", parsed.release or ""))
    return (nums, parsed.name if parsed.release is not None else str(parsed))


# ---- the plan: which specs run the same code ------------------------------------------------------------

@dataclasses.dataclass
class Column:
    """Specs of one lane that run the same code: ``members`` in version order (the first is tested),
    ``identity`` (None: not a release spec, or no such code: a column of its own), ``same_as``: the
    label of an earlier column that ran this very code (this one reuses its campaign)."""

    family: str
    lane: str
    members: list
    identity: Optional[str]
    label: str = ""
    same_as: Optional[str] = None

    @property
    def tested(self) -> str:
        return self.members[0]


def _lane(spec: str, family: str) -> str:
    from kernel_oracle.harness.targets import TargetSpec

    parsed = TargetSpec.parse(spec)
    conf = ",".join(f"{k}={v}" for k, v in parsed.configuration)
    return f"{parsed.name if parsed.release is not None else str(parsed)}{'@' + conf if conf else ''} {family}"


def _label(members: list, family: str, families: list) -> str:
    from kernel_oracle.harness.targets import TargetSpec

    first, last = TargetSpec.parse(members[0]), TargetSpec.parse(members[-1])
    text = members[0]
    if len(members) > 1:
        text = dataclasses.replace(first, release=f"{first.release}-{last.release}").__str__()
    return text + (f" {family}" if len(families) > 1 else "")


def plan_columns(specs: list, families: list, identity, applies=None) -> list:
    """The columns of ``specs`` x ``families`` (see the Note); ``identity(spec, family)`` gives a spec's
    code identity or None; ``applies(spec, family)`` False leaves the pair out (a release without
    that family's code: 0.5.10 has no kv_b kernels)."""
    ordered = sorted(dict.fromkeys(str(s) for s in specs), key=release_key)
    columns: list[Column] = []
    for family in families:
        lanes: dict[str, list[Column]] = {}
        for spec in ordered:
            if applies is not None and applies(spec, family) is False:
                continue
            ident, lane = identity(spec, family), _lane(spec, family)
            run = lanes.setdefault(lane, [])
            if run and ident is not None and run[-1].identity == ident:
                run[-1].members.append(spec)
            else:
                run.append(Column(family, lane, [spec], ident))
        columns.extend(c for lane in lanes.values() for c in lane)
    seen: dict = {}
    for c in columns:
        c.label = _label(c.members, c.family, families)
        if c.identity is not None:
            c.same_as = seen.get(c.identity)
            seen.setdefault(c.identity, c.label)
    return columns


def expand_targets(specs: list, *, releases: Optional[list] = None, configurations: bool = False,
                   available=None, applies=None) -> list:
    """``specs`` with ``releases`` (versions) applied to each name without one (``sglang`` ->
    ``sglang==V`` for every V that ``available(spec)`` allows) and, with ``configurations``, every
    configuration of :data:`CONFIGURATION_VARIANTS` added to each spec without one where
    ``applies(spec)`` allows it (a release whose code reads the configuration's switches)."""
    from kernel_oracle.harness.targets import RELEASE_NAMES, TargetSpec

    out = []
    for spec in (TargetSpec.parse(s) for s in specs):
        if releases and spec.release is None and spec.name in RELEASE_NAMES and spec.kind == "builtin":
            named = [dataclasses.replace(spec, release=v) for v in releases]
            out.extend(s for s in named if available is None or available(str(s)))
        else:
            out.append(spec)
    if configurations:
        expanded = []
        for s in out:
            for conf in (("",) if s.configuration else CONFIGURATION_VARIANTS.get(s.name, ("",))):
                pairs = tuple(tuple(kv.split("=", 1)) for kv in conf.split(",") if kv)
                if not pairs:
                    expanded.append(s)
                elif applies is None or applies(str(dataclasses.replace(s, configuration=pairs))):
                    expanded.append(dataclasses.replace(s, configuration=pairs))
        out = expanded
    return [str(s) for s in dict.fromkeys(out)]


# ---- the matrix (pure data: records in, table out) ------------------------------------------------------

def _history(row: dict, lanes: dict, replayed: bool = True) -> dict:
    """lane -> (introduced in, fixed in) of ``row`` over that lane's columns that ran; without the
    replays (``replayed`` false: an interrupted matrix) an absence proves no fix, so "fixed in" is None."""
    out = {}
    for lane, labels in lanes.items():
        present = [s for s in labels if row["counts"].get(s) or s in row.get("replayed", {})]
        if not present:
            continue
        ran = [s for s in labels if s in row["counts"]]
        later = [s for s in ran if labels.index(s) > labels.index(present[-1])]
        out[lane] = {"introduced_in": present[0], "fixed_in": later[0] if later and replayed else None}
    return out


def _one_row_per_change(rows: dict) -> dict:
    """Rows of one kind in several ops that fail in exactly the same columns, absent from at least one
    column that ran, merged into one row (Note [Release matrix]: one code change, one row)."""
    groups: dict[tuple, list] = {}
    for label, row in rows.items():
        present = tuple(sorted(s for s, n in row["counts"].items() if n or s in row["replayed"]))
        if row["unlabelled"] and len(present) < len(row["counts"]):  # ops whose examples need other flags
            groups.setdefault((row["unlabelled"], present, tuple(row["flags"])), []).append(label)
    for (unlabelled, _, _), labels in groups.items():
        if len(labels) < 2:
            continue
        merged = [rows.pop(label) for label in labels]
        ops = sorted({op for r in merged for op in r["ops"]})
        parts = unlabelled.split(" | ")  # kind | family | [ops] | cause ...: the label with every op
        label = " | ".join(parts[:2] + [", ".join(ops)] + parts[2:])
        row = {**merged[0], "bucket": label, "ops": ops, "labels": [x for r in merged for x in r["labels"]],
               "headline": " / ".join(r["headline"] for r in merged
                                                                             if r["headline"]),
               "dtypes": list(dict.fromkeys(d for r in merged for d in r["dtypes"])),
               "counts": {s: sum(r["counts"].get(s, 0) for r in merged) for s in merged[0]["counts"]},
               "examples": {s: e for r in reversed(merged) for s, e in r["examples"].items()},
               "replayed": {s: e for r in reversed(merged) for s, e in r["replayed"].items()}}
        rows[label] = row
    for row in rows.values():
        row.pop("unlabelled", None)  # the grouping key only, not part of the record
    return rows


def build_matrix(runs: list[dict], corpus: list[dict], *, replayed: bool = True) -> dict:
    """``runs``: ``[{spec, available, reason, cases, findings: [finding records]}]`` (plus, from
    :func:`run_matrix`, ``family``, ``lane``, ``tested``, ``members``, ``same_as``); ``corpus``:
    ``[{id, title, upstream, status, results: {spec: {...}}}]``.  Returns the ``release_matrix``
    section (see the Note): columns in version order, one row per bucket, introduced / fixed in
    (``replayed`` false: the absences were not replayed, so no row claims a fix)."""
    from kernel_oracle.jobs.matrix_replay import row_bucket

    runs = sorted(runs, key=lambda r: (r.get("family", ""), r.get("lane", ""), release_key(r.get("tested", r["spec"]))))
    specs = [r["spec"] for r in runs]
    lanes: dict[str, list] = {}
    for r in runs:
        lanes.setdefault(r.get("lane", ""), []).append(r["spec"])
    rows: dict[str, dict] = {}
    for run in runs:
        for f in run["findings"]:
            b = row_bucket(f)  # releases move modules (and load them under private names): file:function
            row = rows.setdefault(b.label, {"bucket": b.label, "labels": [b.label], "kind": b.kind, "family": b.family,
                                            "counts": {}, "replayed": {}, "examples": {}, "flags": [],
                                            "headline": f.get("headline") or "", "dtypes": [],
                                            "ops": [b.op] if b.op else [], "unlabelled": b.label.replace(
                                                f" | {b.op} |", " |") if b.op else None})
            row["flags"] = sorted(set(row["flags"]) | set(b.flags))  # what the example needs (Note [Buckets])
            if not b.op:  # a root cause of several ops (Note [One root cause across ops] in harness/root_causes.py)
                row["ops"] = list(dict.fromkeys([*row["ops"], *(str(o) for o in f.get("ops") or ())]))
            for d in f.get("dtypes") or [f.get("dtype")]:  # one row per root cause, whichever dtypes show it
                if d and d not in row["dtypes"]:
                    row["dtypes"].append(d)
            row["counts"][run["spec"]] = row["counts"].get(run["spec"], 0) + int(f.get("count") or 1)
            row["examples"].setdefault(run["spec"], f["id"])
    for run in runs:  # Note [Replayed absences]: present there, though its campaign did not meet it
        for hit in run.get("replayed") or ():
            if hit["bucket"] in rows:
                rows[hit["bucket"]]["replayed"][run["spec"]] = hit["from"]
    for row in rows.values():
        for run in runs:
            if run["available"] and run["cases"] and run.get("family", row["family"]) == row["family"]:
                row["counts"].setdefault(run["spec"], 0)
        row["history"] = _history(row, lanes, replayed)
        first = next(iter(row["history"].values()), {})
        row["introduced_in"], row["fixed_in"] = first.get("introduced_in"), first.get("fixed_in")
    rows = _one_row_per_change(rows)
    ordered = sorted(rows.values(), key=lambda r: (specs.index(r["introduced_in"]) if r["introduced_in"] else 0,
                                                   r["kind"], r["bucket"]))
    keep = ("spec", "available", "reason", "cases", "family", "tested", "members", "identity", "same_as",
            "known_cases", "known_skipped", "validation_gaps", "current", "failed")
    return {"releases": [{k: r[k] for k in keep if k in r} | {"findings": len(r["findings"])} for r in runs],
            "rows": ordered, "corpus": corpus}


def tag_rows(record: dict) -> None:
    """Each finding of ``record`` gets ``matrix_row``, the label of the release-matrix row that holds it
    (a row folds one root cause's findings of every column: the report lists rows, not findings)."""
    from kernel_oracle.jobs.matrix_replay import row_bucket

    row_of = {x: row["bucket"] for row in record["release_matrix"]["rows"] for x in row.get("labels", [row["bucket"]])}
    for f in record["findings"]:
        label = row_bucket(f).label
        if label in row_of:
            f["matrix_row"] = row_of[label]


# ---- running it ------------------------------------------------------------------------------------------

def _expected(entry, members: list) -> tuple[Optional[str], str]:
    """What ``entry`` says about a column of ``members`` (releases): ``("fails" | "passes" | None, note)``;
    the note is non-empty when the entry names some of them buggy and others fixed (they run the same
    code: the entry contradicts itself)."""
    from kernel_oracle.harness.targets import TargetSpec

    releases = {TargetSpec.parse(m).release for m in members}
    buggy, fixed = sorted(releases & set(entry.buggy)), sorted(releases & set(entry.fixed))
    note = (f"corpus {entry.id} lists {', '.join(buggy)} as buggy and {', '.join(fixed)} as fixed, but they run the "
            f"same code") if buggy and fixed else ""
    return ("fails" if buggy else "passes" if fixed else None), note


def _corpus_results(entries, column: Column, device: str, sources, record: dict, worker) -> dict:
    """``{entry id: {outcome, expected, as_expected}}`` of the entries of the column's target spec name, each
    run in ``worker`` as a campaign runs a case (Note [Cases outside a campaign]): an entry with a case of a
    feature no command sends the target is ``declined`` there, not run."""
    from kernel_oracle.fuzz.isolated import IsolatedTarget, WorkerError
    from kernel_oracle.fuzz.targets import TargetSpec
    from kernel_oracle.harness.schema import add_note
    from kernel_oracle.jobs.bug_corpus import run_entry

    parsed = TargetSpec.parse(column.tested)
    base = parsed.name if parsed.release is not None else str(parsed)
    conf = ",".join(f"{k}={v}" for k, v in parsed.configuration)
    target = IsolatedTarget(parsed, device, sources=sources, worker=worker)
    out = {}
    for e in entries:
        if e.target != base or e.device != device or e.family != column.family or e.configuration != conf:
            continue
        expected, note = _expected(e, column.members)
        if note:
            add_note(record, note)
        try:
            info = target.info
        except WorkerError as exc:
            info = {"available": False, "reason": str(exc)}
        if not info.get("available", True) or not all(c.op in (info.get("entry_points") or ()) for c in e.cases):
            out[e.id] = {"outcome": "unavailable", "expected": expected, "as_expected": None}
            continue
        declined = {f: why for c in e.cases for f, why in target.declined(c, never_sent=True).items()}
        if declined:
            feature, why = next(iter(declined.items()))
            add_note(record, f"corpus {e.id} on {column.label}: not run: {column.tested} declines {feature} ({why})")
            out[e.id] = {"outcome": "declined", "expected": expected, "as_expected": None}
            continue
        o = run_entry(e, lambda case: target.check(case, never_sent=True))
        outcome = f"fails: {o.kind}" if o.failed else "passes"
        as_expected = None if expected is None else (o.matches(e) if expected == "fails" else not o.failed)
        out[e.id] = {"outcome": outcome, "expected": expected, "as_expected": as_expected}
    return out


def _corpus_rows(entries, corpus_by_spec: dict, record: dict) -> list:
    """The corpus section: each entry that ran, its result per column; a result against the entry's
    own record (a buggy release that passes, a fixed one that fails) is also a note."""
    from kernel_oracle.harness.schema import add_note

    corpus = []
    for e in entries:
        results = {s: r[e.id] for s, r in corpus_by_spec.items() if e.id in r}
        if results:
            corpus.append({"id": e.id, "title": e.title, "upstream": e.upstream, "status": e.status,
                           "expect": e.expect, "results": results})
            for s, r in results.items():
                if r["as_expected"] is False:
                    add_note(record, f"corpus {e.id} on {s}: {r['outcome']}, but the entry says it "
                                     f"{r['expected']} there")
    return corpus


def _write(record: dict, out: Path) -> None:
    from kernel_oracle.harness.data_files import write_text
    from kernel_oracle.harness.schema import save
    from kernel_oracle.reports.model import Result
    from kernel_oracle.reports.render_html import render_html
    from kernel_oracle.reports.render_md import render_markdown

    path = save(record, out / "matrix.json", overwrite=True)
    result = Result.from_dict(record, source=str(path))
    write_text(out / "matrix.md", render_markdown(result))  # never through a symlink: Note [Files as data]
    write_text(out / "matrix.html", render_html(result, with_plots=False))


def runs_dir(out) -> Path:
    """Where a matrix run written to ``out`` keeps its campaigns: ``out/runs/<UTC time>``."""
    return Path(out) / "runs" / _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def _column_run(record: dict, rec: dict, column: Column) -> dict:
    """The run row of ``column`` from its campaign record ``rec``, merged into ``record``."""
    from kernel_oracle.harness.schema import merge
    from kernel_oracle.jobs.bug_corpus import known_cases_of

    merge(record, rec, seeds_key=f"{column.tested} {column.family}")
    t = rec["targets"][0] if rec["targets"] else {}
    summary = rec.get("summary") or {}
    return {"available": bool(t.get("available")), "reason": t.get("reason"), "declines": t.get("declines") or {},
            "cases": int(rec["campaign"]["executed"]), "findings": rec["findings"],
            # where the column's cases went besides its rows (Note [Known-issue triggers], validation gaps)
            "known_cases": int(summary.get("known_cases") or 0),
            "known_skipped": int(sum((summary.get("known_skipped") or {}).values())),
            "validation_gaps": int(sum(g.get("count", 0) for g in rec.get("validation_gaps") or ()))}


def run_matrix(specs: list, *, entries: list, op: str = "lora", budget: Optional[int] = None,
               time_s: Optional[float] = None, seed: int = 0, device: str = "cpu", out="reports/matrix",
               campaigns_dir=None, quiet: bool = False, with_malformed: bool = False,
               sglang_wheel: Optional[str] = None, log=None, regression_cases: int = REGRESSION_CASES) -> dict:
    """One campaign (:class:`~kernel_oracle.fuzz.campaign_config.CampaignConfig`, the same seed for
    every release) and the corpus ``entries`` per column of distinct code (Note [Release matrix]) of
    ``specs`` (strings or TargetSpecs) and ``op`` (an ``--op`` list: one campaign per family it names, of
    the ops it names, :func:`kernel_oracle.harness.family.op_groups`), folded into one record of kind
    ``main`` with its ``release_matrix``, written as ``out/matrix.{json,md,html}``; campaigns go under ``campaigns_dir`` (default :func:`runs_dir`).
    Returns the record; raises ``CampaignError`` naming the spec, and ``CampaignInterrupted`` (SIGTERM or
    SIGINT) after writing the matrix of the columns that ran, its ``record``."""
    from kernel_oracle.fuzz.campaign import CampaignInterrupted
    from kernel_oracle.fuzz.targets import TargetSources
    from kernel_oracle.fuzz.targets.sglang import release_identity
    from kernel_oracle.fuzz.time_budget import resolve_time_s
    from kernel_oracle.harness.family import op_groups
    from kernel_oracle.harness.schema import add_note, new_record

    out = Path(out)
    campaigns_dir = Path(campaigns_dir) if campaigns_dir is not None else runs_dir(out)
    if budget is None or time_s is not None:  # cases alone, or a time: given or the default (Note [Time budget])
        time_s = resolve_time_s(time_s, "matrix")
    sources = TargetSources(sglang_wheel=sglang_wheel)
    groups = op_groups(op)  # a FamilyError (a ValueError) names what is wrong
    families = list(groups)
    columns = plan_columns(specs, families, lambda s, f: release_identity(s, f, device, sources),
                           applies=lambda s, f: _applies(s, f, sources, len(families) > 1))
    record = new_record("main", seeds={"seed": seed}, device=device)
    config = dict(budget=budget, time_s=time_s, seed=seed, device=device, progress=not quiet,
                  with_malformed=with_malformed, sglang_wheel=sglang_wheel)
    runs, corpus_by_spec, done = [], {}, {}
    replays = None
    try:
        replays = _run_columns(columns, groups, config, campaigns_dir, record, entries, device, sources,
                               runs, corpus_by_spec, done, log, regression_cases)
    except KeyboardInterrupt as exc:  # SIGTERM / SIGINT: the columns that ran are written, then the stop goes on
        signame = getattr(exc, "signame", None) or (str(exc) or "SIGINT")
        add_note(record, f"interrupted by {signame}: {len(runs)} of {len(columns)} columns ran"
                         + ("" if replays is not None else "; absences not replayed, so no row claims a fix"))
        _finish(record, specs, op, time_s, budget, columns, done, runs, entries, corpus_by_spec, replays, out)
        raise CampaignInterrupted(signame, record=record) from None
    _finish(record, specs, op, time_s, budget, columns, done, runs, entries, corpus_by_spec, replays, out)
    return record


def _run_columns(columns, groups, config, campaigns_dir, record, entries, device, sources, runs,
                 corpus_by_spec, done, log, regression_cases: int = REGRESSION_CASES) -> int:
    """Each column's campaign (Note [Matrix budget]: side by side on a GPU) and corpus (appended to
    ``runs``, ``corpus_by_spec``, ``done`` as they end, so an interruption keeps them), then the
    replays of absences; returns the replays run.  ``groups``: family -> the ops ``--op`` names."""
    from kernel_oracle.fuzz.worker import Worker
    from kernel_oracle.harness.family import op_text
    from kernel_oracle.harness.schema import add_note
    from kernel_oracle.jobs.bug_corpus import known_cases_of
    from kernel_oracle.jobs.matrix_columns import failed_row, is_current, newest_release, run_campaigns
    from kernel_oracle.jobs.matrix_replay import replay_absences
    from kernel_oracle.jobs.side_by_side import slots

    newest = newest_release([m for c in columns for m in c.members])

    def append(c: Column, result: dict) -> None:
        reused = c.label not in done
        runs.append({"spec": c.label, "family": c.family, "lane": c.lane, "tested": c.tested, "members": c.members,
                     "identity": c.identity, "same_as": c.same_as, "ran": not reused,
                     "current": is_current(c.members, newest), **result})
        if log is not None:
            same = f" (the same code as {c.same_as}: not run again)" if reused else ""
            log(f"{c.label}: {result['cases']} cases, {len(result['findings'])} findings{same}"
                + ("" if result["available"] else f" (unavailable: {result['reason']})"))

    def on_record(c: Column, rec: Optional[dict], problem: Optional[str]) -> None:
        if rec is None:
            add_note(record, f"{c.label}: {problem}")
            done[c.label] = failed_row(problem or "no record")
        else:
            done[c.label] = _column_run(record, rec, c)
            corpus_by_spec[c.label] = _corpus_results(entries, c, device, sources, record, corpus_worker)
        append(c, done[c.label])

    distinct = [c for c in columns if c.same_as is None]
    with Worker(device) as corpus_worker:  # started at the first corpus entry; a crash costs it, not the matrix
        run_campaigns(distinct, lambda c: op_text(c.family, groups[c.family]), config, campaigns_dir,
                      device=device, at_once=slots(device), newest=newest, regression_cases=regression_cases,
                      on_record=on_record, known_cases=lambda c: known_cases_of(entries, c.tested))
    for c in columns:
        if c.same_as is not None:
            done_as = done.get(c.same_as)
            if done_as is not None:
                corpus_by_spec[c.label] = corpus_by_spec.get(c.same_as, {})
                append(c, done_as)
    return replay_absences(runs, device=device, sources=sources, log=log)  # Note [Replayed absences]


def _applies(spec: str, family: str, sources, several: bool) -> Optional[bool]:
    """Whether ``spec`` is a column of ``family``: never for a target registered for other families (a
    vision peer has no LoRA column); with several families, only where its release has that code."""
    from kernel_oracle.fuzz.targets import serves
    from kernel_oracle.fuzz.targets.sglang import release_has_code

    if serves(spec, family) is False:
        return False
    return release_has_code(spec, family, sources) if several else None


def _finish(record, specs, op, time_s, budget, columns, done, runs, entries, corpus_by_spec, replays, out) -> None:
    """The matrix of the columns in ``runs`` into ``record``, written under ``out``; ``replays`` None: the
    replays did not finish (no fix claimed)."""
    record["release_matrix"] = build_matrix(runs, _corpus_rows(entries, corpus_by_spec, record),
                                            replayed=replays is not None)
    tag_rows(record)
    record["summary"] = {"targets": [str(s) for s in specs], "op": op, "time_s": time_s,
                         "budget_per_target": budget, "columns": len(columns),
                         "campaigns": sum(1 for r in runs if r.get("ran") and not r.get("failed")), "replays": replays,
                         "failed_columns": [r["spec"] for r in runs if r.get("failed")], **case_split(runs)}
    _write(record, out)
