"""A problem to and from plain data (a record, a corpus entry, a command line): every field checked against
its declared type and the sizes bounded before anything is allocated (Note [Problems] in
:mod:`kernel_oracle.harness.problems`, which re-exports these)."""

from __future__ import annotations

import dataclasses
import functools
import math
import typing

from kernel_oracle.harness.family import FAMILY_OPS, family_names, get_family

__all__ = ["MAX_COUNT", "MAX_ELEMENTS", "problem_from_dict", "problem_to_dict"]


def problem_to_dict(problem) -> dict:
    d = {k: v for k, v in dataclasses.asdict(problem).items()}
    d["family"] = problem.family
    return d


# the most elements a problem's tensors may hold in all (a case read from a file or a command line is
# data: absurd sizes are refused before anything is allocated)
MAX_ELEMENTS = 2**31
# the largest count a problem read from data may give that sizes a launch grid or a Python loop without
# being a tensor's size: segments (padding and host ints included), sequences, a claimed length past the
# longest segment, a tile, slices, split-K parts (every batch SGLang builds is far below it)
MAX_COUNT = 8192


def problem_from_dict(d: dict):
    """The problem of ``d`` (:func:`problem_to_dict`'s form), every field checked against its declared
    type and the sizes bounded; ``ValueError`` / ``TypeError`` naming the field (Note [Problems])."""
    if not isinstance(d, dict):
        raise TypeError(f"Expected a problem as a dict but got {type(d).__name__}")
    d = dict(d)
    family = d.pop("family", None)
    cls = get_family(family).resolve("problem") if isinstance(family, str) and family in FAMILY_OPS else None
    if cls is None:
        raise ValueError(f"family={family!r} is unknown; the only valid values are "
                         + ", ".join(map(repr, family_names())))
    hints = _field_types(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    kwargs = {k: _checked_field(k, hints[k], v) for k, v in d.items() if k in names}
    problem = cls(**kwargs)
    _check_sizes(problem)
    return problem


@functools.lru_cache(maxsize=None)
def _field_types(cls) -> dict:
    return typing.get_type_hints(cls)


def _checked_field(name: str, hint, value):
    """``value`` as field ``name`` of type ``hint`` takes it (lists become tuples), or ``TypeError``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:  # Optional[X]
        if value is None and type(None) in args:
            return None
        (hint,) = [a for a in args if a is not type(None)]
        return _checked_field(name, hint, value)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"Expected {name} to be a list but got {name}={value!r}")
        kinds = [args[0]] * len(value) if len(args) == 2 and args[1] is Ellipsis else list(args)
        if len(kinds) != len(value):
            raise TypeError(f"Expected {name} to hold {len(kinds)} values but got {name}={value!r}")
        return tuple(_checked_field(f"{name}[{i}]", k, v) for i, (k, v) in enumerate(zip(kinds, value)))
    ok = {int: lambda v: isinstance(v, int) and not isinstance(v, bool),
          float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
          bool: lambda v: isinstance(v, bool), str: lambda v: isinstance(v, str)}[hint](value)
    if not ok:
        raise TypeError(f"Expected {name} to be a finite {hint.__name__} but got {name}={value!r}")
    return value


def _check_sizes(p) -> None:
    """``ValueError`` for a negative size, tensors of more than :data:`MAX_ELEMENTS` elements, or a count past
    :data:`MAX_COUNT`.  ``p.sizes()``: ``(sizes, elements)``, or ``(sizes, elements, counts)`` with ``counts``
    name -> the count (a family whose problems have none gives two)."""
    sizes, elements, *rest = p.sizes()
    bad = next(((k, v) for k, v in sizes.items() if v < 0), None)
    if bad is not None:
        raise ValueError(f"{bad[0]}={getattr(p, bad[0])!r} is negative; sizes are 0 or more")
    if elements > MAX_ELEMENTS:
        raise ValueError(f"the problem's tensors would hold {elements} elements, more than the {MAX_ELEMENTS} "
                         f"a case may have")
    for name, count in (rest[0] if rest else {}).items():
        if count > MAX_COUNT:
            raise ValueError(f"{name}: {count}, more than the {MAX_COUNT} a case may have (it sizes a kernel's "
                             f"launch grid and the harness's loops)")
