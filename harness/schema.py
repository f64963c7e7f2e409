"""The versioned result record every producer writes (campaign, pytest run, benchmarks).

Note [Result records]
---------------------
One JSON object per run (pytest-benchmark's storage shape)::

    {
      "schema": "kernel-oracle/result", "version": 1,
      "kind": "campaign" | "pytest" | "bench" | "main",
      "created": "2026-11-30T01:23:45Z",
      "environment": {torch, triton, cuda, cudnn, device, cpu, python, git_commit, suite_version, ...},
      "seeds": {...},
      "groups": [ {target, op, dtype, shape_class, precision, cases, passes, gaps (optional: cases of the
                   validation-gap table, neither passed nor failed),
                   findings: {mismatch, contract, validation-gap, crash, hang},
                   error_ratio: {max, median, values?}} ],
      "findings": [ {id, target, op, dtype, shape_class, kind, message, figures: {max_abs, max_rel,
                     ratio, where: {...}}, repro, problem} ],
      "benchmarks": [ {target, op, shape, dtype, median_us, bytes, flops, tbps, tflops, peers: {...}} ],
      "targets": [ {name, available, reason, entry_points, precision} ],
      "notes": [ "selfcheck unavailable: ...", ... ],          (optional, added in place, v1)
      "summary": {duration_s, time_s, status, ...},     (optional, free-form, v1)
      "coverage": {rows: [ {target, op, dim, blocks, cases, one, several, tail, split} ],
                   unknown: {target: {family: reason}}},  (optional, v1: harness.tile_coverage)
    }

``notes``, ``summary`` and ``coverage`` are optional additions that version-1 readers ignore, so they do not
bump the version.  A *note* is anything a reader must not miss that is not a finding: a part that could
not run, a target that was skipped, a budget that ran out.  A record with notes is never "clean".
:func:`merge` folds one record (a campaign's) into another (the main job's): groups of the same
``target x op x dtype x shape_class`` add up and keep their ratio values, findings and benchmarks
append (finding ids stay unique), targets deduplicate by name, coverage rows of the same ``target x op x dim``
add up.

Finding kinds are the five of the campaign: ``mismatch`` (wrong numbers on a valid input),
``contract`` (missing / wrong-type / wrong-text upstream error), ``validation-gap`` (malformed
metadata accepted), ``crash`` (the target killed its worker), ``hang`` (no answer within the case
timeout; the worker is replaced).  A reader refuses a newer version
and a malformed file with a clear :class:`SchemaError`.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any, Iterable, Optional

from kernel_oracle.harness.data_files import DataFileError, loads_json, read_text, write_text
from kernel_oracle.harness.tile_coverage import CoverageTable

__all__ = [
    "FINDING_KINDS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "SELFCHECK_TARGET",
    "SchemaError",
    "add_benchmark",
    "add_finding",
    "add_group",
    "add_note",
    "add_target",
    "environment_fingerprint",
    "load",
    "merge",
    "new_record",
    "save",
    "validate",
]

SCHEMA = "kernel-oracle/result"
SCHEMA_VERSION = 1
FINDING_KINDS = ("mismatch", "contract", "validation-gap", "crash", "hang", "stream")
RECORD_KINDS = ("campaign", "pytest", "bench", "main")
# the target of the main job's selfcheck rows (the references against their independent formulations):
# rows, not fuzz cases, counted apart from them
SELFCHECK_TARGET = "selfcheck"


class SchemaError(ValueError):
    """A result file that is malformed, of another schema, or of a newer version."""


def git_commit(root: Optional[Path] = None) -> Optional[str]:
    """The commit of the tree at ``root`` (default: this installed tree): its ``COMMIT`` file when there is
    one (a copy whose ``.git``, if any, is not its own: the GPU snapshots of scripts/gpu_snapshot.sh write
    it), else HEAD of the checkout, else ``GITHUB_SHA``."""
    root = Path(__file__).resolve().parent.parent if root is None else Path(root)
    try:
        named = (root / "COMMIT").read_text().strip()
    except OSError:
        named = ""
    if _is_sha(named):
        return named
    try:
        out = subprocess.run(["git", "rev-parse", "--verify", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=5)
        if out.returncode == 0 and _is_sha(out.stdout.strip()):
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return os.environ.get("GITHUB_SHA") or None


def _is_sha(text: str) -> bool:
    return len(text) == 40 and all(c in "0123456789abcdef" for c in text)


def environment_fingerprint(device: Optional[str] = None) -> dict:
    """torch, triton, CUDA, cuDNN, GPU or CPU model, git commit, suite version."""
    import torch

    from kernel_oracle._version import __version__

    try:
        import triton

        triton_version = triton.__version__
    except Exception as exc:  # triton absent or broken: say so rather than fail the record
        triton_version = f"unavailable ({type(exc).__name__})"
    cuda = torch.cuda.is_available()
    env = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "triton": triton_version,
        "cuda": torch.version.cuda if cuda else None,
        "cudnn": (torch.backends.cudnn.version() if cuda else None),
        "gpu": (torch.cuda.get_device_name(0) if cuda else None),
        "cpu": platform.processor() or platform.machine(),
        "device": device or ("cuda" if cuda else "cpu"),
        "triton_interpret": os.environ.get("TRITON_INTERPRET") == "1",
        "git_commit": git_commit(),
        "suite_version": __version__,
    }
    return env


def new_record(kind: str, *, seeds: Optional[dict] = None, device: Optional[str] = None) -> dict:
    if kind not in RECORD_KINDS:
        raise SchemaError(f"kind={kind!r} is invalid; the only valid values are {list(RECORD_KINDS)}")
    return {
        "schema": SCHEMA,
        "version": SCHEMA_VERSION,
        "kind": kind,
        "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "environment": environment_fingerprint(device),
        "seeds": dict(seeds or {}),
        "groups": [],
        "findings": [],
        "benchmarks": [],
        "targets": [],
        "notes": [],
        "summary": {},
    }


def add_group(record: dict, *, target: str, op: str, dtype: str, shape_class: str, cases: int, passes: int,
              findings: Optional[dict] = None, ratios: Iterable[float] = (), precision: Optional[str] = None,
              gaps: int = 0) -> dict:
    """Append (or merge into) the group ``target x op x dtype x shape_class``; ``gaps``: its cases of the
    validation-gap table (neither passed nor failed)."""
    ratios = [float(r) for r in ratios]
    counts = {k: 0 for k in FINDING_KINDS}
    for k, v in (findings or {}).items():
        if k not in counts:
            raise SchemaError(f"finding kind {k!r} is invalid; the only valid values are {list(FINDING_KINDS)}")
        counts[k] += int(v)
    for g in record["groups"]:
        if (g["target"], g["op"], g["dtype"], g["shape_class"]) == (target, op, dtype, shape_class):
            g["cases"] += cases
            g["passes"] += passes
            g["gaps"] = int(g.get("gaps", 0)) + int(gaps)
            for k in FINDING_KINDS:
                g["findings"][k] += counts[k]
            g["error_ratio"]["values"].extend(ratios)
            _summarise(g)
            return g
    g = {"target": target, "op": op, "dtype": dtype, "shape_class": shape_class, "precision": precision,
         "cases": cases, "passes": passes, "gaps": int(gaps), "findings": counts, "error_ratio": {"values": ratios}}
    _summarise(g)
    record["groups"].append(g)
    return g


def _summarise(group: dict) -> None:
    vals = sorted(v for v in group["error_ratio"]["values"] if v == v)
    er = group["error_ratio"]
    er["max"] = vals[-1] if vals else None
    er["median"] = vals[len(vals) // 2] if vals else None


def add_finding(record: dict, finding: dict) -> dict:
    missing = {"id", "target", "op", "kind", "message", "repro"} - set(finding)
    if missing:
        raise SchemaError(f"finding lacks fields {sorted(missing)}")
    if finding["kind"] not in FINDING_KINDS:
        raise SchemaError(f"finding kind {finding['kind']!r} is invalid; the only valid values are {list(FINDING_KINDS)}")
    record["findings"].append(finding)
    return finding


def add_benchmark(record: dict, bench: dict) -> dict:
    missing = {"target", "op", "shape", "dtype", "median_us"} - set(bench)
    if missing:
        raise SchemaError(f"benchmark lacks fields {sorted(missing)}")
    record["benchmarks"].append(bench)
    return bench


def add_note(record: dict, text: str) -> str:
    """Record something a reader must not miss that is not a finding (a part that could not run)."""
    record.setdefault("notes", []).append(str(text))
    return text


def add_target(record: dict, *, name: str, available: bool, reason: Optional[str] = None,
               entry_points: Optional[list] = None, precision: Optional[str] = None) -> dict:
    """Append (or update by name) one row of the targets table."""
    row = {"name": name, "available": bool(available), "reason": reason,
           "entry_points": list(entry_points or []), "precision": precision}
    targets = record.setdefault("targets", [])
    for i, t in enumerate(targets):
        if isinstance(t, dict) and t.get("name") == name:
            merged = {**t, **{k: v for k, v in row.items() if v not in (None, [])}}
            merged["available"] = bool(available)
            targets[i] = merged
            return merged
    targets.append(row)
    return row


def merge(into: dict, other: dict, *, seeds_key: Optional[str] = None) -> dict:
    """Fold ``other`` (e.g. a campaign record) into ``into`` (e.g. the main job's record).

    Groups add up (ratio values kept), findings and benchmarks append (a repeated finding id gets a
    suffix), targets deduplicate by name, notes append; ``other``'s seeds go under ``seeds_key``.
    """
    validate(other, source="merged record")
    for g in other["groups"]:
        er = g.get("error_ratio") or {}
        values = er.get("values")
        if values is None:  # a producer that kept only the summary: keep what it has
            values = [v for v in (er.get("max"), er.get("median")) if v is not None]
        add_group(into, target=g["target"], op=g["op"], dtype=g["dtype"], shape_class=g["shape_class"],
                  cases=int(g.get("cases", 0)), passes=int(g.get("passes", 0)), findings=g.get("findings"),
                  ratios=values, precision=g.get("precision"), gaps=int(g.get("gaps", 0)))
    seen = {f["id"] for f in into["findings"]}
    for f in other["findings"]:
        f = dict(f)
        base, n = str(f["id"]), 1
        while f["id"] in seen:
            n += 1
            f["id"] = f"{base}-{n}"
        seen.add(f["id"])
        add_finding(into, f)
    for b in other["benchmarks"]:
        add_benchmark(into, dict(b))
    for t in other.get("targets") or []:
        if isinstance(t, dict) and "name" in t:
            add_target(into, name=t["name"], available=t.get("available", True), reason=t.get("reason"),
                       entry_points=t.get("entry_points"), precision=t.get("precision"))
    for note in other.get("notes") or []:
        add_note(into, note)
    if other.get("coverage"):
        into["coverage"] = CoverageTable.from_record(into.get("coverage")).merge(
            CoverageTable.from_record(other["coverage"])).to_record()
    if other.get("seeds"):
        if seeds_key:
            into["seeds"][seeds_key] = other["seeds"]
        else:
            into["seeds"].update(other["seeds"])
    return into


_GROUP_FIELDS = ("target", "op", "dtype", "shape_class", "cases", "passes", "findings", "error_ratio")
_BENCH_FIELDS = ("target", "op", "shape", "dtype", "median_us")


def validate(record: Any, *, source: str = "record") -> dict:
    if not isinstance(record, dict):
        raise SchemaError(f"{source}: expected a JSON object, got {type(record).__name__}")
    if record.get("schema") != SCHEMA:
        raise SchemaError(f"{source}: schema={record.get('schema')!r}, expected {SCHEMA!r}")
    version = record.get("version")
    if not isinstance(version, int):
        raise SchemaError(f"{source}: version={version!r} is not an int")
    if version > SCHEMA_VERSION:
        raise SchemaError(f"{source}: version {version} is newer than this suite reads ({SCHEMA_VERSION}); "
                          f"upgrade kernel-oracle to read it")
    for key, typ in (("groups", list), ("findings", list), ("benchmarks", list), ("environment", dict)):
        if not isinstance(record.get(key), typ):
            raise SchemaError(f"{source}: field {key!r} must be a {typ.__name__}, got {type(record.get(key)).__name__}")
    for key in ("targets", "notes"):
        if key in record and not isinstance(record[key], list):
            raise SchemaError(f"{source}: field {key!r} must be a list, got {type(record[key]).__name__}")
    for i, g in enumerate(record["groups"]):
        missing = [k for k in _GROUP_FIELDS if not isinstance(g, dict) or k not in g]
        if missing:
            raise SchemaError(f"{source}: groups[{i}] lacks fields {missing}; every group needs {list(_GROUP_FIELDS)}")
    for i, b in enumerate(record["benchmarks"]):
        missing = [k for k in _BENCH_FIELDS if not isinstance(b, dict) or k not in b]
        if missing:
            raise SchemaError(f"{source}: benchmarks[{i}] lacks fields {missing}")
    for i, f in enumerate(record["findings"]):
        if not isinstance(f, dict) or f.get("kind") not in FINDING_KINDS:
            raise SchemaError(f"{source}: findings[{i}] has kind {f.get('kind') if isinstance(f, dict) else f!r}; "
                              f"the only valid values are {list(FINDING_KINDS)}")
    try:
        CoverageTable.from_record(record.get("coverage"))
    except ValueError as exc:
        raise SchemaError(f"{source}: {exc}") from None
    return record


def save(record: dict, path: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write ``record``; an existing file is never overwritten unless asked (``latest.json``)."""
    validate(record)
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; results are never overwritten: pass another path or overwrite=True")
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_text(path, json.dumps(record, indent=1, sort_keys=True, default=str))  # Note [Files as data]


def load(path: str | os.PathLike) -> dict:
    path = Path(path)
    if not path.is_file():
        raise SchemaError(f"{path}: no such result file; pass the path of a JSON record "
                          f"(e.g. reports/out/latest.json, written by `kernel-oracle run`)")
    try:  # bounded: Note [Files as data]
        data = loads_json(read_text(path), str(path))
    except DataFileError as exc:
        raise SchemaError(str(exc)) from None
    return validate(data, source=str(path))
