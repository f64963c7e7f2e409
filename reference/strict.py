"""The strict-validation switch.

Strict validation is on by default: malformed metadata that upstream kernels accept silently (and
answer with dropped rows, clamped indices or foreign memory) is rejected with a ``ValueError`` from
the contract table.  Turn it off to mimic upstream exactly, either per call (``strict=False`` on any
reference or kernel entry point) or for a block of code::

    with strict_validation(False):
        step_a_q_fwd(...)

Upstream contract errors are raised in both modes, always before the strict checks.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator, Optional

__all__ = ["strict_validation", "is_strict", "resolve_strict"]

_STRICT: contextvars.ContextVar[bool] = contextvars.ContextVar("kernel_oracle_strict", default=True)


def is_strict() -> bool:
    return _STRICT.get()


def resolve_strict(strict: Optional[bool]) -> bool:
    """A per-call ``strict`` argument wins over the ambient setting."""
    if strict is None:
        return _STRICT.get()
    if not isinstance(strict, bool):
        raise TypeError(f"Expected strict to be True, False or None but got strict={strict!r}")
    return strict


@contextlib.contextmanager
def strict_validation(enabled: bool = True) -> Iterator[None]:
    if not isinstance(enabled, bool):
        raise TypeError(f"Expected enabled to be a bool but got enabled={enabled!r}")
    token = _STRICT.set(enabled)
    try:
        yield
    finally:
        _STRICT.reset(token)
