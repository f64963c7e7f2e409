"""What every part of the main job writes into its record when it cannot run (Note [The main job])."""

from __future__ import annotations

import os
import traceback

__all__ = ["part_failed", "raised", "reason"]

FRAMES = 3  # the innermost frames a part's failure names: where it was raised, and the two calls above


def reason(exc: BaseException) -> str:
    """``Type: message`` of an exception, for a note."""
    return f"{type(exc).__name__}: {exc}"


def raised(exc: BaseException) -> str:
    """``raised Type: message (at file.py:LINE in fn <- file.py:LINE in caller ...)``: an unexpected
    failure of our own in one line, with where it was raised (the innermost :data:`FRAMES` frames), so a
    record that keeps only this line still says where to look."""
    frames = traceback.extract_tb(exc.__traceback__)[-FRAMES:][::-1]
    where = " <- ".join(f"{os.path.basename(f.filename)}:{f.lineno} in {f.name}" for f in frames)
    return f"raised {reason(exc)}" + (f" (at {where})" if where else "")


def part_failed(record: dict, text: str) -> None:
    """A part that could not run: a note for the reader and a non-zero exit (never a silent pass)."""
    from kernel_oracle.harness.schema import add_note

    add_note(record, text)
    record["summary"].setdefault("failed_parts", []).append(text)
