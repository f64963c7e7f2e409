"""The registry of upstream defects: one record per defect, from which the known issues, the bug corpus
and the index of ``docs/upstream/`` are read.

Note [Defect registry]
----------------------
Every upstream defect this project tracks is one ``[[defect]]`` table of the checked-in known-issues file
(:data:`REGISTRY`, ``harness/known_issues.toml``):

==============  ==========================================================================================
``id``          unique, lower-case words joined by '-'
``title``       one line
``component``   the upstream code that has it (:data:`DEFECT_COMPONENTS`): an upstream target's spec name
                (``sglang``, ``sglang-trt``, ``sglang-v2``, ``sglang-csgmv``, ``flashinfer-cudnn``) or
                ``triton-compiler`` (met through our own kernels)
``op``          the op or kernel family it is of (``step_b_q``, ``lora``, ``vision``, ``csgmv``)
``upstream``    https link: the issue or pull request, else the upstream code that has the defect
``introduced``  the earliest release of the component known to have it (measured or read from the wheels)
``fixed``       the earliest release known not to have it; "" while every release has it
``doc``         optional: where this project describes it outside ``docs/upstream/``
``draft``       optional: its draft report, ``docs/upstream/*.md``
``reproducers`` optional: the standalone scripts that reproduce it (``docs/upstream/*.py``, ``tools/*.py``)
``corpus``      optional: the id of its bug-corpus entry, ``corpus/<id>.toml``
``issue``       optional ``[[defect.issue]]`` tables: the rules that recognise its findings as known
==============  ==========================================================================================

A defect's releases are read from ``introduced`` and ``fixed`` against its component's release table
(:func:`release_table`, Note [Release table] in :mod:`kernel_oracle.harness.releases`): both must be releases of
the table, and the defect holds in the table's releases from ``introduced`` up to before ``fixed``
(:attr:`Defect.releases`).  A component without a table (``triton-compiler``) names its versions as text.

Readers:

* :mod:`kernel_oracle.harness.known_issues` reads each ``[[defect.issue]]`` as a known issue whose link
  is the defect's ``upstream``, whose ``doc`` names the defect's documents (:meth:`Defect.doc_line`) and
  whose releases are the defect's;
* :mod:`kernel_oracle.jobs.bug_corpus` loads the corpus entries the defects name, each taking its title,
  link and status (``fixed`` when the defect has a ``fixed`` release, else ``known``) from its defect;
* :func:`upstream_index` writes ``docs/upstream/README.md`` (``python -m kernel_oracle.harness.defects``).

``oracle_tests/harness/test_defect_registry.py`` checks that every corpus file, every known issue and
every file of ``docs/upstream/`` is reached from exactly one registry path and that every path the
registry names exists.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from kernel_oracle.harness import releases as _releases
from kernel_oracle.harness.data_files import DataFileError, loads_toml, read_text
from kernel_oracle.harness.targets import RELEASE_NAMES

__all__ = ["DEFECT_COMPONENTS", "REGISTRY", "Defect", "DefectError", "defect_of_corpus", "load_defects", "parse_defects",
           "release_table", "upstream_index"]

REGISTRY = Path(__file__).with_name("known_issues.toml")
DEFECT_COMPONENTS = ("sglang", "sglang-trt", "sglang-v2", "sglang-csgmv", "flashinfer-cudnn", "triton-compiler")
_REQUIRED = ("id", "title", "component", "op", "upstream", "introduced", "fixed")
_OPTIONAL = ("doc", "draft", "reproducers", "corpus", "issue")
_ID = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


def release_table(name: str) -> Optional[tuple[str, ...]]:
    """The release table (Note [Release table]) of a component or an upstream target's spec name: SGLang's for
    every SGLang target kind, FlashInfer's for ``flashinfer-cudnn``; None for one without a table."""
    if name in RELEASE_NAMES:
        return _releases.SGLANG_RELEASES
    return _releases.FLASHINFER_RELEASES if name == "flashinfer-cudnn" else None


class DefectError(ValueError):
    """A malformed ``[[defect]]`` record (the message names the file, the record and the field)."""


@dataclass(frozen=True)
class Defect:
    """One upstream defect (the fields of a ``[[defect]]`` table; Note [Defect registry])."""

    id: str
    title: str
    component: str
    op: str
    upstream: str
    introduced: str
    fixed: str
    doc: str = ""
    draft: str = ""
    reproducers: tuple[str, ...] = ()
    corpus: str = ""
    issues: tuple[dict, ...] = ()  # the raw [[defect.issue]] tables, checked by the known-issues loader

    @property
    def status(self) -> str:
        """``fixed`` when a release without it is known, else ``known``."""
        return "fixed" if self.fixed else "known"

    @property
    def corpus_file(self) -> str:
        """The repository path of its corpus entry, "" for none."""
        return f"corpus/{self.corpus}.toml" if self.corpus else ""

    @property
    def releases(self) -> Optional[tuple[str, ...]]:
        """The releases it holds in: its component's table from ``introduced`` up to before ``fixed``; None
        for a component without a table."""
        table = release_table(self.component)
        return None if table is None else _releases.releases_from(table, self.introduced, self.fixed)

    def paths(self) -> tuple[str, ...]:
        """The repository paths it names: draft, reproducers, corpus entry."""
        return tuple(p for p in (self.draft, *self.reproducers, self.corpus_file) if p)

    def doc_line(self) -> str:
        """Where it is described and reproduced, one line (a known issue's ``doc``)."""
        return "; ".join(p for p in (self.doc, self.draft, self.corpus_file, *self.reproducers) if p)


