"""The one-sentence headline of a finding: what is wrong, where, in which dtypes, how many cases.

A maintainer reads the headline first (console, report, matrix): ``step_b_q: the first or last row
of each segment differs from the reference (float16, bfloat16, float32; 37 failing cases)``.  It is
built from the finding record alone (its op, kind, bucket, ``regions``: the region classes of its
cases, the most frequent first, ``depends_on``: the metadata its minimal example needs, ``dtypes`` and
``count``, and the upstream defect it is: ``corpus``, ``known``),
so a record of any schema version gets one (a record with a single ``dtype`` lists that dtype).
Standard library only: reports import it.
"""

from __future__ import annotations

import re

from kernel_oracle.harness.family import family_names, get_family
from kernel_oracle.harness.features import describe

__all__ = ["REGION_WORDS", "dtypes_of", "example_text", "headline", "plural", "upstream_names"]

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
        verb = "differ" if _where(finding).startswith(("rows", "heads", "the rows", "the CUDA", "some")) else "differs"
        return f"{_where(finding)} {verb} from the reference{_elsewhere(finding)}{_depends(finding)}"
    if kind == "contract":
        found = _CONTRACT.search(str(finding.get("expected") or ""))
        if found is None and message.startswith(("raised ", "no error raised")):
            return f"raises the wrong error or none: {message}"
        if found is None:  # what it did besides its result: wrote an input, freed one, replaced the oracle's code
            return message
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


# a pull request or issue on GitHub: named by its repository and number
_GITHUB = re.compile(r"https://github\.com/[^/\s]+/([^/\s]+)/(pull|issues)/(\d+)")


def upstream_names(finding: dict) -> list:
    """The upstream defects ``finding`` is, as a headline names them: each bug-corpus entry it matches
    (``corpus``) and the known issue it is (``known``, ``upstream``): ``sglang PR #28371`` for a link to a
    pull request or an issue, else the entry's id; each once."""
    pairs = [(e.get("id"), e.get("upstream")) for e in finding.get("corpus") or () if isinstance(e, dict)]
    pairs.append((finding.get("known"), finding.get("upstream") if finding.get("known") else None))
    named = []
    for label, link in pairs:
        found = _GITHUB.match(str(link or ""))
        if found:
            named.append(f"{found.group(1)} {'PR' if found.group(2) == 'pull' else 'issue'} #{found.group(3)}")
        elif label:
            named.append(str(label))
    return list(dict.fromkeys(named))


def headline(finding: dict) -> str:
    """One sentence: ``<op>[, <more ops>]: <what is wrong, where>[ <the call features it needs>] (<dtypes>;
    <n> failing case(s))[; known upstream: <PR or issue>]``; a root cause shown by several ops (a broken
    contract, a crash, a defect of the routing they share) lists every op its cases showed it in (``ops``),
    and one that is a known upstream defect names it (:func:`upstream_names`)."""
    count = finding.get("count", 1)
    count = count if isinstance(count, int) and count > 0 else 1
    dtypes = ", ".join(dtypes_of(finding)) or "-"
    cases = f"{count} failing case" + ("" if count == 1 else "s")
    needs = describe((finding.get("bucket") or {}).get("needs"))
    ops = ", ".join(dict.fromkeys([str(finding.get("op") or "-"), *(str(o) for o in finding.get("ops") or ())]))
    upstream = upstream_names(finding)
    known = f"; known upstream: {', '.join(upstream)}" if upstream else ""
    return f"{ops}: {_what(finding)}{' ' + needs if needs else ''} ({dtypes}; {cases}){known}"


def plural(n: int, word: str) -> str:
    """``"1 segment"``, ``"3 segments"``."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def _fields_text(p: dict) -> str:
    """A problem of a family without words of its own (its record's ``words``): every field that is set, as
    ``name value``."""
    return ", ".join(f"{k} {list(v) if isinstance(v, (list, tuple)) else v}" for k, v in p.items()
                     if k not in ("family", "op", "dtype") and v not in (None, False, (), []))


def example_text(example: dict) -> str:
    """One example of a finding in words a reader can rebuild it from: ``step_b_q float32: 1 segment of
    [2] rows, slots [0], ranks [16] (R=16), scalings [1.0], H=1, permuted``, and its mutation.
    ``example``: a finding record or one of its ``examples`` (``problem``: the case as a dict)."""
    case = example.get("problem") if isinstance(example.get("problem"), dict) else {}
    p = case.get("problem") if isinstance(case.get("problem"), dict) else {}
    op, dtype = example.get("op") or p.get("op") or "-", example.get("dtype") or p.get("dtype") or "-"
    if not p:
        return f"{op} {dtype} {example.get('shape_class') or '-'}"
    family = p.get("family")
    words = get_family(family).resolve("words") if family in family_names() else None  # its record's, or
    text = f"{op} {dtype}: " + (words or _fields_text)(p)  # every field that is set
    m = case.get("mutation")
    if isinstance(m, dict) and m.get("kind"):
        text += f"; mutation {m['kind']} (index {m.get('index', 0)}, amount {m.get('amount', 1)})"
    if example.get("seen_through"):
        text += f"; seen through malformed metadata ({example['seen_through']})"
    return text
