"""Whose ``BaseException`` it is: the code under test's (an observation) or a signal's (a stop).

Note [The target's BaseException]
---------------------------------
A target may raise anything, ``KeyboardInterrupt``, ``SystemExit`` and ``GeneratorExit`` included (an
``exit()`` left in a kernel wrapper, a library's ``sys.exit`` on a bad argument).  Caught as
``Exception`` only, such a raise escaped the check: in a campaign's own process (``--no-isolate``) it
read as "interrupted by SIGINT" (exit 3) or ended the command without a summary (exit 1), and the
finding was lost.  Yet a ``KeyboardInterrupt`` is also what Ctrl-C raises while the target runs, and
that one must stop the run.  :func:`signals_noted` tells them apart: around the target's code it wraps
the Python handlers of SIGINT and SIGTERM (main thread only) so that each signal that arrives is noted
before the handler it wraps runs; :meth:`Noted.targets` then says whether an exception is the target's
own -- any ``BaseException`` while no signal came.  Off the main thread no handler can be wrapped, and
a ``KeyboardInterrupt`` there is taken for a signal's.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator

__all__ = ["Noted", "signals_noted"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Noted:
    """The signals that arrived inside a :func:`signals_noted` block (``arrived``); ``watching``: whether
    their handlers could be wrapped (the main thread)."""

    def __init__(self, watching: bool) -> None:
        self.watching = watching
        self.arrived: list[str] = []

    def targets(self, exc: BaseException) -> bool:
        """Whether ``exc``, raised inside the block, is the target's own rather than a signal's stop."""
        if isinstance(exc, Exception):
            return True
        if self.arrived:
            return False
        return self.watching or not isinstance(exc, KeyboardInterrupt)


@contextlib.contextmanager
def signals_noted() -> Iterator[Noted]:
    """Note SIGINT and SIGTERM while the block runs (their own handlers still run: Note [The target's
    BaseException])."""
    if threading.current_thread() is not threading.main_thread():
        yield Noted(False)
        return
    noted = Noted(True)
    previous = {}
    for sig in _SIGNALS:
        old = signal.getsignal(sig)
        if callable(old):  # SIG_DFL / SIG_IGN raise nothing in Python: left as they are
            def note(signum, frame, old=old):
                noted.arrived.append(signal.Signals(signum).name)
                return old(signum, frame)
            previous[sig] = old
            signal.signal(sig, note)
    try:
        yield noted
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
