"""How a campaign stops on a signal: SIGTERM and SIGINT end it cleanly, at any moment.

Note [Stopping a campaign]
--------------------------
A scheduler's SIGTERM or a Ctrl-C must end a campaign with its state and summary saved and exit
code 3, whenever it comes: while the worker starts, inside Hypothesis, during a shrink.  The handler
(:func:`sigterm_interrupts`) raises :class:`CampaignInterrupted` and also remembers the signal in a
:class:`Stop`, which the search loop checks before every case: a raise that lands where something
swallows it (a ``__del__``, a garbage-collector callback, a library's broad ``except``) still stops
the campaign at the next case, instead of the signal being lost; Python's report of such a
swallowed raise (``sys.unraisablehook``) is silenced for it, so the command still prints one line.  Once the clean-up runs (``Stop.cleaning``), a
further SIGTERM is noted, not raised, so the clean-up itself is never cut short; nothing sets SIGTERM
to be ignored.  The command line installs a handler of its own before its first import
(:func:`kernel_oracle.cli.main`), so a signal before the campaign starts exits 3 too.  That handler
raises as well, and its raise can land in the same places, plus one more: inside an import (torch,
numpy and triton each catch broad exceptions while they load).  So it also notes the signal
(:func:`note_signal`): a campaign that starts later takes the note over (:func:`take_signal`) and stops
before its first case, and a command that ends, or fails on a half-imported module, with a note no one
took exits 3 with the one interrupt line.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from typing import Optional

__all__ = ["CampaignInterrupted", "Stop", "die_with_parent", "note_signal", "sigterm_interrupts", "take_signal"]

_NOTED: dict = {}  # "signame": the signal the command line's handler saw and no campaign has taken over


def note_signal(name: str) -> None:
    """The command line's handler saw signal ``name``; its raise may have been swallowed (Note [Stopping a
    campaign]).  The first signal is kept."""
    _NOTED.setdefault("signame", name)


def take_signal() -> Optional[str]:
    """The noted signal, if any, handed over to the caller, who now owns stopping on it (None: none)."""
    return _NOTED.pop("signame", None)


class CampaignInterrupted(KeyboardInterrupt):
    """SIGTERM or SIGINT stopped the campaign; its state and summary are saved (``record``)."""

    def __init__(self, signame: str, record: Optional[dict] = None, executed: int = 0):
        super().__init__(signame)
        self.signame, self.record, self.executed = signame, record, executed


class Stop:
    """The signal that asked a campaign to stop (Note [Stopping a campaign]); ``cleaning``: the clean-up
    runs, so a further signal is noted, not raised."""

    def __init__(self) -> None:
        self.signame: Optional[str] = None
        self.cleaning = False

    def check(self) -> None:
        """Raise :class:`CampaignInterrupted` when a signal asked to stop (called between cases)."""
        if self.signame is not None and not self.cleaning:
            raise CampaignInterrupted(self.signame)


@contextlib.contextmanager
def sigterm_interrupts():
    """SIGTERM raises :class:`CampaignInterrupted` (SIGINT already raises KeyboardInterrupt) and is
    remembered in the yielded :class:`Stop`, which the search loop checks between cases, so a raise
    that lands where something swallows it still stops the campaign at the next case (Note [Stopping
    a campaign]).  Only the main thread can install handlers (elsewhere the yielded stop never fires)."""
    stop = Stop()
    stop.signame = take_signal()  # a signal before the campaign whose raise something swallowed: stop at once
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum, frame):
        name = signal.Signals(signum).name
        if stop.signame is None:
            stop.signame = name
        if not stop.cleaning:
            raise CampaignInterrupted(name)

    def unraisable(info) -> None:  # the raise landed in a gc callback or a finaliser: the loop stops instead
        if not isinstance(info.exc_value, CampaignInterrupted):
            old_hook(info)

    old, old_hook = signal.signal(signal.SIGTERM, handler), sys.unraisablehook
    sys.unraisablehook = unraisable
    try:
        yield stop
    finally:
        signal.signal(signal.SIGTERM, old)
        sys.unraisablehook = old_hook


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send this process ``sig`` when its parent dies (``PR_SET_PDEATHSIG``; elsewhere a no-op)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, sig)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: a worker's pipe still ends it when its parent goes
        pass
