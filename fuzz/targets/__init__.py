"""The targets: anything with SGLang's signatures, behind one registry.

:mod:`.registry` holds :class:`Target`, :func:`resolve_target` and the public registration API
(:func:`register_target`, :func:`register_prefix`); each adapter module registers itself when this
package is imported: :mod:`.reference`, :mod:`.triton`, :mod:`.sglang`, :mod:`.torch_varlen`,
:mod:`.flashinfer_cudnn`, :mod:`.mutants` (``mutant:NAME``) and :mod:`.module_spec`
(``package.module[:attr]``).  Adapters import their heavy peers (SGLang, FlashInfer, our kernels)
only when a target is resolved.
"""

from __future__ import annotations

from . import flashinfer_cudnn, module_spec, mutants, reference, sglang, torch_varlen, triton  # noqa: F401 - register
from .registry import (Target, TargetError, builtin_targets, register_module_fallback, register_prefix,
                       register_target, resolve_target, unavailable)

__all__ = ["Target", "TargetError", "builtin_targets", "register_module_fallback", "register_prefix",
           "register_target", "resolve_target", "unavailable"]
