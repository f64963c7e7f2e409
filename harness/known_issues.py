"""Known upstream defects as data: load ``known_issues.toml`` and match findings against it.

Note [Known issues]
-------------------
Some findings are real defects of code we test but do not own (FlashInfer's empty-batch limitation,
its graph-cache key, SGLang's empty batch with ``max_len=None``).  A user running the suite on an
unmodified upstream must be able to tell them from new ones, and a run whose findings are all known
is clean.  :data:`DEFAULT_PATH` (checked in beside this module) is the registry of upstream defects
(Note [Defect registry] in :mod:`kernel_oracle.harness.defects`): each ``[[defect]]`` record lists the
rules that recognise its findings, ``[[defect.issue]]`` tables whose link and doc are the defect's; a
file of one's own may list top-level ``[[issue]]`` tables instead, each with its ``upstream`` and
``doc``.  Every entry is checked when the file is loaded, and an error names the file, the entry and
the field.  :func:`match_known` decides whether a finding record is one of them:

* the target is one of the :data:`UPSTREAM_TARGETS` (its spec name, before ``==`` or ``@``: ``sglang``,
  ``sglang-trt``, ``sglang-v2``, ``sglang-csgmv``, ``flashinfer-cudnn``, ``torch-varlen``), never a user's
  module, whatever its name (``sglang_mine`` is no release), and its name matches the entry's ``target`` pattern (``fnmatch``:
  ``sglang*`` covers ``sglang``, ``sglang-trt`` and ``sglang==0.5.23``); the op is the entry's (an op,
  or a kernel family: ``lora`` covers every LoRA op) and the kind is the entry's;
* every regular expression the entry gives is found: ``message`` in the finding's message,
  ``bucket`` in its bucket label (:func:`kernel_oracle.harness.buckets.bucket_of_record`);
* the release is one of the entry's ``releases`` (or it says ``*``): for a ``[[defect.issue]]`` whose target
  is of its defect's component, the defect's releases (``introduced`` up to before ``fixed`` in the release
  table, Note [Release table] in :mod:`kernel_oracle.harness.releases`), given nowhere else; any other entry
  lists them (``["*"]``: SGLang's wrapper of FlashInfer's engine, whatever the SGLang release).  The
  release is the argument, else the finding's ``release`` field, else the version in a target name
  ``name==X.Y.Z`` (also before a configuration: ``name==X.Y.Z@key=value,...``); when none is known the
  release does not restrict the match (the installed release may be any).

Wiring (the main job, campaigns, compare): :func:`mark_known` stores ``known`` (the entry's id) and
``upstream`` (its link) in each matching finding of a result record, the release taken from the
record's targets table (a target's ``release``: SGLang's release, FlashInfer's version); the run
exits 0 when every finding is known; ``compare`` reports a baseline finding that matched an entry
and is gone from the new run as fixed upstream.  ``$KERNEL_ORACLE_KNOWN_ISSUES`` names another file
to use instead of the checked-in one (a project's own list, or a test's); the record names the file
used (``summary.known_issues_file``) and so does every line that says findings are known.

A known-issues file can hide a bug, so an entry must be narrow: its ``target`` pattern starts with one
of the :data:`UPSTREAM_TARGETS` (a catch-all such as ``*`` or ``s*`` is refused when the file is loaded, in one
line naming the entry) and its ``op`` names an op or a kernel family, never ``*``.

Nor may a file hang the run: a ``message`` or ``bucket`` regex that repeats something which itself
repeats or chooses (``(\\w+\\s?)*``, ``(a|ab)+``, ``(.*x){9}``) backtracks exponentially on a near miss and
is refused when the file is loaded (:func:`_backtracks`); every search is also bounded in time where the
process can interrupt it (:data:`REGEX_TIME_S`, its main thread): a rule past it does not match, so the
finding stays new.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

# standard library only at import time (reports and compare read this; no torch)
from kernel_oracle.harness.buckets import bucket_of_record
from kernel_oracle.harness.data_files import DataFileError, loads_toml, read_text
from kernel_oracle.harness.defects import REGISTRY, Defect, DefectError, parse_defects, release_table
from kernel_oracle.harness.family import FAMILY_OF, FAMILY_OPS
from kernel_oracle.harness.headline import headline
from kernel_oracle.harness.schema import FINDING_KINDS
from kernel_oracle.harness.targets import RELEASE_NAMES
from kernel_oracle.harness.triggers import TRIGGERS, trigger_holds

__all__ = ["DEFAULT_PATH", "ENV_VAR", "REGEX_TIME_S", "UPSTREAM_TARGETS", "KnownIssue", "KnownIssuesError",
           "known_issues_path", "load_known_issues", "mark_known", "match_known", "spec_name", "target_release"]

DEFAULT_PATH = REGISTRY  # the defect registry (Note [Defect registry] in harness/defects.py)
# names a known-issues file used instead of DEFAULT_PATH (read by the campaign's and the job's process)
ENV_VAR = "KERNEL_ORACLE_KNOWN_ISSUES"
_FIELDS = ("id", "title", "target", "op", "kind", "upstream", "releases", "doc")
_OPTIONAL = ("message", "bucket", "trigger")
_ID = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
# an op or kernel family name (oracle_tests/harness/test_known_issues.py checks it exists)
_OP = re.compile(r"[a-z][a-z0-9_]*")
# the upstream targets a known issue may be of, by spec name (its name before "==" or "@"): every SGLang release
# kind (harness/targets.RELEASE_NAMES) and the other built-in upstream codes (a test checks them against the registry)
UPSTREAM_TARGETS = (*RELEASE_NAMES, "flashinfer-cudnn", "torch-varlen")
# the release of a target name: sglang==0.5.23, or before a configuration, sglang-trt==0.5.13@cublas=on
_VERSION_IN_NAME = re.compile(r"==\s*([0-9][0-9A-Za-z.+-]*)(?:@[^@]*)?$")


# seconds one rule's regex may search a finding's text (Note [Known issues]); past it the rule does not match
REGEX_TIME_S = 1.0

try:  # the regex parser of the standard library, to read a pattern's structure (3.11+: re._parser)
    import re._parser as _sre_parse  # type: ignore[import-not-found]
except ImportError:  # Python 3.10
    import sre_parse as _sre_parse  # type: ignore[no-redef]

_REPEATS = tuple(getattr(_sre_parse, n) for n in ("MAX_REPEAT", "MIN_REPEAT") if hasattr(_sre_parse, n))


def _subpatterns(av) -> list:
    """The parsed subpatterns inside one node's argument (nested tuples and lists of them)."""
    items = av if isinstance(av, (tuple, list)) else (av,)
    out = []
    for x in items:
        if isinstance(x, _sre_parse.SubPattern):
            out.append(x)
        elif isinstance(x, (tuple, list)):
            out.extend(_subpatterns(x))
    return out


