"""What a fuzzing campaign is asked to do: one frozen :class:`CampaignConfig`, checked once.

Note [Campaign config]
----------------------
Every caller of :func:`fuzz.campaign.run_campaign` (the ``fuzz`` command, the main job, cluster
shards, the oracle's benchmark, the release matrix, tests) builds one :class:`CampaignConfig`; it
validates itself when built (:class:`CampaignError`, one line naming the field and what to pass) and
travels as it is: a cluster shard is ``dataclasses.replace(config, target=..., op=..., seed=...,
out_dir=...)`` pickled to its Dask worker, and the SGLang wheel source (``sglang_wheel``, the
``--sglang-wheel`` option) reaches the process that resolves the target inside it
(:attr:`CampaignConfig.sources`), never through the environment.  The fields keep what the caller
said; what a campaign derives from them (100 cases when neither ``budget`` nor ``time_s`` is given,
the per-case timeout from ``time_s``) are properties, so a replaced field never leaves a stale
derived one behind.  Run-time objects (a started worker, a shared example database) are not
configuration: they are :func:`run_campaign`'s keyword arguments.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from kernel_oracle.fuzz.time_budget import TimeBudgetError, check_time_s
from kernel_oracle.harness.family import FamilyError, campaign_ops
from kernel_oracle.harness.targets import TargetError, TargetSources, TargetSpec

__all__ = ["CampaignConfig", "CampaignError", "DEFAULT_BUDGET", "HarnessError", "MAX_CASE_TIMEOUT_S",
           "MIN_CASE_TIMEOUT_S", "SHRINK_SLACK_S", "case_timeout_for", "check_flags"]

# cases a campaign runs when given neither a budget nor a time
DEFAULT_BUDGET = 100
# seconds a time-boxed campaign may run past its time to finish shrinking a finding
SHRINK_SLACK_S = 60.0
# per-case timeout of a time-boxed campaign: half its time, within these bounds (seconds); an
# interpreted tiny case takes well under a second, a first GPU compile a few seconds
MIN_CASE_TIMEOUT_S = 5.0
MAX_CASE_TIMEOUT_S = 120.0
DEVICES = ("cpu", "cuda")


class CampaignError(ValueError):
    """A usage or I/O error of a campaign (exit code 2 in the CLI)."""


class HarnessError(Exception):
    """An error of kernel-oracle itself while checking a case (never a finding of the target)."""


def case_timeout_for(time_s: Optional[float]) -> float:
    """The per-case timeout a campaign derives from its budget (seconds)."""
    if time_s is None:
        return MAX_CASE_TIMEOUT_S
    return min(MAX_CASE_TIMEOUT_S, max(MIN_CASE_TIMEOUT_S, time_s / 2))


def _finite_positive(name: str, value) -> None:
    try:
        check_time_s(value, name)  # the one check of a number of seconds (Note [Time budget])
    except TimeBudgetError as exc:
        raise CampaignError(str(exc)) from None


def check_flags(*, with_malformed: bool, memcheck: bool, upstream_contracts_only: bool) -> None:
    """:class:`CampaignError` for switches that contradict each other (the command line asks before any import)."""
    for flag, on in (("with_malformed", with_malformed), ("memcheck", memcheck)):
        if on and upstream_contracts_only:  # both act on malformed metadata, which the other generates none of
            raise CampaignError(f"{flag}=True (--{flag.replace('_', '-')}) acts on malformed metadata, but "
                                f"upstream_contracts_only=True (--upstream-contracts-only) generates none; pass "
                                f"one of them")


@dataclass(frozen=True)
class CampaignConfig:
    """One campaign (Note [Campaign config]).

    ``target``: a spec string or :class:`~kernel_oracle.harness.targets.TargetSpec`; ``op``: one
    family's name, or a comma list of its ops (:func:`kernel_oracle.harness.family.campaign_ops`);
    ``out_dir``: where its state and records go (the same directory resumes it).  ``budget``: cases to execute (shrinking included); ``time_s``:
    wall-clock seconds; with neither, :data:`DEFAULT_BUDGET` cases.  ``limits``: the size preset of
    :data:`fuzz.strategies.LIMITS` (None: :func:`fuzz.strategies.default_limits`).  ``isolate``: run
    the target in a worker process (``False``: this process must already be in the device's Triton
    mode).  ``case_timeout_s``: a case running longer is a hang (None: :func:`case_timeout_for`).
    ``shrink_allowance``: cases a shrink may take past the budget (None: half the budget, at least
    40).  ``shrink_slack_s``: how far past ``time_s`` a finding's shrinking may go.  ``warm_up_s``:
    before the clock starts, let the worker compile the target's kernels for up to this long
    (:mod:`harness.warmup`).  ``dtypes``: fuzz only these (a cluster shard; None: every dtype the
    target supports).  ``upstream_contracts_only``: no malformed metadata.  ``with_malformed``: a target
    without strict validation has its accepted malformed metadata counted as findings (default: listed
    as validation gaps when harmless or rows dropped, Note [Malformed consequences]).  ``progress``: a progress
    bar.  ``sglang_wheel``: a wheel or a directory of wheels for ``sglang==X.Y.Z`` targets.
    ``fresh``: delete what ``out_dir`` holds of an earlier campaign instead of resuming it (a
    directory of another campaign's identity is refused without it; :mod:`fuzz.state`).  ``memcheck``:
    on CUDA, run each validation gap's smallest example under compute-sanitizer afterwards
    (:func:`harness.malformed.memcheck`); a reported access makes it an out-of-bounds finding.
    ``ends_at``: a ``time.monotonic()`` instant (the clock is system-wide, so another process's value
    holds here) past which the clock does not run: once the worker is ready the clock gets ``time_s``
    or what is left until ``ends_at``, whichever is less.  The main job's campaigns side by side take
    it (Note [Campaigns side by side]): their start-up and warm-up vary, the job's deadline does not.
    ``shares_gpu``: other processes share the GPU and the host, so the worker's CUDA waits give up the
    core (Note [Shared GPU waits] in harness/device.py).  ``known_cases``: ``(label, Case)`` pairs of
    the real-bug corpus's entries for this target, run after the search to name the findings they
    show (Note [Known cases] in :mod:`fuzz.known_cases`).
    """

    target: Union[str, TargetSpec]
    op: str
    out_dir: Union[str, Path]
    budget: Optional[int] = None
    time_s: Optional[float] = None
    seed: int = 0
    device: str = "cpu"
    upstream_contracts_only: bool = False
    with_malformed: bool = False
    progress: bool = True
    limits: Optional[str] = None
    isolate: bool = True
    shrink_allowance: Optional[int] = None
    case_timeout_s: Optional[float] = None
    shrink_slack_s: float = SHRINK_SLACK_S
    warm_up_s: Optional[float] = None
    dtypes: Optional[tuple] = None
    sglang_wheel: Optional[str] = None
    fresh: bool = False
    memcheck: bool = False
    ends_at: Optional[float] = None
    shares_gpu: bool = False
    known_cases: tuple = ()

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "target", TargetSpec.parse(self.target))
        except TargetError as exc:
            raise CampaignError(str(exc)) from None
        object.__setattr__(self, "out_dir", Path(self.out_dir))
        object.__setattr__(self, "dtypes", tuple(self.dtypes) if self.dtypes else None)
        object.__setattr__(self, "known_cases", tuple(self.known_cases))
        try:
            campaign_ops(self.op)
        except FamilyError as exc:
            raise CampaignError(f"op={exc}") from None
        budget = self.budget
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 0):
            raise CampaignError(f"Expected a non-negative int but got budget={budget!r}")
        if self.time_s is not None:
            _finite_positive("time_s", self.time_s)
        if self.case_timeout_s is not None:
            _finite_positive("case_timeout_s", self.case_timeout_s)
        if self.ends_at is not None:
            _finite_positive("ends_at", self.ends_at)
        if self.device not in DEVICES:
            raise CampaignError(f"device={self.device!r} is invalid; the only valid values are 'cpu', 'cuda'")
        slack = self.shrink_slack_s
        if isinstance(slack, bool) or not isinstance(slack, (int, float)) or not (math.isfinite(slack) and slack >= 0):
            raise CampaignError(f"Expected a non-negative finite number of seconds but got shrink_slack_s={slack!r}")
        check_flags(with_malformed=self.with_malformed, memcheck=self.memcheck,
                    upstream_contracts_only=self.upstream_contracts_only)
        if self.sglang_wheel is not None and not isinstance(self.sglang_wheel, str):
            raise CampaignError(f"Expected sglang_wheel to be a path string or None but got "
                                f"sglang_wheel={self.sglang_wheel!r}")

    @property
    def family(self) -> str:
        """The family ``op`` names (``lora``, ``vision``, ``csgmv``)."""
        return campaign_ops(self.op)[0]

    @property
    def wanted_ops(self) -> tuple[str, ...]:
        """The ops ``op`` names, in the family's order."""
        return campaign_ops(self.op)[1]

    @property
    def case_budget(self) -> Optional[int]:
        """Cases to execute: ``budget``, or :data:`DEFAULT_BUDGET` when no time is given either."""
        if self.budget is None and self.time_s is None:
            return DEFAULT_BUDGET
        return self.budget

    @property
    def case_timeout(self) -> float:
        """Seconds one case may take before it is a hang."""
        return self.case_timeout_s if self.case_timeout_s is not None else case_timeout_for(self.time_s)

    def clock_s(self, starts: float, elapsed: float = 0.0) -> Optional[float]:
        """The clock's seconds when it starts at ``starts`` (``time.monotonic()``) after ``elapsed``
        seconds of an earlier run of this campaign: ``time_s``, capped at ``ends_at`` (at least 1 s)."""
        if self.ends_at is None:
            return self.time_s
        left = elapsed + max(1.0, self.ends_at - starts)
        return left if self.time_s is None else min(self.time_s, left)

    def check_runnable(self, worker=None) -> None:
        """``CampaignError`` (one line) when this campaign cannot run here: CUDA asked for and absent,
        an in-process campaign whose Triton mode is not the device's, a shared ``worker`` of another
        device."""
        from kernel_oracle.harness.device import cuda_available, interpreting, needs_interpreter

        device = self.device
        if device == "cuda" and not cuda_available():
            raise CampaignError("device='cuda' but torch sees no GPU; pass --device cpu")
        if not self.isolate and needs_interpreter(device) != interpreting():
            mode = "interpreted (TRITON_INTERPRET=1)" if needs_interpreter(device) else "compiled (TRITON_INTERPRET unset)"
            raise CampaignError(f"isolate=False runs the target in this process, whose Triton kernels are not "
                                f"{mode} as device={device!r} needs; pass isolate=True (a worker gets the right "
                                f"environment) or start this process with kernel_oracle.harness.device."
                                f"configure_process({device!r})")
        if worker is not None and (not self.isolate or worker.device != device):
            raise CampaignError(f"worker= is a {worker.device!r} worker; it needs isolate=True and "
                                f"device={worker.device!r}")

    def identity(self) -> dict:
        """The campaign's identity (Note [Campaign identity] in :mod:`fuzz.state`): target spec, op,
        seed, the hash of the target's code and the suite's version."""
        from kernel_oracle.fuzz.targets.identity import code_hash, suite_version

        return {"target": str(self.target), "op": self.op, "seed": self.seed,
                "code": code_hash(self.target, self.sources), "suite": suite_version()}

    @property
    def sources(self) -> TargetSources:
        """Where the target's code comes from when it is not installed."""
        return TargetSources(sglang_wheel=self.sglang_wheel)
