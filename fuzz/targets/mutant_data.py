"""A mutant as data: its textual patches and how they apply (Note [Mutants] in :mod:`.mutants`).

Kept apart from the table and the builders, so each source of mutants (our ``kernels`` package in
:mod:`.mutants`, a release's csgmv files in :mod:`.mutants_csgmv`) defines its mutants with the same
record and the same patching, and the table imports each without an import cycle.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from kernel_oracle.harness.family import FAMILY_OPS

__all__ = ["SOURCES", "Mutant", "MutantError", "Patch", "apply_patches"]

# where a mutant's patched copy comes from -> how its errors name a file
SOURCES = {"kernels": "kernels/", "sglang-csgmv": "the sglang-csgmv release's "}


class MutantError(RuntimeError):
    """A mutant whose anchor no longer occurs in the source it patches (update the mutant)."""


@dataclass(frozen=True)
class Patch:
    """Replace ``anchor`` by ``replacement`` in ``path``, a file of the mutant's source (under ``kernels/``
    for our kernels; a release's csgmv file name for ``sglang-csgmv``); ``count``: how many occurrences
    (None = all of them; there must be at least one, and at least ``count``).  ``anchor`` and
    ``replacement`` may be equal-length tuples of alternatives (the first anchor that occurs wins),
    for kernels that are mid-rewrite."""

    path: str
    anchor: str | tuple[str, ...]
    replacement: str | tuple[str, ...]
    count: Optional[int] = None

    def pairs(self) -> list[tuple[str, str]]:
        anchors = (self.anchor,) if isinstance(self.anchor, str) else tuple(self.anchor)
        repls = (self.replacement,) if isinstance(self.replacement, str) else tuple(self.replacement)
        if len(anchors) != len(repls):
            raise MutantError(f"patch of kernels/{self.path}: {len(anchors)} anchors but {len(repls)} replacements")
        return list(zip(anchors, repls))


@dataclass(frozen=True)
class Mutant:
    name: str
    family: str
    description: str
    patches: tuple[Patch, ...]
    categories: tuple[str, ...] = ("valid",)
    ops: Optional[tuple[str, ...]] = None  # ops to search (None: all of the family)
    # the fp32 precision the copy declares for its family's ops (None: as our kernels), and the dtypes
    # searched (None: all): a TF32 mutant emulates the tensor cores on the interpreter, fp32 only
    precision: Optional[str] = None
    dtypes: Optional[tuple[str, ...]] = None
    source: str = "kernels"  # what the copy is of: a key of SOURCES

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z0-9_]+", self.name):
            raise MutantError(f"mutant name {self.name!r} must be lower-case letters, digits and underscores")
        if self.family not in FAMILY_OPS:
            raise MutantError(f"mutant {self.name!r}: family={self.family!r}; the only valid values are "
                              + ", ".join(FAMILY_OPS))
        if not self.patches:
            raise MutantError(f"mutant {self.name!r} has no patches")
        if self.source not in SOURCES:
            raise MutantError(f"mutant {self.name!r}: source={self.source!r}; the only valid values are "
                              + ", ".join(SOURCES))


def apply_patches(mutant: Mutant, files: dict[str, str]) -> dict[str, str]:
    """``files`` (relative path -> source) with the mutant's patches applied; raises on a missing anchor."""
    where = SOURCES[mutant.source]
    out = dict(files)
    for p in mutant.patches:
        if p.path not in out:
            raise MutantError(f"mutant {mutant.name!r}: {where}{p.path} does not exist; update the mutant")
        src = out[p.path]
        for anchor, replacement in p.pairs():
            n = src.count(anchor)
            if n and (p.count is None or n >= p.count):
                out[p.path] = src.replace(anchor, replacement, -1 if p.count is None else p.count)
                break
        else:
            raise MutantError(f"mutant {mutant.name!r}: anchor not found in {where}{p.path} "
                              f"(the kernel changed; update the mutant's anchor): {p.anchor!r}")
    return out
