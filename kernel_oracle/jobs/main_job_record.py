"""What every part of the main job writes into its record when it cannot run (Note [The main job])."""

from __future__ import annotations

__all__ = ["part_failed", "reason"]


def reason(exc: BaseException) -> str:
    """``Type: message`` of an exception, for a note."""
    return f"{type(exc).__name__}: {exc}"


def part_failed(record: dict, text: str) -> None:
    """A part that could not run: a note for the reader and a non-zero exit (never a silent pass)."""
    from kernel_oracle.harness.schema import add_note

    add_note(record, text)
    record["summary"].setdefault("failed_parts", []).append(text)
