"""The on-disk state of one campaign: an output directory that can be resumed, salvaged and recovered.

Note [Campaign state]
---------------------
:class:`CampaignState` owns a campaign's ``out_dir``; the search loop (:mod:`fuzz.campaign`) only
asks it to count a case, name and save a finding, and write the summary; the main job reads a
killed campaign's directory back through the same object (:meth:`CampaignState.read`).  Files:

* ``findings.jsonl``: one finding per line, appended, flushed and fsync'ed as it is found;
* ``cases/<id>.pt`` + ``cases/<id>.json``: the call's tensors and the case (written *before* the
  finding's line, so a line always has its files);
* ``state.json``: counters, per-group counts (keys are :class:`GroupKey`), each finding's bucket
  count and extra examples, the tile coverage table (:mod:`harness.tile_coverage`), notes; rewritten
  atomically (write a temporary file, then rename);
* ``.lock``: held with ``fcntl.flock`` while a campaign runs, so a second campaign on the same
  directory is refused (:class:`OutDirBusy`) instead of writing duplicate ids and overwriting
  ``.pt`` files; the kernel drops the lock when the process dies, even by ``kill -9``;
* ``summary.json``: the result record (:mod:`harness.schema`, kind ``campaign``);
* ``target-output.log``: what the target printed, bounded (:mod:`fuzz.worker`, Note [Target output]).

Recovery (a campaign killed mid-write, a disk that filled up): a torn or unreadable line of
``findings.jsonl`` is moved, with a note saying why, to ``findings.jsonl.torn`` and the complete
lines kept; an unreadable ``state.json`` is moved to ``state.json.corrupt`` and the state rebuilt
from the findings and the case files (the finding counter from the highest id on disk, so no id or
``.pt`` is ever reused; each finding's group counts its one case; the earlier case counts are lost
and a note says so).  No complete finding is ever dropped, and an unreadable one is never read as
none: while ``findings.jsonl.torn`` holds a record set aside, or ``cases/`` a finding's case with no
line in ``findings.jsonl`` (:attr:`CampaignState.unreadable`), the campaign's result is ``incomplete``
(exit 3) with a note naming them, never clean; reading those records and removing them (or ``--fresh``)
ends it.

Note [Validated state]
----------------------
Everything read back is checked before it is used, because a resumed campaign trusts it: a NaN or
negative ``elapsed_s`` would make a time budget never end, a count below zero or past
:data:`MAX_COUNT` is no count.  ``state.json`` must hold finite, in-range numbers of the right type
in every field (:func:`_checked_state`), else it is unreadable as above; each line of
``findings.jsonl`` must be a finding with the fields and types the record needs
(:func:`finding_problem`), else it is set aside like a torn line.  A directory (or anything but a
regular file) where one of these files belongs is a :class:`StateError` naming it (exit 2, one
line), as is a write that fails (a full disk: the campaign ends with what it holds), except a
finding's case files: :meth:`CampaignState.save_case` raises :class:`CaseNotSaved` and the campaign
keeps the finding with a note that its tensors were not saved.

Note [Campaign identity]
------------------------
A rerun into ``out_dir`` resumes, so it must hold *this* campaign: ``identity.json`` (written when it
began; ``state.json`` has a copy) records the target spec, op, seed, target code hash and suite version
(:mod:`fuzz.targets.identity`).  :meth:`CampaignState.open` raises :class:`OtherCampaign` (one line
naming ``--fresh``) when a field differs or results have no identity (an older layout: unknown code,
never reported as the current code's); ``fresh=True`` deletes the earlier campaign's files first.
"""

from __future__ import annotations

import json
import time
import os
from pathlib import Path
from typing import Iterable, Optional

from kernel_oracle.fuzz.targets.identity import identity_difference
from kernel_oracle.harness.data_files import MAX_BYTES, loads_json, read_text
from kernel_oracle.harness.tile_coverage import CoverageTable
from kernel_oracle.fuzz.state_checks import (ID_NUMBER as _ID_NUMBER, MAX_COUNT, GroupCounts, GroupKey, checked_count,
                                             checked_objects, checked_seconds, checked_text, finding_problem,
                                             region_counts)

__all__ = ["CampaignState", "CaseNotSaved", "OtherCampaign", "GroupCounts", "GroupKey", "MAX_COUNT", "MAX_EXAMPLES", "OutDirBusy",
           "STATE_FILES", "StateError", "TARGET_OUTPUT_LOG", "finding_problem"]

