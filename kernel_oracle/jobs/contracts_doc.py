"""Print the contract table (:data:`reference.contracts.CONTRACTS`) as Markdown.

``python -m kernel_oracle.jobs.contracts_doc`` writes the table that docs/reference.md includes, so the
documentation never restates a message by hand: upstream rows first (SGLang's exact text, in
resolution order), then our strict rows, kept visibly apart.
"""

from __future__ import annotations

import sys

from kernel_oracle.reference.contracts import strict_contracts, upstream_contracts

__all__ = ["render_contracts"]


def _cell(text: str) -> str:
    return "`" + text.replace("|", "\\|") + "`"


def render_contracts() -> str:
    lines = []
    for title, rows in (("Upstream contracts (SGLang's exact text and type; never edited)", upstream_contracts()),
                        ("Strict validation (ours; only what upstream silently accepts)", strict_contracts())):
        lines += [f"#### {title}", "", "| id | api | order | type | message template |", "|---|---|---|---|---|"]
        for c in rows:
            order = "" if c.order is None else str(c.order)
            lines.append(f"| `{c.id}` | {c.api} | {order} | `{c.exc_type.__name__}` | {_cell(c.template)} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    sys.stdout.write(render_contracts())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
