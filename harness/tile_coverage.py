"""How far a campaign's cases reach into the block structure of the code under test.

Note [Tile coverage]
--------------------
A kernel's bugs live at its block structure: the second block along a loop, the ragged tail, the split of a
reduction across programs.  A *tile model* (:mod:`kernel_oracle.harness.tiles`) says, for one case, along which
dimensions the code under test tiles and with which block: a :class:`TiledDim` per (op, dimension), with the
largest extent one program's loop or one launch's grid covers in that case, the block the code uses for that
shape, and, where the code splits a reduction across programs, how many of its parts are non-empty.

Each tiled dimension of a case falls in these classes (:data:`CLASSES`, at the real block sizes):

=========  ===========================================================================================
class      the case has
=========  ===========================================================================================
one        one block (the extent fits the block, or the block is sized to the extent)
several    two or more blocks
tail       two or more blocks and a ragged last one (the extent is no multiple of the block)
split      a reduction split across programs into two or more non-empty parts (only where the code splits)
=========  ===========================================================================================

:class:`CoverageTable` counts them per (target, op, dimension); a campaign record carries it (``coverage``:
:meth:`CoverageTable.to_record`), the reports show the shares, and :func:`shortfalls` names the multi-block
classes below a share.  A dimension whose code never splits has ``split`` None (not zero).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

__all__ = ["CLASSES", "MULTI_BLOCK", "CoverageTable", "TiledDim", "shortfalls", "slot_rows"]

CLASSES = ("one", "several", "tail", "split")
MULTI_BLOCK = ("several", "tail", "split")  # the classes past the first block


@dataclass(frozen=True)
class TiledDim:
    """One tiled dimension of one case: ``extent`` elements (the largest one program's loop or one grid axis
    covers), ``block`` the code's block along it (0: one block sized to the extent, e.g. a rank padded to a
    power of two); ``parts`` the non-empty parts of a split reduction (None: the code does not split it)."""

    op: str
    dim: str
    extent: int
    block: int
    parts: Optional[int] = None

    @property
    def blocks(self) -> int:
        if self.block <= 0 or self.extent <= 0:
            return 1
        return -(-self.extent // self.block)

    def classes(self) -> dict:
        several = self.blocks >= 2
        return {"one": not several, "several": several, "tail": several and self.extent % self.block != 0,
                "split": None if self.parts is None else self.parts >= 2}


def slot_rows(lengths, slots) -> int:
    """The most rows ``lengths`` (per segment) route to one slot of ``slots`` (per segment): the extent of a
    row dimension a code tiles per slot (0 when none)."""
    rows: dict = {}
    for n, w in zip(lengths, slots):
        rows[w] = rows.get(w, 0) + n
    return max(rows.values(), default=0)


def _count(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"coverage: {name}={value!r} is not a non-negative int")
    return value


class CoverageTable:
    """Per (target, op, dim): cases, the count of each class, the block sizes met; ``unknown``: target ->
    family -> why its block structure is not known (no table rows for it)."""

    def __init__(self) -> None:
        self.rows: dict = {}
        self.unknown: dict = {}

    def add(self, target: str, dims: Iterable[TiledDim]) -> None:
        for d in dims:
            row = self.rows.setdefault((target, d.op, d.dim), {"cases": 0, "one": 0, "several": 0, "tail": 0,
                                                               "split": None, "blocks": set()})
            row["cases"] += 1
            row["blocks"].add(d.block)
            for name, hit in d.classes().items():
                if hit is None:
                    continue
                row[name] = (row[name] or 0) + int(hit)

    def note_unknown(self, target: str, family: str, reason: str) -> None:
        self.unknown.setdefault(target, {})[family] = reason

    def merge(self, other: "CoverageTable") -> "CoverageTable":
        for key, r in other.rows.items():
            row = self.rows.setdefault(key, {"cases": 0, "one": 0, "several": 0, "tail": 0, "split": None,
                                             "blocks": set()})
            for name in ("cases", "one", "several", "tail"):
                row[name] += r[name]
            if r["split"] is not None:
                row["split"] = (row["split"] or 0) + r["split"]
            row["blocks"] |= set(r["blocks"])
        for target, families in other.unknown.items():
            self.unknown.setdefault(target, {}).update(families)
        return self

    def to_record(self) -> dict:
        """``{"rows": [{target, op, dim, blocks, cases, one, several, tail, split}], "unknown": {...}}``."""
        rows = [{"target": t, "op": op, "dim": dim, "blocks": sorted(r["blocks"]), "cases": r["cases"],
                 **{c: r[c] for c in CLASSES}} for (t, op, dim), r in sorted(self.rows.items())]
        return {"rows": rows, "unknown": {t: dict(f) for t, f in sorted(self.unknown.items())}}

    @classmethod
    def from_record(cls, data) -> "CoverageTable":
        """The table of a record's ``coverage`` (None: empty); ``ValueError`` naming a malformed field."""
        table = cls()
        if data is None:
            return table
        if not isinstance(data, dict) or not isinstance(data.get("rows", []), list):
            raise ValueError(f"coverage={data!r} is not {{'rows': [...], 'unknown': {{...}}}}")
        for i, r in enumerate(data.get("rows") or []):
            if not isinstance(r, dict) or not all(isinstance(r.get(k), str) for k in ("target", "op", "dim")):
                raise ValueError(f"coverage.rows[{i}]={r!r} lacks target, op and dim")
            counts = {k: _count(f"rows[{i}].{k}", r.get(k, 0)) for k in ("cases", "one", "several", "tail")}
            split = None if r.get("split") is None else _count(f"rows[{i}].split", r["split"])
            if any(v > counts["cases"] for v in (*counts.values(), split or 0)):
                raise ValueError(f"coverage.rows[{i}]: a class count exceeds cases={counts['cases']}")
            blocks = {_count(f"rows[{i}].blocks", b) for b in r.get("blocks") or []}
            table.rows[(r["target"], r["op"], r["dim"])] = {**counts, "split": split, "blocks": blocks}
        unknown = data.get("unknown") or {}
        if not isinstance(unknown, dict) or not all(isinstance(v, dict) for v in unknown.values()):
            raise ValueError(f"coverage.unknown={unknown!r} is not target -> {{family: reason}}")
        table.unknown = {str(t): {str(f): str(why) for f, why in v.items()} for t, v in unknown.items()}
        return table


def shortfalls(record_or_table, minimum: float, classes: tuple = MULTI_BLOCK) -> list:
    """``[(target, op, dim, class, share)]`` of the rows whose share of a class in ``classes`` is below
    ``minimum``; a class the code cannot have is not a shortfall: ``split`` None (it never splits), or every
    block sized to the extent (block 0: one block by construction)."""
    table = record_or_table if isinstance(record_or_table, CoverageTable) else \
        CoverageTable.from_record(record_or_table)
    out = []
    for row in table.to_record()["rows"]:
        for c in classes:
            if row[c] is None or not row["cases"] or not any(row["blocks"]):
                continue
            share = row[c] / row["cases"]
            if share < minimum:
                out.append((row["target"], row["op"], row["dim"], c, share))
    return out