STATE_VERSION = 2
# the least time between two unforced writes of state.json (CampaignState.save)
SAVE_INTERVAL_S = 0.5
# examples kept per finding and dtype besides its own (shrunk) one
MAX_EXAMPLES = 3
# what the target printed (fuzz.worker, Note [Target output])
TARGET_OUTPUT_LOG = "target-output.log"
# files of an out directory (each must be a regular file when present)
STATE_FILES = ("state.json", "findings.jsonl", ".lock", "summary.json", "findings.jsonl.torn", "state.json.corrupt",
               "state.json.tmp", "findings.jsonl.tmp", "summary.json.tmp", TARGET_OUTPUT_LOG, "identity.json",
               "identity.json.tmp")


class StateError(ValueError):
    """An output directory that cannot be used (not a directory, not writable, another campaign's)."""


class OutDirBusy(StateError):
    """Another process holds the directory's lock."""


class OtherCampaign(StateError):
    """The directory holds a campaign of another identity (Note [Campaign identity])."""


class CaseNotSaved(StateError):
    """A finding's case files could not be written (the finding itself is kept)."""


def _check_layout(out: Path) -> None:
    """:class:`StateError` when something other than a regular file sits where a state file belongs,
    or ``cases`` is not a directory (Note [Validated state])."""
    for name in STATE_FILES:
        p = out / name
        if (p.exists() or p.is_symlink()) and (p.is_symlink() or not p.is_file()):
            what = "a symlink" if p.is_symlink() else "a directory" if p.is_dir() else "not a regular file"
            raise StateError(f"--out {out}: {name} is {what}, not a regular file; move it away or pass another --out")
    cases = out / "cases"
    if (cases.exists() or cases.is_symlink()) and (cases.is_symlink() or not cases.is_dir()):
        raise StateError(f"--out {out}: cases is not a directory; move it away or pass another --out")


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)


