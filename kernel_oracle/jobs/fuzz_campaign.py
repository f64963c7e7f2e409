"""The campaign ``kernel-oracle fuzz`` runs, as one function: the command line and the pytest plugin build
it here, so ``pytest --oracle-target M`` judges a module by the same campaign as ``fuzz --targets M``
(the same seed, case count, strategy and verdict; Note [One campaign underneath] in
:mod:`kernel_oracle.pytest.campaigns`)."""

from __future__ import annotations

from typing import Optional

__all__ = ["DEFAULT_SEED", "fuzz_config", "warm_up_for"]

# the seed of a campaign nobody gave one (the command line's --seed default)
DEFAULT_SEED = 0


def warm_up_for(requested: Optional[float], device: str) -> Optional[float]:
    """``--warm-up S`` (0: none); without it a CUDA campaign warms up for ``DEFAULT_WARM_UP_S`` (its
    variants compile in parallel into the kernel cache, Note [Parallel precompilation])."""
    from kernel_oracle.fuzz.precompile import DEFAULT_WARM_UP_S

    if requested is None:
        return DEFAULT_WARM_UP_S if str(device).startswith("cuda") else None
    return requested or None


def fuzz_config(target, op: str, *, device: str, out_dir, cases: Optional[int] = None, time_s: Optional[float] = None,
                seed: int = DEFAULT_SEED, warm_up_s: Optional[float] = None, progress: bool = True, **options):
    """The :class:`~kernel_oracle.fuzz.campaign_config.CampaignConfig` of ``kernel-oracle fuzz --targets
    TARGET --op OP``: ``cases`` or ``time_s`` (neither: the default case budget), ``seed``, the warm-up
    (:func:`warm_up_for`), the corpus cases that name its findings (Note [Known cases]); ``options``: the
    other fields as the command line passes them (limits, isolate, case_timeout_s, ...)."""
    from kernel_oracle.fuzz.campaign_config import CampaignConfig
    from kernel_oracle.jobs.bug_corpus import known_cases_for

    return CampaignConfig(target=target, op=op, out_dir=out_dir, budget=cases, time_s=time_s, seed=seed,
                          device=device, progress=progress, warm_up_s=warm_up_for(warm_up_s, device),
                          known_cases=known_cases_for(target), **options)
