"""The real-bug corpus: upstream defects the suite must catch, one TOML file per entry in ``corpus/``.

Note [Bug corpus]
-----------------
A fuzzer that never met a real bug proves little.  Each entry of ``corpus/`` is the test of one upstream
defect of the registry (Note [Defect registry] in :mod:`kernel_oracle.harness.defects`: the ``[[defect]]``
whose ``corpus`` is the entry's id gives its title, link and status, ``fixed`` when the defect names a
release without it, else ``known``): the releases it is measured failing on (``buggy``) and passing on
(``fixed``; empty while the status is ``known``), the device it needs, the finding kind it must
produce (``expect``, optionally ``message_contains``), optionally the target ``configuration``
it needs (``lora_opti=on,cublas=on``: the entry runs on ``sglang-trt==X.Y.Z@lora_opti=on,cublas=on``),
and one or more minimal cases as plain problem dicts
(:func:`kernel_oracle.harness.problems.problem_from_dict` keys, plus an optional ``mutation``), all
of one family.  :func:`run_entry` runs the cases in order on one target (the order matters for
engines with caches) and the first failing verdict is the entry's outcome.  ``reach`` says, in one
line, whether SGLang's own layers can make the failing call or only a direct caller can (the
entry's releases and cases are exact either way).

``oracle_tests/kernel_oracle/test_bug_corpus.py`` requires every entry to fail as expected on each buggy release
and pass on each fixed one; ``kernel-oracle matrix`` runs them beside its campaigns, as a campaign runs a
case (Note [Cases outside a campaign] in :mod:`kernel_oracle.fuzz.isolated`): in a worker, and an entry
with a case its target declines is not run there (its result says so).  Entries are
validated when loaded: an unknown field or a problem key the harness does not know is an error
naming the file and the field (a typo must not silently drop a case's defining parameter).  A folder
given to ``--corpus`` other than the installed corpus holds self-contained entries: each also gives its
``title``, ``upstream`` and ``status``.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from kernel_oracle.harness.check import Case, check_case
from kernel_oracle.harness.data_files import DataFileError, loads_toml, read_text
from kernel_oracle.harness.defects import REGISTRY, Defect, defect_of_corpus, load_defects
from kernel_oracle.harness.family import family_names, get_family
from kernel_oracle.harness.mutations import Mutation
from kernel_oracle.harness.problems import problem_from_dict

__all__ = ["CORPUS_DIR", "CorpusError", "Entry", "EntryOutcome", "in_process", "known_cases_for", "known_cases_of",
           "load_corpus",
           "load_entry", "run_entry"]


def _corpus_dir() -> Path:
    """The folder of package ``kernel_oracle.corpus`` (the repository's ``corpus/``; in a wheel, installed
    beside the code), found with :mod:`importlib.resources` as an installed copy lays it out."""
    return Path(str(importlib.resources.files("kernel_oracle.corpus")))


CORPUS_DIR = _corpus_dir()
_FIELDS = {"id", "title", "upstream", "target", "device", "status", "buggy", "fixed", "expect", "message_contains",
           "cases", "configuration", "reach"}
_REQUIRED = _FIELDS - {"message_contains", "configuration", "reach"}
_FROM_DEFECT = {"title", "upstream", "status"}  # a registry entry's, from its defect
_KINDS = ("mismatch", "contract", "validation-gap", "crash")


class CorpusError(ValueError):
    """A malformed corpus entry (the message names the file and the field)."""


@dataclass(frozen=True)
class Entry:
    """One upstream defect; ``cases`` run in order on one target."""

    id: str
    title: str
    upstream: str
    target: str  # an upstream target's spec name: "sglang", "sglang-trt", "flashinfer-cudnn"
    device: str
    status: str  # "fixed" | "known"
    buggy: tuple[str, ...]
    fixed: tuple[str, ...]
    expect: str
    cases: tuple[Case, ...]
    message_contains: str = ""
    path: Optional[Path] = None
    configuration: str = ""  # "key=value[,key=value...]" of the target spec, "" for none
    reach: str = ""  # who can make the failing call: SGLang's own layers, or a direct caller only

    @property
    def family(self) -> str:
        """The op family of the entry's cases (``lora`` or ``vision``)."""
        return self.cases[0].family

    def spec(self, release: str) -> str:
        """The target spec of this entry's target at ``release`` (e.g. ``sglang==0.5.12``,
        ``sglang-trt==0.5.23@cublas=on,lora_opti=on``)."""
        return f"{self.target}=={release}" + (f"@{self.configuration}" if self.configuration else "")