def _check(raw: object, where: str) -> Defect:
    if not isinstance(raw, dict):
        raise DefectError(f"{where}: expected a table but got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(_REQUIRED) - set(_OPTIONAL))
    missing = [f for f in _REQUIRED if f not in raw]
    if unknown or missing:
        raise DefectError(f"{where}: unknown fields {unknown}, missing fields {missing}; the fields are "
                          f"{list(_REQUIRED + _OPTIONAL)}")
    for f in _REQUIRED + ("doc", "draft", "corpus"):
        if f in raw and not isinstance(raw[f], str):
            raise DefectError(f"{where}: Expected {f} to be a string but got {f}={raw[f]!r}")
    if not _ID.fullmatch(raw["id"]):
        raise DefectError(f"{where}: id={raw['id']!r} must be lower-case words joined by '-'")
    if raw["component"] not in DEFECT_COMPONENTS:
        raise DefectError(f"{where}: component={raw['component']!r}; the only valid values are "
                          f"{list(DEFECT_COMPONENTS)}")
    if not raw["upstream"].startswith("https://"):
        raise DefectError(f"{where}: upstream={raw['upstream']!r} must be an https link")
    if not raw["introduced"]:
        raise DefectError(f"{where}: introduced='' ; name the earliest release known to have it")
    table = release_table(raw["component"])
    if table is not None:
        try:
            _releases.releases_from(table, raw["introduced"], raw["fixed"])
        except ValueError as exc:
            raise DefectError(f"{where}: {exc}") from None
    reproducers = raw.get("reproducers", [])
    if not isinstance(reproducers, list) or not all(isinstance(r, str) and r for r in reproducers):
        raise DefectError(f"{where}: Expected reproducers to be a list of paths but got {reproducers!r}")
    if raw.get("draft") and not (raw["draft"].startswith("docs/upstream/") and raw["draft"].endswith(".md")):
        raise DefectError(f"{where}: draft={raw['draft']!r} must be a docs/upstream/*.md file")
    issues = raw.get("issue", [])
    if not isinstance(issues, list):
        raise DefectError(f"{where}: issue must be [[defect.issue]] tables, got {issues!r}")
    return Defect(raw["id"], raw["title"], raw["component"], raw["op"], raw["upstream"], raw["introduced"],
                  raw["fixed"], raw.get("doc", ""), raw.get("draft", ""), tuple(reproducers), raw.get("corpus", ""),
                  tuple(issues))


def parse_defects(data: dict, path: Path | str) -> tuple[Defect, ...]:
    """The ``[[defect]]`` records of a loaded registry ``data`` (read from ``path``), checked: no id and no
    corpus entry twice."""
    raws = data.get("defect", [])
    if not isinstance(raws, list):
        raise DefectError(f"{path}: defect must be [[defect]] tables")
    defects = tuple(_check(raw, f"{path} [[defect]] #{i + 1}" + (f" ({raw.get('id')!r})" if isinstance(raw, dict)
                                                                  else ""))
                    for i, raw in enumerate(raws))
    for field in ("id", "corpus"):
        seen: set = set()
        for d in defects:
            value = getattr(d, field)
            if value and value in seen:
                raise DefectError(f"{path}: {field} {value!r} appears in two [[defect]] records")
            seen.add(value)
    return defects


def load_defects(path: Optional[Path | str] = None) -> tuple[Defect, ...]:
    """Every ``[[defect]]`` of ``path`` (default :data:`REGISTRY`), checked; raises :class:`DefectError`."""
    path = REGISTRY if path is None else Path(path)
    return _registry() if path == REGISTRY else _load(path)


@functools.lru_cache(maxsize=1)
def _registry() -> tuple[Defect, ...]:
    return _load(REGISTRY)


def _load(path: Path) -> tuple[Defect, ...]:
    try:  # bounded: Note [Files as data] in harness/data_files.py
        return parse_defects(loads_toml(read_text(path), str(path)), path)
    except OSError as exc:
        raise DefectError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except DataFileError as exc:
        raise DefectError(str(exc)) from None


def defect_of_corpus(entry_id: str) -> Optional[Defect]:
    """The registry's defect whose corpus entry is ``entry_id``, or None."""
    return next((d for d in load_defects() if d.corpus == entry_id), None)


def _link(path: str) -> str:
    name = path.removeprefix("docs/upstream/")
    return f"[{name}]({name})" if name != path else f"`{path}`"


def upstream_index(defects: Optional[tuple[Defect, ...]] = None) -> str:
    """The text of ``docs/upstream/README.md``: each defect of the registry with its draft report,
    reproducers, corpus entry and known issues."""
    defects = load_defects() if defects is None else defects
    lines = ["# Upstream defects: draft reports and reproducers", "",
             "Generated from the defect registry (`[[defect]]` records of `harness/known_issues.toml`) by",
             "`python -m kernel_oracle.harness.defects > docs/upstream/README.md`; a test keeps it current.", "",
             "| defect | component, op | releases | draft | reproducers | corpus entry | known issues |",
             "|---|---|---|---|---|---|---|"]
    for d in sorted(defects, key=lambda d: (d.component, d.id)):
        releases = f"{d.introduced} .. " + (f"fixed in {d.fixed}" if d.fixed else "open")
        known = ", ".join(str(i.get("id")) for i in d.issues)
        lines.append(f"| [{d.id}]({d.upstream}) | {d.component}, {d.op} | {releases} | "
                     f"{_link(d.draft) if d.draft else ''} | {', '.join(_link(r) for r in d.reproducers)} | "
                     f"{_link(d.corpus_file) if d.corpus else ''} | {known} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(upstream_index(), end="")