def _chooses(sub) -> bool:
    """Whether a parsed pattern can match one text in more than one way: a repeat of more than one, or a branch."""
    for op, av in sub:
        if (op in _REPEATS and av[1] > 1) or op is _sre_parse.BRANCH:
            return True
        if any(_chooses(c) for c in _subpatterns(av)):
            return True
    return False


def _backtracks(pattern: str) -> bool:
    """Whether ``pattern`` repeats (more than once) something that itself chooses: the shape that
    backtracks exponentially (or to a high power) on a near miss (Note [Known issues])."""
    def walk(sub) -> bool:
        for op, av in sub:
            if op in _REPEATS and av[1] > 1 and _chooses(av[2]):
                return True
            if any(walk(c) for c in _subpatterns(av)):
                return True
        return False
    return walk(_sre_parse.parse(pattern))


class _Expired(Exception):
    """A search past :data:`REGEX_TIME_S`."""


def _found(pattern: str, text: str) -> bool:
    """``re.search(pattern, text) is not None``, in at most :data:`REGEX_TIME_S` seconds where the search
    can be interrupted (the main thread): past that, False (the finding stays new)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        return re.search(pattern, text) is not None
    armed = [True]

    def expire(signum, frame):
        if armed[0]:
            raise _Expired()

    previous = signal.signal(signal.SIGALRM, expire)
    left, interval = signal.setitimer(signal.ITIMER_REAL, REGEX_TIME_S)
    start = time.monotonic()
    try:
        return re.search(pattern, text) is not None
    except _Expired:
        return False
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if left:  # a timer of the caller's: put it back, less the time spent here
            signal.setitimer(signal.ITIMER_REAL, max(left - (time.monotonic() - start), 1e-6), interval)


class KnownIssuesError(ValueError):
    """A known-issues file that cannot be used (the message names the file, entry and field)."""


@dataclass(frozen=True)
class KnownIssue:
    """One known upstream defect (the fields of an ``[[issue]]`` entry; see the TOML file's header)."""

    id: str
    title: str
    target: str
    op: str
    kind: str
    upstream: str
    releases: tuple[str, ...]
    doc: str
    message: Optional[str] = None
    bucket: Optional[str] = None
    trigger: Optional[str] = None  # a name of harness.triggers.TRIGGERS (Note [Known-issue triggers])

    def applies_to(self, release: Optional[str]) -> bool:
        return release is None or "*" in self.releases or release in self.releases

    def matches(self, finding: dict, target_name: str, release: Optional[str] = None) -> bool:
        """Whether ``finding`` (a finding record) of ``target_name`` at ``release`` is this issue."""
        if spec_name(target_name) not in UPSTREAM_TARGETS or not fnmatch.fnmatchcase(target_name, self.target):
            return False  # a user's module is no release, whatever its name
        op = str(finding.get("op"))
        if op != self.op and not (self.op in FAMILY_OPS and FAMILY_OF.get(op) == self.op):
            return False
        if str(finding.get("kind")) != self.kind or not self.applies_to(release):
            return False
        if self.message is not None and not _found(self.message, str(finding.get("message") or "")):
            return False
        if self.bucket is not None and not _found(self.bucket, bucket_of_record(finding).label):
            return False
        if self.trigger is not None and not trigger_holds(self.trigger, finding.get("problem") or {}):
            return False
        return True


def spec_name(target_name: str) -> str:
    """The spec name of a target name: the part before ``==`` or ``@`` (``sglang-trt==0.5.23@x=on`` ->
    ``sglang-trt``); a module spec is its own (and none of :data:`UPSTREAM_TARGETS`)."""
    return re.split(r"==|@", target_name, maxsplit=1)[0]


def _narrow_target(pattern: str) -> bool:
    """Whether ``pattern`` starts with one of :data:`UPSTREAM_TARGETS` followed by its end, a wildcard, ``==`` or
    ``@`` (``sglang*``, ``sglang-trt==*``; not ``*``, ``s*`` or ``sgl?ng``)."""
    return any(pattern == f or (pattern.startswith(f) and pattern[len(f)] in "*=@") for f in UPSTREAM_TARGETS)


def _entry(raw: object, where: str) -> KnownIssue:
    if not isinstance(raw, dict):
        raise KnownIssuesError(f"{where}: expected a table but got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(_FIELDS) - set(_OPTIONAL))
    if unknown:
        raise KnownIssuesError(f"{where}: unknown fields {unknown}; the only valid fields are "
                               f"{list(_FIELDS + _OPTIONAL)}")
    missing = [f for f in _FIELDS if f not in raw]
    if missing:
        raise KnownIssuesError(f"{where}: missing fields {missing}")
    for f in _FIELDS + _OPTIONAL:
        if f in raw and f != "releases" and not isinstance(raw[f], str):
            raise KnownIssuesError(f"{where}: Expected {f} to be a string but got {f}={raw[f]!r}")
    if not _ID.fullmatch(raw["id"]):
        raise KnownIssuesError(f"{where}: id={raw['id']!r} must be lower-case words joined by '-'")
    if not _OP.fullmatch(raw["op"]):  # Note [Known issues]: an entry names its op
        raise KnownIssuesError(f"{where}: op={raw['op']!r} must be an op name such as 'step_a_q' or 'vision', or a "
                               f"kernel family ('lora': every LoRA op); a catch-all could hide a bug of any op")
    if not _narrow_target(raw["target"]):
        raise KnownIssuesError(f"{where}: target={raw['target']!r} must start with an upstream target's name "
                               f"({', '.join(UPSTREAM_TARGETS)}), e.g. 'sglang==*'; a catch-all could hide a bug of any "
                               f"target, a user's own included")
    if raw["kind"] not in FINDING_KINDS:
        raise KnownIssuesError(f"{where}: kind={raw['kind']!r}; the only valid values are {list(FINDING_KINDS)}")
    if not raw["upstream"].startswith("https://"):
        raise KnownIssuesError(f"{where}: upstream={raw['upstream']!r} must be an https link")
    releases = raw["releases"]
    if not isinstance(releases, list) or not releases or not all(isinstance(r, str) and r for r in releases):
        raise KnownIssuesError(f"{where}: Expected releases to be a non-empty list of version strings (or ['*']) "
                               f"but got releases={releases!r}")
    if "message" not in raw and "bucket" not in raw and "trigger" not in raw:
        raise KnownIssuesError(f"{where}: give a matching rule: message (a regex of the finding's message), "
                               "bucket (a regex of its bucket label) or trigger (a name of harness/triggers.py)")
    if "trigger" in raw and raw["trigger"] not in TRIGGERS:
        raise KnownIssuesError(f"{where}: trigger={raw['trigger']!r} is unknown; the only valid values are "
                               f"{sorted(TRIGGERS)}")
    for f in ("message", "bucket"):
        if f in raw:
            try:
                re.compile(raw[f])
            except (re.error, RecursionError, OverflowError) as exc:
                raise KnownIssuesError(f"{where}: {f}={raw[f]!r} is not a regular expression ({exc})") from None
            if _backtracks(raw[f]):
                raise KnownIssuesError(f"{where}: {f}={raw[f]!r} repeats a part that itself repeats or chooses (as in "
                                       f"'(x+)*' or '(a|ab)+'), which backtracks exponentially on a near miss and "
                                       f"could hang the run; repeat a single character or class instead")
    return KnownIssue(raw["id"], raw["title"], raw["target"], raw["op"], raw["kind"], raw["upstream"],
                      tuple(releases), raw["doc"], raw.get("message"), raw.get("bucket"), raw.get("trigger"))


def _pattern_spec_name(pattern: object) -> Optional[str]:
    """The upstream target a ``target`` pattern starts with (the longest of :data:`UPSTREAM_TARGETS`), or None."""
    if not isinstance(pattern, str):
        return None
    names = [f for f in UPSTREAM_TARGETS if pattern == f or (pattern.startswith(f) and pattern[len(f)] in "*=@")]
    return max(names, key=len, default=None)


def _inherit(raw: object, defect: Optional[Defect], where: str) -> object:
    """A ``[[defect.issue]]`` table with its defect's ``upstream`` and ``doc`` (given nowhere else), and its
    defect's releases where its target is of the defect's component's release table (Note [Release table])."""
    if defect is None or not isinstance(raw, dict):
        return raw
    given = sorted(set(raw) & {"upstream", "doc"})
    if given:
        raise KnownIssuesError(f"{where}: {given} come from the [[defect]] record {defect.id!r}; remove them here")
    out = {**raw, "upstream": defect.upstream, "doc": defect.doc_line()}
    table = release_table(defect.component)
    if table is not None and release_table(_pattern_spec_name(raw.get("target"))) == table:
        if "releases" in raw:
            raise KnownIssuesError(f"{where}: releases come from the [[defect]] record {defect.id!r} (introduced "
                                   f"{defect.introduced!r}, fixed {defect.fixed!r}, against harness/releases.py); "
                                   f"remove them here")
        out["releases"] = list(defect.releases)
    return out


def known_issues_path() -> Path:
    """The file :func:`load_known_issues` reads: ``$KERNEL_ORACLE_KNOWN_ISSUES``, else :data:`DEFAULT_PATH`."""
    return Path(os.environ[ENV_VAR]) if os.environ.get(ENV_VAR) else DEFAULT_PATH


def load_known_issues(path: Optional[Path | str] = None) -> tuple[KnownIssue, ...]:
    """Every entry of ``path`` (default :func:`known_issues_path`), checked; raises :class:`KnownIssuesError`."""
    path = known_issues_path() if path is None else Path(path)
    return _default() if path == DEFAULT_PATH else _load(path)


@functools.lru_cache(maxsize=1)
def _default() -> tuple[KnownIssue, ...]:
    return _load(DEFAULT_PATH)


def _load(path: Path) -> tuple[KnownIssue, ...]:
    try:  # bounded: Note [Files as data]
        data = loads_toml(read_text(path), str(path))
    except OSError as exc:
        raise KnownIssuesError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except DataFileError as exc:
        raise KnownIssuesError(str(exc)) from None
    extra = sorted(set(data) - {"issue", "defect"})
    if extra:
        raise KnownIssuesError(f"{path}: unknown top-level keys {extra}; entries are [[issue]] tables (or "
                               f"[[defect]] records with [[defect.issue]] tables)")
    try:
        defects = parse_defects(data, path)
    except DefectError as exc:
        raise KnownIssuesError(str(exc)) from None
    named = [(raw, f"{path} [[issue]] #{i + 1}", None) for i, raw in enumerate(data.get("issue", []))]
    for d in defects:  # Note [Defect registry]: a defect's rules take its link and documents
        named += [(raw, f"{path} [[defect]] {d.id!r} [[defect.issue]] #{j + 1}", d) for j, raw in enumerate(d.issues)]
    named = [(raw, where + (f" ({raw.get('id')!r})" if isinstance(raw, dict) else ""), d) for raw, where, d in named]
    issues = tuple(_entry(_inherit(raw, defect, where), where) for raw, where, defect in named)
    seen: set = set()
    for issue in issues:
        if issue.id in seen:
            raise KnownIssuesError(f"{path}: id {issue.id!r} appears twice")
        seen.add(issue.id)
    return issues


def release_of(finding: dict, target_name: str, release: Optional[str] = None) -> Optional[str]:
    """The release a finding was made on: ``release``, the finding's ``release``, or ``name==X.Y.Z[@...]``."""
    if release:
        return str(release)
    if finding.get("release"):
        return str(finding["release"])
    m = _VERSION_IN_NAME.search(target_name)
    return m.group(1) if m else None


def match_known(finding: dict, target_name: Optional[str] = None, release: Optional[str] = None, *,
                issues: Optional[Sequence[KnownIssue]] = None) -> Optional[KnownIssue]:
    """The known issue ``finding`` (a finding record: ``target``, ``op``, ``kind``, ``message``, optional
    ``bucket`` / ``release``) is an instance of, or None (Note [Known issues]).  ``target_name``
    defaults to the finding's ``target``; ``issues`` to the checked-in file."""
    name = str(target_name if target_name is not None else finding.get("target") or "")
    rel = release_of(finding, name, release)
    for issue in (load_known_issues() if issues is None else issues):
        if issue.matches(finding, name, rel):
            return issue
    return None


def target_release(record: dict, target_name: str) -> Optional[str]:
    """The ``release`` of ``target_name``'s row in ``record``'s targets table, if it names one."""
    for t in record.get("targets") or ():
        if isinstance(t, dict) and t.get("name") == target_name and t.get("release"):
            return str(t["release"])
    return None


def mark_known(record: dict, issues: Optional[Sequence[KnownIssue]] = None, source: Optional[Path | str] = None) -> int:
    """Mark each finding of the result ``record`` that is a known issue: ``known`` = the entry's id,
    ``upstream`` = its link (a finding that no longer matches loses both); returns how many findings
    are new (not known).  The release of each finding is its target's (:func:`target_release`).
    ``record["summary"]["known_issues_file"]`` names the file the entries came from (``source``; by
    default :func:`known_issues_path`)."""
    issues = load_known_issues() if issues is None else issues
    record.setdefault("summary", {})["known_issues_file"] = str(source if source is not None else known_issues_path())
    new = 0
    for f in record.get("findings") or ():
        name = str(f.get("target") or "")
        issue = match_known(f, name, target_release(record, name), issues=issues)
        if issue is None:
            f.pop("known", None)
            f.pop("upstream", None)
            new += 1
        else:
            f["known"], f["upstream"] = issue.id, issue.upstream
        if f.get("headline"):  # it names the upstream defect a finding is
            f["headline"] = headline(f)
    return new