@dataclass(frozen=True)
class EntryOutcome:
    """What one entry did on one target: ``failed`` as expected or not, with the verdict's kind and text."""

    failed: bool
    kind: Optional[str]
    message: str
    case_index: Optional[int]

    def matches(self, entry: Entry) -> bool:
        """Whether this is the entry's defect: its finding kind and (if given) message fragment."""
        return self.failed and self.kind == entry.expect and entry.message_contains in self.message


def _problem(path: Path, i: int, d: dict):
    if not isinstance(d, dict) or d.get("family") not in family_names():
        raise CorpusError(f"{path}: cases[{i}].problem needs family = "
                          f"{' or '.join(map(repr, family_names()))} (got {d!r})")
    cls = get_family(d["family"]).resolve("problem")
    known = {f.name for f in dataclasses.fields(cls) if f.init} | {"family"}
    unknown = sorted(set(d) - known)
    if unknown:
        raise CorpusError(f"{path}: cases[{i}].problem has unknown keys {unknown}; the only valid keys are "
                          f"{sorted(known)}")
    try:
        return problem_from_dict(d)
    except (TypeError, ValueError) as exc:
        raise CorpusError(f"{path}: cases[{i}].problem is invalid: {exc}") from None


def _in_corpus_dir(path: Path) -> bool:
    try:
        return path.parent.resolve() == CORPUS_DIR.resolve()
    except OSError:
        return False


def load_entry(path: str | Path, defect: Optional[Defect] = None) -> Entry:
    """Read and validate one corpus file; one of :data:`CORPUS_DIR` takes its title, link and status from
    its ``defect`` of the registry (by default the defect naming it: Note [Defect registry] in
    :mod:`kernel_oracle.harness.defects`), any other file gives them."""
    path = Path(path)
    try:  # bounded: Note [Files as data] in harness/data_files.py
        data = loads_toml(read_text(path), str(path))
    except OSError as exc:
        raise CorpusError(f"{path}: {type(exc).__name__}: {exc}") from None
    except DataFileError as exc:
        raise CorpusError(str(exc)) from None
    if defect is None and _in_corpus_dir(path):
        defect = defect_of_corpus(path.stem)
        if defect is None:
            raise CorpusError(f"{path}: no [[defect]] of the registry ({REGISTRY}) names it; add its defect there "
                              f"with corpus = {path.stem!r}")
    if defect is not None:
        given = sorted(set(data) & _FROM_DEFECT)
        if given:
            raise CorpusError(f"{path}: {given} come from the registry's defect {defect.id!r}; remove them here")
        data = {**data, "title": defect.title, "upstream": defect.upstream, "status": defect.status}
    unknown, missing = sorted(set(data) - _FIELDS), sorted(_REQUIRED - set(data))
    if unknown or missing:
        raise CorpusError(f"{path}: unknown fields {unknown}, missing fields {missing}; the fields are "
                          f"{sorted(_FIELDS)}")
    if data["status"] not in ("fixed", "known"):
        raise CorpusError(f"{path}: status={data['status']!r}; the only valid values are 'fixed', 'known'")
    if (data["status"] == "fixed") != bool(data["fixed"]):
        raise CorpusError(f"{path}: status={data['status']!r} with fixed={data['fixed']!r}; a fixed entry names "
                          f"its fixed releases, a known one has none")
    if not data["buggy"]:
        raise CorpusError(f"{path}: buggy=[] ; name at least one release that has the defect")
    if data["expect"] not in _KINDS:
        raise CorpusError(f"{path}: expect={data['expect']!r}; the only valid values are {list(_KINDS)}")
    if data["device"] not in ("cpu", "cuda"):
        raise CorpusError(f"{path}: device={data['device']!r}; the only valid values are 'cpu', 'cuda'")
    if not data["cases"]:
        raise CorpusError(f"{path}: cases=[] ; give at least one minimal case")
    cases = []
    for i, c in enumerate(data["cases"]):
        mutation = c.get("mutation")
        cases.append(Case(_problem(path, i, c.get("problem")),
                          Mutation.from_dict(mutation) if mutation is not None else None))
    if len({c.family for c in cases}) != 1:
        raise CorpusError(f"{path}: cases mix the families {sorted({c.family for c in cases})}; an entry is one "
                          f"family's defect")
    configuration = _configuration(path, data.get("configuration", ""))
    if data["id"] != path.stem:
        raise CorpusError(f"{path}: id={data['id']!r} differs from the file name; name the file {data['id']}.toml")
    return Entry(id=data["id"], title=data["title"], upstream=data["upstream"], target=data["target"],
                 device=data["device"], status=data["status"], buggy=tuple(data["buggy"]),
                 fixed=tuple(data["fixed"]), expect=data["expect"], cases=tuple(cases),
                 message_contains=data.get("message_contains", ""), path=path, configuration=configuration,
                 reach=str(data.get("reach", "")))


