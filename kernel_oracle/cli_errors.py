"""Usage errors in one line (SPEC.md: exit 2, one line, no traceback).

argparse reports a bad option with the whole usage block and then the error; a subcommand that
calls :func:`one_line_errors` on its parser prints only ``kernel-oracle CMD: error: ...`` and a
pointer to ``--help``, and exits 2 as argparse does.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import NoReturn

__all__ = ["finite_float", "one_line_errors"]


def one_line_errors(parser: argparse.ArgumentParser) -> None:
    """Make ``parser`` report usage errors as one line on stderr, exit code 2."""

    def error(message: str) -> NoReturn:
        text = " ".join(str(message).split())
        sys.stderr.write(f"{parser.prog}: error: {text} (see {parser.prog} --help)\n")
        sys.exit(2)

    parser.error = error  # type: ignore[method-assign]


def finite_float(text: str, what: str = "a number") -> float:
    """An argparse type: ``float(text)``, refusing NaN and infinities with the reason (they compare
    false with every bound, so a NaN budget never ends and a NaN threshold never fires)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what} but got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected {what} but got {text!r}: only finite values (NaN and infinities "
                                         "are refused)")
    return value
