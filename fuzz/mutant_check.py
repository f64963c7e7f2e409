"""Does the suite kill a planted bug?  The CI-profile property search run on one mutant.

The mutants themselves (data, patches, building the patched copy) live with the targets
(:mod:`kernel_oracle.fuzz.targets.mutants`); this module searches them with the fuzzer's strategies.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

from kernel_oracle.harness.check import check_case

from .stream import declined_in_family
from .strategies import ALL_DTYPES, cases
from .targets import resolve_target
from .targets.mutants import get_mutant

__all__ = ["KillResult", "check_mutant"]


@dataclass
class KillResult:
    name: str
    family: str
    description: str
    killed: bool
    examples: int
    seconds: float
    kind: Optional[str] = None
    message: str = ""
    case: Optional[str] = None
    error: Optional[str] = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def check_mutant(name: str, *, max_examples: int = 80, device: Optional[str] = None,
                 limits: str = "tiny") -> KillResult:
    """Search the mutant with the CI-profile properties until it is killed (or the budget ends)."""
    from hypothesis import HealthCheck, Phase, given, settings

    from kernel_oracle.harness.device import configure_process, default_device

    if device is None:
        device = default_device()
    configure_process(device)

    mutant = get_mutant(name)
    t0 = time.monotonic()
    target = resolve_target(f"mutant:{name}", device)
    if not target.available:
        return KillResult(name, mutant.family, mutant.description, False, 0, 0.0, error=target.reason)
    ops = mutant.ops if mutant.ops is not None else target.ops(mutant.family)
    # the mutant's own op where it names one; what the target declines of the mutant's family
    strategy = cases(mutant.family, categories=mutant.categories, dtypes=target.dtypes(ALL_DTYPES), ops=ops,
                     limits=limits, declines=tuple(d for d in target.declines if declined_in_family(mutant.family, d)),
                     tiles=target.tiles.get(mutant.family))
    state = {"n": 0, "verdict": None, "case": None}

    @settings(max_examples=max_examples, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck), phases=(Phase.explicit, Phase.generate), print_blob=False)
    @given(strategy)
    def search(case):
        if state["verdict"] is not None:  # Hypothesis replays the failing example once: not a new one
            raise AssertionError(state["verdict"].message)
        state["n"] += 1
        verdict = check_case(target, case, device)
        if not verdict.ok:
            state["verdict"], state["case"] = verdict, case
            raise AssertionError(verdict.message)

    try:
        search()
    except AssertionError:
        pass
    except Exception as exc:  # noqa: BLE001 - a harness failure is a result, not a kill
        if state["verdict"] is None:
            return KillResult(name, mutant.family, mutant.description, False, state["n"], time.monotonic() - t0,
                              error=f"{type(exc).__name__}: {exc}")
    v = state["verdict"]
    return KillResult(name, mutant.family, mutant.description, v is not None, state["n"], time.monotonic() - t0,
                      kind=None if v is None else v.kind,
                      message="" if v is None else (v.message.splitlines() or [""])[0],
                      case=None if state["case"] is None else state["case"].to_json())