def _configuration(path: Path, text) -> str:
    """The canonical ``key=value,...`` of an entry's configuration (sorted by key, as target specs are)."""
    from kernel_oracle.harness.targets import TargetError, TargetSpec

    if not text:
        return ""
    try:
        spec = TargetSpec.parse(f"sglang==0@{text}")
    except (TargetError, TypeError) as exc:
        raise CorpusError(f"{path}: configuration={text!r} is not key=value[,key=value...]: {exc}") from None
    return ",".join(f"{k}={v}" for k, v in spec.configuration)


def load_corpus(directory: str | Path | None = None) -> list[Entry]:
    """Every entry of ``directory``, sorted by id: by default the entries the registry's defects name (in
    :data:`CORPUS_DIR`, the installed corpus), else every ``*.toml`` file of ``directory``."""
    directory = Path(directory) if directory is not None else CORPUS_DIR
    if directory.is_dir() and directory.resolve() == CORPUS_DIR.resolve():
        return sorted((load_entry(directory / f"{d.corpus}.toml", d) for d in load_defects() if d.corpus),
                      key=lambda e: e.id)
    if not directory.is_dir():
        raise CorpusError(f"corpus directory {directory} does not exist; pass --corpus DIR (a folder of "
                          f"corpus entries)")
    return [load_entry(p) for p in sorted(directory.glob("*.toml"))]


def run_entry(entry: Entry, check: Callable) -> EntryOutcome:
    """Run ``entry``'s cases in order through ``check(case) -> Verdict``: a target in a worker, as ``matrix``
    runs them (:class:`kernel_oracle.fuzz.isolated.IsolatedTarget`), or :func:`in_process` for a test."""
    for i, case in enumerate(entry.cases):
        verdict = check(case)
        if not verdict.ok:
            return EntryOutcome(True, verdict.kind, verdict.message or "", i)
    return EntryOutcome(False, None, "", None)


def in_process(target, device: str) -> Callable:
    """``check(case)`` of :func:`run_entry` on ``target`` (a resolved Target) in this process (a test's)."""
    return lambda case: check_case(target, case, device)


def known_cases_for(spec, directory: str | Path | None = None) -> tuple:
    """``(label, Case)`` of every corpus case whose entry tests the target ``spec`` (its name and
    configuration: ``sglang==0.5.12`` gets the ``sglang`` entries), the ``known_cases`` a campaign names
    its findings by (Note [Known cases] in :mod:`kernel_oracle.fuzz.known_cases`); none when ``directory``
    is not a corpus folder."""
    try:
        entries = load_corpus(directory)
    except CorpusError:
        return ()
    return known_cases_of(entries, spec)


def known_cases_of(entries, spec) -> tuple:
    """:func:`known_cases_for` of loaded corpus ``entries``."""
    from kernel_oracle.harness.targets import TargetSpec

    parsed = TargetSpec.parse(spec)
    configuration = ",".join(f"{k}={v}" for k, v in parsed.configuration)
    return tuple(({"id": e.id, "title": e.title, "upstream": e.upstream}, case) for e in entries
                 if e.target == parsed.name and e.configuration == configuration for case in e.cases)
