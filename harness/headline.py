"""The one-sentence headline of a finding: what is wrong, where, in which dtypes, how many cases.

A maintainer reads the headline first (console, report, matrix): ``step_b_q: the first or last row
of each segment differs from the reference (float16, bfloat16, float32; 37 failing cases)``.  It is
built from the finding record alone (its op, kind, bucket, ``regions``: the region classes of its
cases, the most frequent first, ``depends_on``: the metadata its minimal example needs, ``dtypes`` and
``count``),
so a record of any schema version gets one (a record with a single ``dtype`` lists that dtype).
Standard library only: reports import it.
"""

from __future__ import annotations

import re

from kernel_oracle.harness.features import describe

__all__ = ["REGION_WORDS", "dtypes_of", "headline"]

# the rows or elements each region class of harness.buckets names, in words
REGION_WORDS = {
    "stale graph metadata": "the CUDA-graph padding rows (read through stale graph metadata)",
    "padding": "rows no segment routes",
    "beyond rank": "rows past the rank read",
    "segment boundary": "the first or last row of each segment",
    "tail tile": "the rows or columns of the partial last tile",
    "head": "heads other than head 0",
    "slot": "the rows of some slots only",
    "everywhere": "every row",
}
_DTYPE_ORDER = ("float16", "bfloat16", "float32", "float64")
_CONTRACT = re.compile(r"\[(upstream|strict) contract ([\w.]+)\]")


def dtypes_of(finding: dict) -> list:
    """The finding's dtypes in a fixed order: its ``dtypes`` list, else its single ``dtype``."""
    got = finding.get("dtypes")
    names = [str(d) for d in got] if isinstance(got, list) and got else (
        [str(finding["dtype"])] if finding.get("dtype") else [])
    known = [d for d in _DTYPE_ORDER if d in names]
    return known + sorted(set(names) - set(known))


def _where(finding: dict) -> str:
    regions = [r for r in finding.get("regions") or () if r in REGION_WORDS]
    if not regions:
        where = str((finding.get("bucket") or {}).get("where") or "")
        regions = [where] if where in REGION_WORDS else []
    if not regions:
        return "some values"
    return REGION_WORDS[regions[0]]


def _elsewhere(finding: dict) -> str:
    """``, and in other cases every row`` for the regions past the first (they show in fewer cases)."""
    rest = [REGION_WORDS[r] for r in dict.fromkeys(finding.get("regions") or ()) if r in REGION_WORDS][1:]
    return f", and in other cases {', '.join(rest)}" if rest else ""


def _depends(finding: dict) -> str:
    """``; it depends on the permutation`` for the features the finding's minimal example needs (Note
    [Minimal examples] in :mod:`harness.simplify`: without them it passes)."""
    from kernel_oracle.harness.simplify import FEATURES

    named = [FEATURES[f] for f in finding.get("depends_on") or () if f in FEATURES]
    if not named:
        return ""
    return "; it depends on " + (named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1])


def _what(finding: dict) -> str:
    kind = str(finding.get("kind") or "")
    bucket = finding.get("bucket") or {}
    message = next((ln.strip() for ln in str(finding.get("message") or "").splitlines() if ln.strip()), kind)
    if kind == "mismatch":
        if bucket.get("cause") == "output" or "output" in (finding.get("regions") or ()):
            return "the output's shape, dtype or return value is wrong"
        verb = "differ" if _where(finding).startswith(("rows", "heads", "the rows", "the CUDA")) else "differs"
        return f"{_where(finding)} {verb} from the reference{_elsewhere(finding)}{_depends(finding)}"
    if kind == "contract":
        found = _CONTRACT.search(str(finding.get("expected") or ""))
        if found is None:
            return f"raises the wrong error or none: {message}"
        happened = message.split("; expected ", 1)[0]
        wanted = str(finding["expected"])[:found.start()].rstrip()
        return f"breaks the {found.group(1)} contract {found.group(2)}, {wanted}: {happened}"
    if kind == "validation-gap":
        what = bucket.get("cause") or message
        if finding.get("consequence") in ("defined rows changed", "out of bounds"):  # Note [Malformed consequences]
            rows = f": {finding['rows']}" if finding.get("rows") else ""
            return f"accepts malformed input ({what}) and {finding['consequence']}{rows}"
        return f"accepts malformed input ({what})"
    if kind == "hang":
        return "does not answer within the case timeout"
    return f"{kind}: {message}" if kind != "crash" else f"crashes: {message}"


def headline(finding: dict) -> str:
    """One sentence: ``<op>[, <more ops>]: <what is wrong, where>[ <the call features it needs>] (<dtypes>;
    <n> failing case(s))``; a root cause that is no op's alone (a broken contract, a crash) lists every op
    its cases showed it in (``ops``)."""
    count = finding.get("count", 1)
    count = count if isinstance(count, int) and count > 0 else 1
    dtypes = ", ".join(dtypes_of(finding)) or "-"
    cases = f"{count} failing case" + ("" if count == 1 else "s")
    needs = describe((finding.get("bucket") or {}).get("needs"))
    ops = ", ".join(dict.fromkeys([str(finding.get("op") or "-"), *(str(o) for o in finding.get("ops") or ())]))
    return f"{ops}: {_what(finding)}{' ' + needs if needs else ''} ({dtypes}; {cases})"