class CampaignState:
    """The state of the campaign in ``out`` (see Note [Campaign state]).  Open it with :meth:`open`
    (locks, recovers on disk) or :meth:`read` (read-only, for a finished or killed campaign)."""

    def __init__(self, out: Path, *, target: Optional[str], op: Optional[str], seed: int = 0):
        self.out = out
        self.target, self.op, self.seed = target, op, seed
        self.executed = self.runs = 0
        self.coverage = CoverageTable()  # Note [Tile coverage] in harness.tile_coverage
        # hangs retried, cases their retry answered (Note [Confirmed hangs]); crash replays, crashes none reproduced
        self.hang_retries, self.slow_cases, self.crash_confirms, self.unconfirmed_crashes = 0, 0, 0, []
        self._saved_at, self.elapsed_s, self.finding_count = float("-inf"), 0.0, 0
        self.groups: dict[GroupKey, GroupCounts] = {}
        self.findings: list[dict] = []
        # finding id -> {"count": n, "examples": [case dicts], "dtypes": [...], "regions": [...]}
        self.hits: dict[str, dict] = {}
        self.notes: list[str] = []
        self._lock_fh = None
        self._writable = False
        self.identity: Optional[dict] = None
        self.opened, self.earlier = "new", (0, 0)  # "resumed" / "afresh" and the earlier (cases, findings)
        self.unreadable = 0  # finding records that could not be read (set aside): Note [Campaign state]
        self._skipped = 0  # of them, those skipped in findings.jsonl itself (read-only: nothing is set aside)

    # ---- paths -----------------------------------------------------------------------------------
    @property
    def state_path(self) -> Path:
        return self.out / "state.json"

    @property
    def findings_path(self) -> Path:
        return self.out / "findings.jsonl"

    @property
    def cases_dir(self) -> Path:
        return self.out / "cases"

    # ---- opening ---------------------------------------------------------------------------------
    @classmethod
    def open(cls, out_dir, *, target: str, op: str, seed: int = 0, identity: Optional[dict] = None,
             fresh: bool = False) -> "CampaignState":
        """Lock ``out_dir`` (created if absent) and load or recover what it holds; ``StateError``
        when it cannot be used, :class:`OutDirBusy` when another campaign holds it,
        :class:`OtherCampaign` when it holds a campaign of another ``identity`` (Note [Campaign
        identity]; ``fresh=True`` deletes that campaign's files first)."""
        out = Path(out_dir)
        try:
            if out.exists() and not out.is_dir():
                raise StateError(f"--out {out}: is a file, not a directory; pass a directory")
            _check_layout(out)
            (out / "cases").mkdir(parents=True, exist_ok=True)
            lock_fh = open(out / ".lock", "a+")
        except StateError:
            raise
        except OSError as exc:
            raise StateError(f"--out {out}: cannot write there ({exc.strerror or exc}); pass a writable "
                             f"directory") from None
        state = cls(out, target=target, op=op, seed=seed)
        state._acquire(lock_fh)
        try:
            state._load(recover_on_disk=True)
            held = state.executed or state.findings
            earlier = (state.executed, len(state.findings))
            if fresh:
                state._remove_earlier()
                state._lock_fh = None
                state = cls(out, target=target, op=op, seed=seed)
                state._lock_fh = lock_fh
            elif held and identity is not None and (why := identity_difference(state._held_identity(), identity)):
                raise OtherCampaign(f"{out} holds a campaign of other code ({why}); pass --fresh to start afresh "
                                    f"or another --out")
            elif held and (target, op) != (state.target, state.op):
                raise StateError(f"{out} holds a campaign of target={state.target!r} op={state.op!r}; pass "
                                 f"--fresh to start afresh or another --out")
            state.target, state.op = target, op
            state.opened = ("afresh" if fresh else "resumed") if held else "new"
            state.earlier = earlier if held else (0, 0)
            if identity is not None:
                state.identity = identity
                _atomic_write(out / "identity.json", json.dumps(identity, indent=1, sort_keys=True))
        except OSError as exc:
            state.close()
            raise StateError(f"--out {out}: cannot write identity.json ({exc.strerror or exc})") from None
        except BaseException:
            state.close()
            raise
        state._writable = True
        return state

    def _held_identity(self) -> Optional[dict]:
        """``identity.json`` (kept when ``state.json`` is corrupt), else ``state.json``'s copy."""
        try:
            held = loads_json(read_text(self.out / "identity.json"), str(self.out / "identity.json"))
            return held if isinstance(held, dict) else None
        except (OSError, ValueError):
            return self.identity

    def _remove_earlier(self) -> None:
        """Delete the earlier campaign's files (the lock stays; Note [Campaign identity])."""
        import shutil
        try:
            for name in (n for n in STATE_FILES if n != ".lock" and (self.out / n).exists()):
                (self.out / name).unlink()
            for name in (n for n in ("cases", ".hypothesis") if (self.out / n).is_dir()):
                shutil.rmtree(self.out / name)
            self.cases_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StateError(f"--out {self.out}: cannot remove the earlier campaign ({exc.strerror or exc}); "
                             f"pass another --out") from None

    def opening_line(self) -> str:
        """The line saying what :meth:`open` did with an earlier campaign ("" for a new one)."""
        cases, findings = self.earlier
        return {"resumed": f"resuming: {cases} cases, {findings} findings (from {self.out})",
                "afresh": f"starting afresh in {self.out} (--fresh): the earlier campaign's {cases} cases and "
                          f"{findings} findings were removed"}.get(self.opened, "")

    @classmethod
    def read(cls, out_dir) -> "CampaignState":
        """The state of ``out_dir`` as it is on disk (no lock, nothing written; torn lines skipped)."""
        (state := cls(Path(out_dir), target=None, op=None))._load(recover_on_disk=False)
        return state

    def _acquire(self, fh) -> None:
        import fcntl

        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            holder = fh.read().strip() or "unknown"
            fh.close()
            raise OutDirBusy(f"--out {self.out}: another campaign (pid {holder}) is using it; wait for it to "
                             f"finish or pass another --out") from None
        try:  # the holder's pid, for the message of a campaign refused the directory
            fh.seek(0)
            fh.truncate()
            fh.write(str(os.getpid()))
            fh.flush()
        except OSError as exc:  # a full disk: one line, exit 2 (Note [Validated state])
            try:
                fh.close()  # releases the lock; its flush fails the same way
            except OSError:
                pass
            raise StateError(f"--out {self.out}: cannot write .lock ({exc.strerror or exc}); free space there or "
                             f"pass another --out") from None
        self._lock_fh = fh

    def close(self) -> None:
        """Release the lock (the files stay)."""
        if self._lock_fh is not None:
            import fcntl

            try:
                fcntl.flock(self._lock_fh.fileno(), fcntl.LOCK_UN)
            finally:
                self._lock_fh.close()
                self._lock_fh = None
        self._writable = False

    # ---- loading and recovery --------------------------------------------------------------------
    def _load(self, *, recover_on_disk: bool) -> None:
        self.findings = self._load_findings(recover_on_disk)
        self.unreadable = max(self._set_aside() + self._skipped, len(self._orphan_cases()))
        raw = None
        if self.state_path.exists():
            try:
                raw = loads_json(read_text(self.state_path), "state.json")  # bounded: Note [Files as data]
                self._apply(raw)
            except (ValueError, KeyError, TypeError, AttributeError, OSError) as exc:
                why = f"{type(exc).__name__}: {exc}"
                raw = None
                self._reset_counters()
                if recover_on_disk:
                    self.state_path.replace(self.out / "state.json.corrupt")
                    self.notes.append(f"state.json was unreadable ({why}); moved to state.json.corrupt and the "
                                      f"state rebuilt from {len(self.findings)} finding(s) and the case files: "
                                      f"case counts before this point are lost")
                else:
                    self.notes.append(f"state.json unreadable ({why}); counts rebuilt from the findings")
        if raw is None:
            self._rebuild_from_findings()
        self.finding_count = max(self.finding_count, self._highest_id_on_disk())
        if recover_on_disk and raw is None and (self.findings or self.notes):
            self.save()

    def _reset_counters(self) -> None:
        self.executed, self.runs, self.elapsed_s, self.finding_count = 0, 0, 0.0, 0
        self.hang_retries, self.slow_cases, self.crash_confirms, self.unconfirmed_crashes = 0, 0, 0, []
        self.groups, self.hits, self.coverage = {}, {}, CoverageTable()

    def _apply(self, raw: dict) -> None:
        """Take the counters of a parsed ``state.json`` (all or nothing: a bad field raises first;
        Note [Validated state])."""
        if not isinstance(raw, dict):
            raise TypeError(f"expected a JSON object, got {type(raw).__name__}")
        groups = raw.get("groups") or []
        if isinstance(groups, dict):  # version 1 wrote "target|op|dtype|shape_class" keys: read them once, here
            groups = [{"key": dict(zip(("target", "op", "dtype", "shape_class"), k.split("|"))), **g}
                      for k, g in groups.items()]
        if not isinstance(groups, list) or not all(isinstance(g, dict) and isinstance(g.get("key"), dict)
                                                   for g in groups):
            raise ValueError("groups is not a list of {'key': ..., 'cases': ...} objects")
        parsed = {GroupKey.from_dict(g["key"]): GroupCounts.from_dict(g) for g in groups}
        hits = raw.get("hits") or {}
        if not isinstance(hits, dict) or not all(isinstance(v, dict) and isinstance(v.get("examples") or [], list)
                                                 for v in hits.values()):
            raise ValueError("hits is not an object of {'count': n, 'examples': [...]}")
        hits = {str(k): {"count": checked_count(f"hits[{k!r}].count", v.get("count", 1)),
                         "examples": list(v.get("examples") or []),
                         "dtypes": [checked_text(f"hits[{k!r}].dtypes", d) for d in v.get("dtypes") or []],
                         "regions": {checked_text(f"hits[{k!r}].regions", r): checked_count(f"hits[{k!r}].regions[{r!r}]", n)
                                     for r, n in region_counts(v.get("regions")).items()}}
                for k, v in hits.items()}
        counters = (checked_count("executed", raw.get("executed", 0)), checked_count("runs", raw.get("runs", 0)),
                    checked_seconds("elapsed_s", raw.get("elapsed_s", 0.0)), checked_count("finding_count", raw.get("finding_count", 0)))
        retries = (*(checked_count(name, raw.get(name, 0)) for name in ("hang_retries", "slow_cases", "crash_confirms")),
                   checked_objects("unconfirmed_crashes", raw.get("unconfirmed_crashes") or []))
        notes = raw.get("notes") or []
        if not isinstance(notes, list):
            raise ValueError(f"notes={notes!r} is not a list")
        for name in ("target", "op"):
            if raw.get(name) is not None:
                checked_text(name, raw[name])
        identity, coverage = raw.get("identity"), CoverageTable.from_record(raw.get("coverage"))
        if identity is not None and not (isinstance(identity, dict) and all(isinstance(k, str) for k in identity)):
            raise ValueError(f"identity={identity!r} is not an object")
        self.identity = identity
        self.target = raw.get("target", self.target)
        self.op = raw.get("op", self.op)
        self.executed, self.runs, self.elapsed_s, self.finding_count = counters
        self.hang_retries, self.slow_cases, self.crash_confirms, self.unconfirmed_crashes = retries
        self.groups, self.hits, self.coverage = parsed, hits, coverage
        self.notes = [str(n) for n in notes] + self.notes

    def _rebuild_from_findings(self) -> None:
        for f in self.findings:
            key = GroupKey(str(f.get("target") or self.target), str(f.get("op")), str(f.get("dtype") or "-"),
                           str(f.get("shape_class") or "-"))
            g = self.groups.setdefault(key, GroupCounts())
            g.cases += 1
            if f.get("kind") in g.findings:
                g.findings[f["kind"]] += 1
            self.executed += 1
            if self.target is None:
                self.target = f.get("target")

    def _load_findings(self, recover_on_disk: bool) -> list[dict]:
        path = self.findings_path
        if not path.exists():
            return []
        try:
            with open(path, "rb") as fh:
                data = fh.read(MAX_BYTES + 1)
        except OSError as exc:  # read() of a directory someone else owns: say so, keep going, never as clean
            self.notes.append(f"findings.jsonl unreadable ({exc.strerror or exc}); no finding read")
            self._skipped = 1
            return []
        if len(data) > MAX_BYTES:  # Note [Files as data]: not a campaign's file; nothing of it is used
            raise StateError(f"--out {self.out}: findings.jsonl holds more than {MAX_BYTES} bytes, which no campaign "
                             f"writes; move it away or pass another --out")
        good, bad = [], []
        lines = data.split(b"\n")
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                item = loads_json(line, f"line {i + 1}")  # bounded: Note [Files as data]
                why = finding_problem(item)
                if why is not None:
                    raise ValueError(why)
            except ValueError as exc:
                bad.append((line, f"unreadable line {i + 1} ({type(exc).__name__}: {exc})"))
                continue
            good.append(item)  # a complete object without its newline is kept (and terminated below)
        if bad:
            what = "; ".join(why for _, why in bad)
            if recover_on_disk:
                try:
                    with open(self.out / "findings.jsonl.torn", "ab") as fh:
                        for line, why in bad:
                            fh.write(f"# set aside by kernel-oracle: {why}\n".encode())
                            fh.write(line + b"\n")
                except OSError as exc:
                    raise StateError(f"{self.out / 'findings.jsonl.torn'}: cannot set torn lines aside "
                                     f"({exc.strerror or exc})") from None
                self.notes.append(f"findings.jsonl: {len(bad)} torn or unreadable line(s) set aside in "
                                  f"findings.jsonl.torn ({what}); {len(good)} complete finding(s) kept")
            else:
                self.notes.append(f"findings.jsonl: skipped {len(bad)} torn or unreadable line(s) ({what})")
        self._skipped = 0 if recover_on_disk else len(bad)
        if recover_on_disk and (bad or (data and not data.endswith(b"\n"))):
            try:
                _atomic_write(path, "".join(json.dumps(f, sort_keys=True, default=str) + "\n" for f in good))
            except OSError as exc:
                raise StateError(f"{path}: cannot rewrite it without its torn lines ({exc.strerror or exc})") from None
        return good

    def _set_aside(self) -> int:
        """How many finding records ``findings.jsonl.torn`` holds (each set aside under a marker line)."""
        try:
            with open(self.out / "findings.jsonl.torn", "rb") as fh:
                data = fh.read(MAX_BYTES + 1)
        except FileNotFoundError:
            return 0
        except OSError as exc:  # there but unreadable: as many records as can be
            raise StateError(f"{self.out / 'findings.jsonl.torn'}: cannot be read ({exc.strerror or exc}); move it "
                             f"away or pass another --out") from None
        return max(data.count(b"# set aside by kernel-oracle: "), 1 if data.strip() else 0)

    def _orphan_cases(self) -> set:
        """Ids of saved cases (``cases/<id>.json``, written before a finding's line) with no line in
        ``findings.jsonl``: findings whose record was lost (cut off, or removed)."""
        if not self.cases_dir.is_dir():
            return set()
        saved = {p.name[:-len(".json")] for p in self.cases_dir.iterdir() if p.name.endswith(".json")}
        return saved - {str(f.get("id")) for f in self.findings}

    def unreadable_note(self) -> str:
        """The note of a campaign holding finding records it could not read ("" when it holds none)."""
        if not self.unreadable:
            return ""
        return (f"findings.jsonl held {self.unreadable} finding record(s) that could not be read (set aside in "
                f"{self.out / 'findings.jsonl.torn'}, or saved in cases/ with no line): a finding may be lost, so the "
                f"campaign is not clean; read them there, then remove them, or pass --fresh")

    def _highest_id_on_disk(self) -> int:
        names = [f.get("id", "") for f in self.findings]
        if self.cases_dir.is_dir():
            names.extend(p.name for p in self.cases_dir.iterdir())
        numbers = [int(m.group(1)) for m in (_ID_NUMBER.match(str(n)) for n in names) if m]
        return max(numbers, default=0)

    # ---- updating --------------------------------------------------------------------------------
    def group(self, key: GroupKey) -> GroupCounts:
        return self.groups.setdefault(key, GroupCounts())

    def count_case(self, key: GroupKey, *, passed: bool, ratio: Optional[float], gap: bool = False) -> None:
        """One executed case of group ``key``; ``gap``: a row of the validation-gap table (accepted
        malformed metadata judged harmless: not a failed case, nor a passed one)."""
        self.executed += 1
        g = self.group(key)
        g.cases += 1
        if passed:
            g.passes += 1
        elif gap:
            g.gaps += 1
        if ratio is not None and ratio == ratio and ratio != float("inf"):
            g.ratios.append(round(float(ratio), 6))

    def next_finding_id(self, kind: str, op: str) -> str:
        """``F<n>-<kind>-<op>``: one id per root cause, whichever dtypes show it (Note [Buckets])."""
        self.finding_count += 1
        return f"F{self.finding_count:04d}-{kind}-{op}"

    def save_case(self, fid: str, payload: dict, case_json: str) -> Path:
        """Write ``cases/<fid>.pt`` (the call's tensors) and ``cases/<fid>.json`` (the case)."""
        import torch

        self._check_writable()
        pt = self.cases_dir / f"{fid}.pt"
        try:
            torch.save(payload, pt)
            (self.cases_dir / f"{fid}.json").write_text(case_json + "\n")
        except Exception as exc:  # noqa: BLE001 - torch.save raises RuntimeError for a failed write, too
            first = (str(exc).splitlines() or [""])[0]
            raise CaseNotSaved(f"cases/{fid}.pt not written: {type(exc).__name__}: {first}") from None
        return pt

    def append_finding(self, finding: dict, group: GroupKey) -> dict:
        """Append ``finding`` to ``findings.jsonl`` (flushed and fsync'ed) and count it."""
        self._check_writable()
        try:
            with open(self.findings_path, "a") as fh:
                fh.write(json.dumps(finding, sort_keys=True, default=str) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise StateError(f"{self.findings_path}: cannot append finding {finding['id']} "
                             f"({exc.strerror or exc})") from None
        self.findings.append(finding)
        self.group(group).findings[finding["kind"]] += 1
        where = (finding.get("bucket") or {}).get("where")
        self.hits.setdefault(finding["id"], {"count": 1, "examples": [], "dtypes": [finding.get("dtype") or "-"],
                                             "regions": {where: 1} if where else {}})
        return finding

    def add_hit(self, fid: str, example: dict, region: Optional[str] = None) -> None:
        """One more case of the finding ``fid``'s bucket (``example["dtype"]`` added to its dtypes,
        ``example["op"]`` to its ops, ``region`` to its regions); the first :data:`MAX_EXAMPLES` of each dtype are kept as examples."""
        h = self.hits.setdefault(fid, {"count": 1, "examples": []})
        h["count"] += 1
        dtype = str(example.get("dtype") or "-")
        dtypes, regions = h.setdefault("dtypes", []), h.setdefault("regions", {})
        if dtype not in dtypes:
            dtypes.append(dtype)
        ops = h.setdefault("ops", [])
        if example.get("op") and example["op"] not in ops:
            ops.append(str(example["op"]))
        if example.get("seen_through"):  # Note [One defect through malformed input]
            seen = h.setdefault("malformed_sightings", {})
            seen[str(example["seen_through"])] = seen.get(str(example["seen_through"]), 0) + 1
        if region:
            regions[region] = regions.get(region, 0) + 1
        if sum(1 for e in h["examples"] if e.get("dtype") == dtype) < MAX_EXAMPLES:
            h["examples"].append(example)

    def save(self, *, force: bool = True) -> None:
        """Rewrite ``state.json`` atomically; with ``force=False`` only when the last write is at least
        :data:`SAVE_INTERVAL_S` old (the search loop's per-run saves: findings are written when found,
        so a kill loses at most that much of the counters)."""
        now = time.monotonic()
        if not force and now - self._saved_at < SAVE_INTERVAL_S:
            return
        self._saved_at = now
        self._check_writable(allow_recovery=True)
        raw = {"version": STATE_VERSION, "target": self.target, "op": self.op, "seed": self.seed,
               "executed": self.executed, "runs": self.runs, "elapsed_s": round(self.elapsed_s, 3),
               "finding_count": self.finding_count, "identity": self.identity,
               "hang_retries": self.hang_retries, "slow_cases": self.slow_cases, "crash_confirms": self.crash_confirms,
               "unconfirmed_crashes": self.unconfirmed_crashes,
               "groups": [{"key": k.to_dict(), **g.to_dict()} for k, g in sorted(self.groups.items())],
               "hits": self.hits, "notes": self.notes, "coverage": self.coverage.to_record()}
        try:
            _atomic_write(self.state_path, json.dumps(raw, indent=1, sort_keys=True))
        except OSError as exc:
            raise StateError(f"{self.state_path}: cannot write ({exc.strerror or exc})") from None

    def _check_writable(self, allow_recovery: bool = False) -> None:
        if not self._writable and not (allow_recovery and self._lock_fh is not None):
            raise StateError(f"{self.out}: this state was opened read-only (CampaignState.read)")

    # ---- the record --------------------------------------------------------------------------------
    def findings_with_hits(self) -> list[dict]:
        """The findings as the record shows them, those of one root cause folded into one (Note [One root
        cause across ops]): ``count`` (failing cases), ``examples``, ``dtypes``, ``regions``, ``headline``."""
        from kernel_oracle.harness.headline import dtypes_of, headline
        from kernel_oracle.harness.root_causes import fold_findings

        out = []
        for f in self.findings:
            h = self.hits.get(f["id"]) or {"count": 1, "examples": []}
            where = (f.get("bucket") or {}).get("where")
            row = {**{k: v for k, v in f.items() if k != "signature"}, "count": int(h["count"]),
                   "examples": list(h["examples"])}
            row["dtypes"] = dtypes_of({"dtypes": [*(f.get("dtypes") or [f.get("dtype") or "-"]),
                                                  *(h.get("dtypes") or [])]})
            row["ops"] = list(dict.fromkeys([str(f.get("op") or "-"), *(h.get("ops") or [])]))
            seen = dict(f.get("malformed_sightings") or {})
            for kind, n in (h.get("malformed_sightings") or {}).items():
                seen[kind] = seen.get(kind, 0) + int(n)
            if seen:
                row["malformed_sightings"] = seen
            counts = region_counts(h.get("regions"))  # most cases first: the headline names the first
            row["regions"] = list(dict.fromkeys([*sorted(counts, key=lambda r: -counts[r]),
                                                 *(f.get("regions") or ([where] if where else []))]))
            out.append(row)
        return [{**row, "headline": headline(row)} for row in fold_findings(out)]

    def to_record(self, *, device: str, precision=None, notes: Iterable[str] = ()) -> dict:
        """A ``campaign`` result record of the groups, findings and notes (the caller adds the rest);
        ``precision``: the target's fp32 precision, one for all ops or a dict op -> precision."""
        from kernel_oracle.harness.schema import add_finding, add_group, add_note, new_record

        record = new_record("campaign", seeds={"seed": self.seed, "runs": self.runs}, device=device)
        record["summary"].update(hang_retries=self.hang_retries, slow_cases=self.slow_cases,  # Note [Confirmed hangs]
                                 crash_confirms=self.crash_confirms, unconfirmed_crashes=self.unconfirmed_crashes)
        for key, g in sorted(self.groups.items()):
            add_group(record, target=key.target, op=key.op, dtype=key.dtype, shape_class=key.shape_class,
                      cases=g.cases, passes=g.passes, gaps=g.gaps, findings=g.findings, ratios=g.ratios,
                      precision=precision.get(key.op) if isinstance(precision, dict) else precision)
        for f in self.findings_with_hits():
            add_finding(record, f)
        for note in [*self.notes, *notes]:
            add_note(record, note)
        record["coverage"] = self.coverage.to_record()
        return record
