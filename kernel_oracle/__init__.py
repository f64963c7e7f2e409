"""kernel-oracle: differential testing of SGLang's kv_b LoRA and vision-attention kernels.

The installed packages all live under this one name: :mod:`kernel_oracle.reference` (float64
oracles, contracts, tolerance), :mod:`kernel_oracle.kernels` (our Triton kernels),
:mod:`kernel_oracle.harness` (op descriptions, problems, targets and their specs, checking a case),
:mod:`kernel_oracle.fuzz` (the targets registry, strategies, campaigns), :mod:`kernel_oracle.reports`
(rendering, comparison), and in this package, by role: :mod:`kernel_oracle.cli` (the ``kernel-oracle``
command: one module per subcommand), :mod:`kernel_oracle.jobs` (the work behind it: the main job,
selfcheck, matrix, repro, bench), :mod:`kernel_oracle.pytest` (the pytest plugin and its record) and
the public API at the root (:mod:`kernel_oracle.api`, :mod:`kernel_oracle.strategies`).

The public API for other projects' tests (Note [Public API] in :mod:`kernel_oracle.api`):

* :func:`assert_matches` -- ``assert_matches("step_a_q", my_fn, q_nope, B_buf, batch_info, full_K)``
  checks ``my_fn`` against the float64 oracle, the same-dtype baseline, the tolerance rule and the
  exact error contracts, and raises an ``AssertionError`` in ``assert_close``'s layout;
* :func:`replay` -- re-runs a failure from the inputs it saved;
* :func:`materialize` -- a problem or case (plain data) -> tensors on a device;
* :mod:`kernel_oracle.strategies` -- the Hypothesis strategies (``lora_problems``,
  ``vision_problems``, ``cases``, ...);
* the pytest plugin (``--oracle-target``, ``--oracle-device``, ``--oracle-record``, fixtures
  ``oracle_target`` and ``oracle_device``) registers itself through the ``pytest11`` entry point.

Importing ``kernel_oracle`` itself is light: the names above load their modules (torch, Hypothesis,
the harness) on first use (PEP 562), so ``import kernel_oracle.reference`` never pulls in torch through
the harness.  It registers the built-in kernel families (:mod:`kernel_oracle.families`: records whose
parts load when asked, Note [Families registry] in :mod:`kernel_oracle.harness.family`), which imports
the standard library only, so every module of the package finds them in the registry.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import families as _families  # noqa: F401 - registers the built-in kernel families
from ._version import __version__

if TYPE_CHECKING:  # for type checkers and IDEs; at run time __getattr__ below loads them
    from . import strategies
    from .api import OPS, Verdict, assert_matches, materialize, replay

__all__ = ["OPS", "Verdict", "__version__", "assert_matches", "materialize", "replay", "strategies"]

_LAZY = {"OPS": "kernel_oracle.api", "Verdict": "kernel_oracle.api", "assert_matches": "kernel_oracle.api",
         "materialize": "kernel_oracle.api", "replay": "kernel_oracle.api"}
_SUBMODULES = ("strategies",)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}; its public names are {__all__}")
    globals()[name] = value  # load once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
