"""The time budget of a run: one name, one table of defaults, one check.

Note [Time budget]
------------------
A run's wall-clock budget is ``time_s`` (seconds) everywhere: the CLI's ``--time`` (``dest="time_s"``,
parsed by :func:`parse_time_s`), the keyword of :func:`kernel_oracle.jobs.main_job.run_main_job`,
:func:`kernel_oracle.jobs.matrix.run_matrix` and :func:`kernel_oracle.jobs.bench.run_bench`, the field
:attr:`kernel_oracle.fuzz.campaign_config.CampaignConfig.time_s`, and the ``time_s`` of a record's
summary.  :data:`DEFAULT_TIME_S` holds every default (per command, and per device for the main job);
:func:`check_time_s` is the one validation (a positive, finite number of seconds; NaN and infinities
compare false with every bound, so such a budget would never end), and :func:`resolve_time_s` gives a
command's budget: the given one, checked, or its default.  ``fuzz`` has no default time: without
``--time`` a campaign runs a number of cases instead (``--cases``, 100 when neither is given).

This module imports only the standard library: building the CLI's parser imports it.
"""

from __future__ import annotations

import argparse
import math
from typing import Optional

__all__ = ["DEFAULT_TIME_S", "TimeBudgetError", "check_time_s", "default_time_s", "parse_time_s",
           "resolve_time_s"]

# command -> seconds, or device -> seconds: a few minutes of the main job on the CPU interpreter, more on a GPU
# (which gets through far more cases in the same time); per distinct code of a release matrix; per timed
# campaign of the oracle's own benchmark, and the main job that benchmark measures (``--main-time``)
DEFAULT_TIME_S: dict = {"run": {"cpu": 180.0, "cuda": 300.0}, "matrix": 60.0, "bench": 20.0, "bench_main_job": 120.0}


class TimeBudgetError(ValueError):
    """A time budget that is not a positive, finite number of seconds."""


def check_time_s(value, name: str = "time_s") -> float:
    """``value`` as float seconds; :class:`TimeBudgetError` unless it is a positive, finite number
    (bool refused: ``True`` is not a number of seconds)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise TimeBudgetError(f"Expected a positive finite number of seconds but got {name}={value!r}")
    return float(value)


def parse_time_s(text: str) -> float:
    """An argparse type for ``--time``: :func:`check_time_s` of the number ``text``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive, finite number of seconds but got {text!r}") from None
    try:
        return check_time_s(value)
    except TimeBudgetError:
        raise argparse.ArgumentTypeError(f"expected a positive, finite number of seconds but got {text!r}"
                                         + ("" if math.isfinite(value) else ": only finite values (NaN and "
                                                                             "infinities are refused)")) from None


def default_time_s(command: str, device: Optional[str] = None) -> float:
    """The default budget of ``command`` (``run`` needs the resolved ``device``: ``cpu`` or ``cuda``)."""
    default = DEFAULT_TIME_S[command]
    return float(default[device] if isinstance(default, dict) else default)


def resolve_time_s(time_s, command: str, device: Optional[str] = None) -> float:
    """``time_s`` checked, or ``command``'s default when it is None."""
    return default_time_s(command, device) if time_s is None else check_time_s(time_s)
