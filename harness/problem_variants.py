"""What every family's plainer variants of a problem share (its ``simplifications()`` and ``feature_variants()``,
Note [Minimal examples] in :mod:`kernel_oracle.harness.simplify`, which tries them), and the shape class of a
batch of lengths.  Plain dataclass edits: no torch, nothing of the harness."""

from __future__ import annotations

import dataclasses

__all__ = ["length_class", "replace_changed", "shorter"]


def replace_changed(problem, **changes):
    """``problem`` with ``changes``, or None where it already has every one of them (no variant)."""
    changed = {k: v for k, v in changes.items() if getattr(problem, k) != v}
    return dataclasses.replace(problem, **changed) if changed else None


def shorter(n: int) -> list:
    """The shorter lengths worth trying for a segment or sequence of ``n``: 1, 2, half, one less."""
    return sorted({x for x in (1, 2, n // 2, n - 1) if 0 < x < n})


def length_class(lengths) -> str:
    """The shape class of a batch of sequence or segment ``lengths``: ``empty`` (none above 0), ``long``
    (one of 1024 or more), else ``ragged``."""
    lens = [n for n in lengths if n]
    if not lens:
        return "empty"
    return "long" if max(lens) >= 1024 else "ragged"
