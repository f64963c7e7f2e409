"""Launch options of our Triton kernels: one frozen value, applied with a context manager.

Note [Launch options]
---------------------
Everything a caller may choose about *how* our kernels run, beyond the SGLang signature, is one
frozen :class:`LaunchOptions` value: the LoRA kernels' path, grid and block choices
(:class:`LoRAOptions`), the vision kernel's configuration and arithmetic (:class:`VisionOptions`),
and the test hook that allocates fresh outputs full of NaN.  The defaults are what a user gets;
benchmarks and tests pass other values, and nothing patches module state or reads the environment.

A value is applied for a block, in this thread or task only (a :mod:`contextvars` variable, so
pytest-xdist workers, threads and asyncio tasks never see each other's options)::

    from kernel_oracle.kernels.options import options
    with options(lora={"early_reads": True}):
        q_side_fused_fwd(...)

Entry points read :func:`current_options` once per call (a context-variable read, well under a
microsecond).  Each class checks itself on construction and names the field, the value and the
valid values when it is wrong.

This module imports no Triton: the harness builds options before it knows whether kernels will be
compiled or interpreted (Note [Device switch] in :mod:`harness.device`).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Optional

__all__ = ["LaunchOptions", "LoRAOptions", "OptionsError", "VisionOptions", "current_options", "options",
           "use_options"]


class OptionsError(ValueError):
    """An option value that is not one of the valid ones (the message names the field and the value)."""


def _one_of(owner: str, name: str, value: Any, valid: tuple) -> None:
    if value not in valid:
        raise OptionsError(f"{owner}: {name}={value!r} is invalid; the only valid values are "
                           + ", ".join(repr(v) for v in valid))


def _is_bool(owner: str, name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise OptionsError(f"{owner}: expected {name} to be True or False but got {name}={value!r}")


@dataclass(frozen=True)
class LoRAOptions:
    """How the kv_b LoRA kernels launch (Note [Launch options]; kernels.lora's Notes say what each does).

    * ``route``: ``"auto"`` lets the planner pick segment-major or token-major tiles; ``"seg"`` /
      ``"tok"`` force one path (tests and benchmarks);
    * ``early_reads``: Note [Early reads] in :mod:`kernels.lora`: the fused decode kernels read
      metadata and weights before the previous kernel ends (only right when nothing still running
      writes them).
    """

    route: str = "auto"
    early_reads: bool = False

    def __post_init__(self) -> None:
        _one_of("LoRAOptions", "route", self.route, ("auto", "seg", "tok"))
        _is_bool("LoRAOptions", "early_reads", self.early_reads)


def _exactly_one_of(owner: str, name: str, value: Any, valid: tuple) -> None:
    """:func:`_one_of` with the type compared too (``True`` is not ``1``, ``0`` is not ``False``)."""
    if not any(type(value) is type(v) and value == v for v in valid):
        raise OptionsError(f"{owner}: {name}={value!r} is invalid; the only valid values are "
                           + ", ".join(repr(v) for v in valid))


@dataclass(frozen=True)
class VisionOptions:
    """How the vision attention kernel launches (Note [Launch options]; the Notes of
    :mod:`kernels.vision._kernel` and :mod:`kernels.vision._tiles` say what each does).

    * ``split_head_dim``: Note [Head-dim split]: ``None`` cuts a head dim that is not a power of two
      into two tiles exactly when the launch reads through descriptors; ``True`` / ``False`` always /
      never (a one-stage config never splits);
    * ``fp32_exact``: Note [Exact fp32], fp32 inputs with exact products: ``2`` float64 logits and
      softmax, ``1`` the softmax alone in float64, ``0`` the fp32 flash-attention arithmetic;
    * ``fold_scale``: Note [Folded scale]: the softmax scale folded into one FMA per logit where that
      is exact (``False`` scales the logits first);
    * ``direct_launch``: Note [Direct launch]: warm calls relaunch the compiled kernel without
      Triton's per-call work.

    A launch is planned under the options in force and keeps them: the launch cache and the repeated
    call are keyed on them (Note [Launch cache] in :mod:`kernels.vision.attention`).
    """

    split_head_dim: Optional[bool] = None
    fp32_exact: int = 2
    fold_scale: bool = True
    direct_launch: bool = True

    def __post_init__(self) -> None:
        _exactly_one_of("VisionOptions", "split_head_dim", self.split_head_dim, (None, False, True))
        _exactly_one_of("VisionOptions", "fp32_exact", self.fp32_exact, (0, 1, 2))
        _is_bool("VisionOptions", "fold_scale", self.fold_scale)
        _is_bool("VisionOptions", "direct_launch", self.direct_launch)


_SECTIONS = {"lora": LoRAOptions, "vision": VisionOptions}


@dataclass(frozen=True)
class LaunchOptions:
    """The one options value: ``lora``, ``vision`` and ``poison_outputs`` (fresh outputs allocated
    full of NaN, so a test sees every element a kernel failed to write)."""

    lora: LoRAOptions = field(default_factory=LoRAOptions)
    vision: VisionOptions = field(default_factory=VisionOptions)
    poison_outputs: bool = False

    def __post_init__(self) -> None:
        for name, cls in _SECTIONS.items():
            value = getattr(self, name)
            if not isinstance(value, cls):
                raise OptionsError(f"LaunchOptions: expected {name} to be a {cls.__name__} but got "
                                   f"{name}={value!r}; pass {cls.__name__}(...) or a dict of its fields")
        _is_bool("LaunchOptions", "poison_outputs", self.poison_outputs)

    def replace(self, **changes: Any) -> "LaunchOptions":
        """A copy with ``changes``; a section may be given as a dict of the fields to change
        (``replace(lora={"route": "tok"})``) or as a whole value."""
        fields = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - fields)
        if unknown:
            raise OptionsError(f"LaunchOptions has no field {unknown[0]!r}; its fields are {sorted(fields)}")
        resolved = {}
        for name, value in changes.items():
            if name in _SECTIONS and isinstance(value, Mapping):
                section = getattr(self, name)
                known = {f.name for f in dataclasses.fields(section)}
                bad = sorted(set(value) - known)
                if bad:
                    raise OptionsError(f"{type(section).__name__} has no field {bad[0]!r}; its fields are "
                                       f"{sorted(known)}")
                value = dataclasses.replace(section, **value)
            resolved[name] = value
        return dataclasses.replace(self, **resolved)


DEFAULT_OPTIONS = LaunchOptions()
_CURRENT: contextvars.ContextVar[LaunchOptions] = contextvars.ContextVar("kernel_oracle_launch_options",
                                                                         default=DEFAULT_OPTIONS)


def current_options() -> LaunchOptions:
    """The options in force here (the defaults outside every :func:`options` block)."""
    return _CURRENT.get()


@contextlib.contextmanager
def use_options(value: LaunchOptions) -> Iterator[LaunchOptions]:
    """Apply ``value`` inside the block (this thread or task only); restored after, also on error."""
    if not isinstance(value, LaunchOptions):
        raise OptionsError(f"Expected a LaunchOptions but got value={value!r}")
    token = _CURRENT.set(value)
    try:
        yield value
    finally:
        _CURRENT.reset(token)


@contextlib.contextmanager
def options(value: Optional[LaunchOptions] = None, /, **changes: Any) -> Iterator[LaunchOptions]:
    """``with options(lora={"early_reads": True}):`` -- the options in force, changed for the block
    (or ``value``, changed by ``changes``)."""
    base = current_options() if value is None else value
    with use_options(base.replace(**changes) if changes else base) as applied:
        yield applied
