"""What a campaign shows on the console while it runs: the progress bar and each finding as it is found.

A finding prints once, when it is recorded: its headline (:mod:`harness.headline`), the ``Where:``
line of its first failing element (the locator :func:`reference.tolerance.compare` puts in the
message) and its repro line.  Later cases of the same root cause print nothing; the bar's postfix
counts them (``hits``).  Lines go through ``tqdm.write`` while a bar is up, so they do not tear it.
"""

from __future__ import annotations

from typing import Optional

__all__ = ["Progress", "finding_block", "print_finding", "where_line"]


class Progress:
    """A tqdm bar of executed cases (none when disabled or tqdm is absent: same results)."""

    def __init__(self, total: Optional[int], enabled: bool, desc: str):
        self.bar = None
        if enabled:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, desc=desc, unit="case", dynamic_ncols=True)
            except ImportError:  # tqdm is optional at run time: no bar, same results
                self.bar = None

    def update(self, n: int = 1, **postfix) -> None:
        if self.bar is not None:
            self.bar.update(n)
            if postfix:
                self.bar.set_postfix(**postfix, refresh=False)

    def write(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text)
        else:
            print(text, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def where_line(finding: dict) -> Optional[str]:
    """``Where: token=.., head=.., segment=.., slot=..`` of the first failing element: the message's own
    line when it has one, else the one its figures' ``where`` locator gives; None without a locator."""
    for line in str(finding.get("message") or "").splitlines():
        if line.startswith("Where: "):
            return line
    where = (finding.get("figures") or {}).get("where")
    if isinstance(where, dict) and where:
        return "Where: " + ", ".join(f"{k}={v}" for k, v in where.items())
    return None


def finding_block(finding: dict, found: Optional[str] = None) -> str:
    """The lines a new finding prints: ``FINDING <id>: <headline>``, its ``Where:`` line, its repro.
    ``found``: the id just recorded, when it folded into ``finding``, an earlier one of the same root
    cause (Note [One root cause across ops] in :mod:`harness.root_causes`): then one line says so."""
    from kernel_oracle.harness.headline import headline

    text = finding.get('headline') or headline(finding)
    if found is not None and found != finding["id"]:
        return f"FINDING {finding['id']} again ({found} is the same root cause): {text}"
    lines = [f"FINDING {finding['id']}: {text}"]
    where = where_line(finding)
    if where:
        lines.append(f"  {where}")
    lines.append(f"  repro: {finding['repro']}")
    return "\n".join(lines)


def print_finding(findings: list, bar: Optional[Progress], found: str) -> None:
    """Print the finding ``found`` now (above the progress bar, when there is one): the row of ``findings``
    (the record's, of one root cause each) that it is or that it folded into (:func:`finding_block`)."""
    text = finding_block(next(f for f in findings if found in (f["id"], *f.get("folded", ()))), found)
    if bar is not None:
        bar.write(text)
    else:
        print(text, flush=True)
