"""One case on a target as a campaign runs it: in a worker, and never a case the target declines.

Note [Cases outside a campaign]
-------------------------------
A campaign never runs its target in the user's process (:mod:`fuzz.worker`) and never gives it a case of a
feature it declines (``Target.declines``; the strategies never draw one): SGLang's csgmv kernels write a
permutation row past ``x`` without a check (heap corruption), so every ``sglang-csgmv`` target declines
``csgmv.unchecked_bounds`` and is never sent such metadata.  A case that comes from elsewhere --
``kernel-oracle repro``, a finding replayed on another release -- goes the same way through
:class:`IsolatedTarget`: the target is described in a worker, a case that uses a feature it declines
(:meth:`harness.check.Case.declined`) is refused before anything of it runs, and an accepted case runs in
the worker, where a crash or a hang costs the worker (a fresh one takes the next case), not the command,
and is the case's verdict (kind ``crash`` / ``hang``).

A corpus entry (``matrix``, a campaign's known cases) is the one exception, and a narrow one: it exists to
measure a defect, often through what the release's own callers never pass (0.5.10's vision wrapper and a
``softmax_scale``) or a difference the target declines as known (csgmv before 0.5.14 and stale host ints),
so it is refused only the features no command sends (``Family.never_sent``: memory outside the tensors),
and runs the rest in the worker like any case.
"""

from __future__ import annotations

from typing import Optional

from kernel_oracle.fuzz.worker import Worker, WorkerError, verdict_of

__all__ = ["DeclinedCase", "IsolatedTarget", "WorkerError"]


class DeclinedCase(ValueError):
    """A case that uses a feature its target declines (the message names the feature and why)."""


class IsolatedTarget:
    """The target ``spec`` in a worker on ``device`` (``worker``: one to share, left running; default: a
    fresh one, ended by :meth:`close`); ``sources``: where an SGLang wheel comes from."""

    def __init__(self, spec, device: str, *, sources=None, worker: Optional[Worker] = None):
        self.spec, self.device, self.sources = str(spec), device, sources
        self.worker = worker if worker is not None else Worker(device)
        self._own = worker is None
        self._info: Optional[dict] = None

    @property
    def info(self) -> dict:
        """The target's record as the worker resolves it (``Target.to_record()`` and more: Worker.describe);
        :class:`WorkerError` when the worker cannot resolve it."""
        if self._info is None:
            self._info = self.worker.describe(self.spec, sources=self.sources)
        return self._info

    def declined(self, case, *, never_sent: bool = False) -> dict:
        """feature -> why, for the features the target declines that ``case`` uses (empty: it may run it);
        ``never_sent``: only those no command sends (a corpus entry's rule, see the Note)."""
        declines = self.info.get("declines") or {}
        return {feature: declines[feature] for feature in case.declined(declines, never_sent=never_sent)}

    def check(self, case, call=None, *, never_sent: bool = False):
        """The :class:`~kernel_oracle.harness.check.Verdict` of ``case`` (or of ``call``, a saved call on the
        CPU, for it) run in the worker; a case the target declines (``never_sent``: of the features no
        command sends) raises :class:`DeclinedCase`."""
        refused = self.declined(case, never_sent=never_sent)
        if refused:
            feature, why = next(iter(refused.items()))
            raise DeclinedCase(f"target {self.spec!r} declines {feature} ({why}); a campaign never gives it this "
                             f"case, so it is not run")
        return verdict_of(case, self.worker.check(self.spec, case.to_dict(), sources=self.sources, call=call))

    def close(self) -> None:
        if self._own:
            self.worker.close()

    def __enter__(self) -> "IsolatedTarget":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
