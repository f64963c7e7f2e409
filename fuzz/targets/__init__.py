"""The targets: anything with SGLang's signatures, behind one registry.

:class:`~kernel_oracle.harness.targets.Target` and :class:`~kernel_oracle.harness.targets.TargetSpec`
live in the harness; :mod:`.registry` holds :func:`resolve_target` and :func:`register_target`; each
adapter module registers itself when one of the registry's names is first asked of this package
(PEP 562): :mod:`.reference`, :mod:`.triton`, :mod:`.sglang`, :mod:`.sglang_csgmv_target`
(``sglang-csgmv==X.Y.Z``), :mod:`.torch_varlen`, :mod:`.flashinfer_cudnn`, :mod:`.mutants` (``mutant:NAME``)
and :mod:`.module_spec` (``package.module[:attr]``), on the helpers of :mod:`.adapter`.  Adapters import
their heavy peers (SGLang, FlashInfer, our kernels) only when a target is resolved.
"""

from __future__ import annotations

from typing import Any

from kernel_oracle.harness.targets import Target, TargetError, TargetSources, TargetSpec, unavailable

__all__ = ["Target", "TargetError", "TargetSources", "TargetSpec", "builtin_targets", "register_target",
           "resolve_target", "serves", "target_configuration", "unavailable"]

# the registry's names: asking for one registers every adapter first (PEP 562), so importing one adapter
# module (the mutant table, a wheel loader) does not import the others and their peers
_REGISTRY_NAMES = ("builtin_targets", "register_target", "resolve_target", "serves", "target_configuration")


def __getattr__(name: str) -> Any:
    if name not in _REGISTRY_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import (flashinfer_cudnn, module_spec, mutants, reference, registry,  # noqa: F401 - register
                   sglang, sglang_csgmv_target, torch_varlen, triton)

    value = getattr(registry, name)
    globals()[name] = value  # load once
    return value
