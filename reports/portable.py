"""A report names no folder of the machine that made it.

Note [Portable pages]
---------------------
A page travels (a CI artifact, an issue attachment), and the record behind it holds this machine's absolute
paths: the case files of its repro commands, the known-issues file, the wheel a release was loaded from.
Before rendering, :func:`portable_result` rewrites every string of the record: a path under the record's own
folder becomes relative to it (``cases/F0002-mismatch-step_b_q.pt``: the page sits beside the record),
kernel-oracle's own files are named from the package (``harness/known_issues.toml``), the cache as
``$KERNEL_ORACLE_CACHE`` and the home folder as ``~``.  The record file itself is left as it is.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional

from kernel_oracle.reports.model import Result

__all__ = ["portable", "portable_result", "portable_roots"]


def portable_roots(source: Optional[str]) -> list:
    """``(absolute folder, what a page writes for it)``, the longest folder first: the folder of the record
    ``source`` (``""``: paths under it become relative), kernel-oracle's own files, the cache, the home."""
    from kernel_oracle.harness.device import cache_root

    package = Path(__file__).resolve().parent.parent  # the folder holding harness/, reports/, ...
    roots = {str(package): "", cache_root(): "$KERNEL_ORACLE_CACHE", os.path.expanduser("~"): "~"}
    if source:
        for folder in {os.path.abspath(os.path.dirname(source)), os.path.dirname(os.path.realpath(source))}:
            roots[folder] = ""
    return sorted(((k, v) for k, v in roots.items() if k not in ("", os.sep)), key=lambda kv: -len(kv[0]))


def portable(text: str, roots: list) -> str:
    """``text`` with each folder of ``roots`` replaced as it says (a path under it keeps its tail)."""
    for folder, name in roots:
        if folder not in text:
            continue
        text = text.replace(folder + os.sep, name + os.sep if name else "")
        text = re.sub(re.escape(folder) + r"(?![\w./-])", name or ".", text)
    return text


def _walk(value, roots: list):
    if isinstance(value, str):
        return portable(value, roots)
    if isinstance(value, list):
        return [_walk(v, roots) for v in value]
    if isinstance(value, dict):
        return {k: _walk(v, roots) for k, v in value.items()}
    return value


def portable_result(result: Result) -> Result:
    """``result`` with every string of its record portable (Note [Portable pages]); its source named by
    its file name."""
    roots = portable_roots(result.source)
    source = os.path.basename(result.source) if result.source else None
    return Result.from_dict(_walk(result.raw, roots), source=source)
