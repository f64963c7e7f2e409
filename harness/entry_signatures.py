"""A target's entry points checked against the signature table before any case runs.

Note [Entry-point signatures]
-----------------------------
The harness calls an entry point positionally in SGLang's order (:data:`reference.signatures.SIGNATURES`),
so a callable whose parameter list differs would fail every case, and each failure would be judged
as the kernel's (a ``contract`` finding after the whole budget).  :func:`signature_problem` names the
difference instead, from :func:`inspect.signature` alone (nothing is called):

* a positional parameter of the table the callable lacks (it takes fewer positional arguments);
* a parameter of the table under another name (a positional-only parameter may have any name: it
  cannot be passed by keyword, so its name is no part of the contract);
* a required parameter the table does not have (the harness never passes it).

Extra parameters with defaults are fine, and ``*args`` / ``**kwargs`` accept anything.  A callable
whose signature cannot be read (a C extension) is not checked.  :func:`check_entries` runs in one
place, the registry (:func:`fuzz.targets.registry.resolve_target`, used by ``fuzz``, ``run``,
``matrix`` and the pytest plugin): a wrong entry point is dropped from the target and its problem
kept in ``Target.signature_errors`` (and ``notes``), and a campaign asked for that op refuses with
it (:func:`raise_for`, a usage error) before any case.
"""

from __future__ import annotations

import inspect
from typing import Callable, Mapping, Optional

from kernel_oracle.harness.targets import TargetError
from kernel_oracle.reference.signatures import SIGNATURES, Signature

__all__ = ["EntrySignatureError", "check_entries", "expected_signature", "raise_for", "signature_problem"]

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


class EntrySignatureError(TargetError):
    """An entry point whose parameter list is not its op's (one line naming both)."""


def expected_signature(sig: Signature) -> str:
    """``step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head, ...)``: the table's row as text."""
    return f"{sig.entry}({', '.join(sig.params)}, ...)"


def signature_problem(fn: Callable, sig: Signature) -> Optional[str]:
    """Why ``fn`` cannot be called as ``sig`` (Note [Entry-point signatures]), or None."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    star_args = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    positional = [p for p in params if p.kind in _POSITIONAL]
    for i, name in enumerate(sig.params):
        if i >= len(positional):
            if star_args:
                break
            return f"lacks {name!r} (it takes {len(positional)} positional parameters, the op {len(sig.params)})"
        p = positional[i]
        if p.name != name and p.kind is not inspect.Parameter.POSITIONAL_ONLY:
            return f"names parameter {i + 1} {p.name!r}, not {name!r}"
    extra = [p.name for p in positional[len(sig.params):] if p.default is inspect.Parameter.empty]
    extra += [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY
              and p.default is inspect.Parameter.empty and p.name not in sig.keywords]
    if extra:
        return f"requires {extra[0]!r}, which the op does not pass"
    return None


def check_entries(target_name: str, entries: Mapping[str, Callable]) -> dict:
    """op -> the one-line problem of each entry point of ``entries`` (op -> callable) whose parameter
    list is not its op's, e.g. ``mykernels.step_a_q_fwd(x, w) does not take the parameters of
    step_a_q (...): expected step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head, ...)``."""
    problems = {}
    for op, fn in entries.items():
        sig = SIGNATURES.get(op)
        why = signature_problem(fn, sig) if sig is not None else None
        if why is not None:
            try:
                shown = f"{sig.entry}{inspect.signature(fn)}"
            except (TypeError, ValueError):
                shown = sig.entry
            problems[op] = (f"{target_name}.{shown} does not take the parameters of {op} ({why}): "
                            f"expected {expected_signature(sig)}")
    return problems


def raise_for(problems: Mapping[str, str], ops) -> None:
    """:class:`EntrySignatureError` with the problem of the first of ``ops`` that has one."""
    for op in ops:
        if op in problems:
            raise EntrySignatureError(problems[op])
