"""The targets: anything with SGLang's signatures, behind one registry.

:class:`~kernel_oracle.harness.targets.Target` and :class:`~kernel_oracle.harness.targets.TargetSpec`
live in the harness; :mod:`.registry` holds :func:`resolve_target` and :func:`register_target`; each
adapter module registers itself when this package is imported: :mod:`.reference`, :mod:`.triton`,
:mod:`.sglang`, :mod:`.sglang_csgmv_target` (``sglang-csgmv==X.Y.Z``), :mod:`.torch_varlen`, :mod:`.flashinfer_cudnn`, :mod:`.mutants` (``mutant:NAME``) and
:mod:`.module_spec` (``package.module[:attr]``), on the helpers of :mod:`.adapter`.  Adapters import
their heavy peers (SGLang, FlashInfer, our kernels) only when a target is resolved.
"""

from __future__ import annotations

from kernel_oracle.harness.targets import Target, TargetError, TargetSources, TargetSpec, unavailable

from . import (flashinfer_cudnn, module_spec, mutants, reference, sglang, sglang_csgmv_target,  # noqa: F401 - register
               torch_varlen, triton)
from .registry import builtin_targets, register_target, resolve_target, serves, target_configuration

__all__ = ["Target", "TargetError", "TargetSources", "TargetSpec", "builtin_targets", "register_target",
           "resolve_target", "serves", "target_configuration", "unavailable"]
