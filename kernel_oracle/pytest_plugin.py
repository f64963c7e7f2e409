"""pytest plugin of the fuzzer: ``--target`` selection and Hypothesis settings profiles.

Note [Profiles]
---------------
* ``ci``: fast and derandomized (the same examples every run, no database), few examples; the
  default under ``CI=true`` and whenever there is no GPU (the CPU interpreter runs ~25 small
  cases/s).
* ``dev``: randomized, more examples, the example database in ``.hypothesis/`` so a failure found
  once is replayed first next time; the default on a GPU machine.
* ``campaign``: many examples, for long runs (``kernel-oracle fuzz`` drives Hypothesis itself).

Pick one with Hypothesis's own ``--hypothesis-profile NAME``.  :data:`EXAMPLES` scales the number
of examples per target kind (an interpreted Triton target costs ~100x the reference per case).

``--target`` (repeatable; default ``reference`` and ``triton``) parametrizes every test that takes
the ``fuzz_target`` fixture.  A target that is unavailable, or lacks the entry point a test needs,
is skipped *with its reason* (never silently passed); the terminal summary lists each selected
target with its entry points, fp32 precision, excluded dtypes and missing entry points.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, settings

__all__ = ["DEFAULT_TARGETS", "EXAMPLES", "default_profile", "examples_for"]

DEFAULT_TARGETS = ("reference", "triton")
_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
           HealthCheck.differing_executors]

settings.register_profile("ci", max_examples=12, derandomize=True, database=None, deadline=None,
                          suppress_health_check=_HEALTH, print_blob=True,
                          phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink))
settings.register_profile("dev", max_examples=60, deadline=None, suppress_health_check=_HEALTH, print_blob=True)
settings.register_profile("campaign", max_examples=2000, deadline=None, suppress_health_check=_HEALTH,
                          print_blob=True)

# examples per property per profile, by kind of target: (cheap targets, interpreted Triton)
EXAMPLES = {"ci": (25, 12), "dev": (60, 30), "campaign": (2000, 300)}


def default_profile() -> str:
    import torch

    if os.environ.get("CI", "").lower() in ("1", "true", "yes") or not torch.cuda.is_available():
        return "ci"
    return "dev"


_ACTIVE = {"profile": None}


def examples_for(target_name: str, *, scale: float = 1.0) -> int:
    """Examples for one property on ``target_name`` under the active profile."""
    import torch

    profile = _ACTIVE["profile"] or default_profile()
    cheap, interp = EXAMPLES.get(profile, EXAMPLES["dev"])
    slow = (not torch.cuda.is_available()) and target_name != "reference" and not target_name.startswith("torch")
    return max(1, int((interp if slow else cheap) * scale))


def pytest_addoption(parser):
    group = parser.getgroup("kernel-oracle fuzz")
    group.addoption("--target", action="append", default=None, metavar="TARGET",
                    help="target to check (repeatable): reference, triton, sglang, torch-varlen, flashinfer-cudnn, "
                         "mutant:NAME or package.module[:attr]; default: reference and triton")


def pytest_configure(config):
    chosen = config.getoption("hypothesis_profile", default=None)
    if not chosen:
        chosen = default_profile()
        settings.load_profile(chosen)
    _ACTIVE["profile"] = chosen
    config._fuzz_targets = {}


def selected_targets(config) -> list[str]:
    return list(config.getoption("--target") or DEFAULT_TARGETS)


def pytest_generate_tests(metafunc):
    if "fuzz_target_name" in metafunc.fixturenames:
        names = selected_targets(metafunc.config)
        metafunc.parametrize("fuzz_target_name", names, ids=[f"target={n}" for n in names])


@pytest.fixture
def fuzz_target(request, fuzz_target_name):
    """The resolved :class:`fuzz.targets.Target`; skipped with the reason when unavailable."""
    from kernel_oracle.fuzz.targets import TargetError, resolve_target

    device = "cuda" if _cuda() else "cpu"
    try:
        target = resolve_target(fuzz_target_name, device)
    except TargetError as exc:
        raise pytest.UsageError(str(exc)) from None
    request.config._fuzz_targets[fuzz_target_name] = target
    if not target.available:
        pytest.skip(f"target {fuzz_target_name!r} is unavailable: {target.reason}")
    request.node.user_properties.append(("target", fuzz_target_name))
    request.node.user_properties.append(("precision", target.precision))
    return target


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    targets = getattr(config, "_fuzz_targets", {})
    if not targets:
        return
    tr = terminalreporter
    tr.section("kernel-oracle targets")
    tr.write_line(f"hypothesis profile: {_ACTIVE['profile']}")
    for name, t in targets.items():
        if not t.available:
            tr.write_line(f"{name}: UNAVAILABLE ({t.reason})")
            continue
        line = f"{name}: entry points {sorted(t.entries)}; fp32 precision {t.precision}; strict validation {t.strict}"
        if t.excluded_dtypes:
            line += "; excluded " + ", ".join(f"{d} ({why})" for d, why in t.excluded_dtypes.items())
        if t.notes:
            line += "; missing " + ", ".join(f"{op} ({why})" for op, why in t.notes.items())
        if t.status is not None:
            line += f"; {t.status()}"
        tr.write_line(line)
