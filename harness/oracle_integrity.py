"""What the oracle runs, checked to be what it was before any target loaded.

Note [The oracle's own code]
----------------------------
The float64 reference runs in the process that imports the target (a campaign's worker; the user's own
process under :func:`kernel_oracle.assert_matches`), so a target can change it: ``torch.bmm`` replaced at
import, an ``aten::bmm`` kernel registered with ``torch.library``, a ``TorchFunctionMode`` left on the
stack, :func:`harness.check.judge` patched.  Measured: a kernel 1.25x wrong everywhere was clean, in
campaigns and in ``assert_matches``, because the reference ran the same patched ``bmm``.

Two designs keep the oracle out of the target's reach: compute the reference in a process the target never
imports into, or check that what the reference runs is still the original.  The first costs every case a
round trip of its tensors between processes and, on a GPU, a second CUDA context per worker; the second
costs a few milliseconds per call (measured on the 2-core CI host: 2 ms for the fingerprint below, 85 ms
for a full dispatcher scan).  So the check is chosen, against a baseline taken once per process before any
target is imported (:func:`baseline`: when :mod:`harness.check` is first imported; an in-process campaign
takes it again before it loads its target, :func:`rebase`):

* **Python**: the callables of ``torch``, ``torch.nn.functional``, ``torch.linalg``, ``torch.special``,
  ``torch.functional``, ``torch.Tensor``, ``builtins`` and ``math`` that the oracle's sources call by name
  (:func:`_called_names`: ``torch.bmm(``, ``.softmax(``, ``max(``; every operator of ``torch.Tensor``),
  so a target's own logging around ``torch.save`` is no finding, and every function, class (with its
  methods) and table (a module-level dict's entries) of the oracle's and the judge's own modules
  (``kernel_oracle.reference.*``, ``kernel_oracle.harness.*``): the object, and for a Python function its
  ``__code__``, defaults and keyword defaults; a module replaced in ``sys.modules`` too (a kernel family
  registered or removed since changes the tables by the registry's hand: their fingerprint is taken again);
* **torch's namespaces, whatever the baseline**: a callable there whose ``__module__`` is not torch's (a
  user's function put in place before the baseline was taken: the user's process may import the target
  first);
* **the dispatcher**: a kernel of an ``aten`` or ``prims`` op registered from outside torch (its location
  is neither torch's build tree nor its installed package) -- all of them when the target has loaded, every
  :data:`FULL_EVERY` calls and whenever ``torch.library`` registered anything, else none;
* **modes**: a ``TorchFunctionMode`` or ``TorchDispatchMode`` left active.

:func:`replaced` returns one ``(switch, text)`` per replacement, like a changed global setting (Note
[Global state]), and a campaign records each as a finding: the verdicts computed while it was in place are
void.  It puts back what Python allows (the original object, code or defaults; the mode taken off the
stack), so later cases are judged by the originals; a dispatcher kernel cannot be taken back, and its text
says that every later verdict is void.
"""

from __future__ import annotations

import builtins
import functools
import importlib.util
import math
import operator
import re
import sys
import types
from pathlib import Path
from typing import Any, Optional

import torch
import torch.nn.functional

from kernel_oracle.harness.family import registry_generation

__all__ = ["FULL_EVERY", "baseline", "rebase", "replaced", "restore"]

# calls between two full dispatcher scans (a C++ registration made during a call is found within this many)
FULL_EVERY = 200
_SWITCH = "oracle: "
_OWN = ("kernel_oracle.reference", "kernel_oracle.harness")
_TORCH_NAMESPACES = (torch, torch.nn.functional, torch.linalg, torch.special, torch.functional)
_TORCH_CLASSES = (torch.Tensor,)
# modules a callable of torch's namespaces may come from (typing helpers torch re-exports)
_TORCH_OWN = ("torch", "typing", "typing_extensions")
_CALLED = {"torch": re.compile(r"\b(?:torch|F)\.(?:nn\.functional\.|linalg\.|special\.|functional\.)?(\w+)\s*\("),
           "method": re.compile(r"\.(\w+)\s*\("),
           "plain": re.compile(r"(?:(?<![\w.])|\bmath\.)(\w+)\s*\(")}
_KERNEL_LINE = re.compile(r"^(?P<key>[A-Za-z0-9_\[\]]+): registered at (?P<loc>.*?) :: ", re.M)


@functools.lru_cache(maxsize=1)
def _called_names() -> dict:
    """The names the oracle's and the judge's sources call (Note [The oracle's own code]), read once from the
    files of ``reference/`` and ``harness/``: kind (``torch``, ``method``, ``plain``) -> names."""
    text = ""
    for package in _OWN:
        spec = importlib.util.find_spec(package)
        for folder in (spec.submodule_search_locations or ()) if spec else ():
            text += "".join(p.read_text(encoding="utf-8", errors="replace") for p in Path(folder).glob("*.py"))
    return {kind: frozenset(pattern.findall(text)) for kind, pattern in _CALLED.items()}


def _watched_attr(owner: Any, attr: str) -> bool:
    if owner in _TORCH_CLASSES:  # its methods, and its operators (a + b, a @ b)
        return attr in _called_names()["method"] or (attr.startswith("__") and attr.endswith("__"))
    return attr in _called_names()["torch" if owner in _TORCH_NAMESPACES else "plain"]


def _function_state(value: Any) -> tuple:
    if isinstance(value, types.FunctionType):
        return (value, value.__code__, value.__defaults__, value.__kwdefaults__)
    return (value,)


def _watched() -> list:
    """``(owner, label)`` of every namespace the fingerprint reads."""
    out = [(m, m.__name__) for m in _TORCH_NAMESPACES] + [(builtins, "builtins"), (math, "math")]
    out += [(c, f"torch.{c.__name__}") for c in _TORCH_CLASSES]
    for name, mod in sorted(sys.modules.items()):
        if isinstance(mod, types.ModuleType) and name.startswith(_OWN):
            out.append((mod, name))
            for attr, value in list(vars(mod).items()):
                if isinstance(value, type) and value.__module__ == name:
                    out.append((value, f"{name}.{attr}"))
    return out


def _foreign(value: Any) -> bool:
    """A callable in torch's namespaces that is not torch's (Note [The oracle's own code])."""
    if not callable(value) or isinstance(value, (type, types.GenericAlias)) or type(value).__module__ == "typing":
        return False  # classes and type aliases are not what the oracle calls
    module = getattr(value, "__module__", None)
    return isinstance(module, str) and bool(module) and not module.startswith(_TORCH_OWN)


def _entries(owner: Any, own: bool, torch_namespace: bool = False) -> dict:
    out = {}
    for attr, value in list(vars(owner).items()):
        if not own and not _watched_attr(owner, attr):
            continue
        if torch_namespace and _foreign(value):
            continue  # already replaced when the baseline was taken: the foreign check names it, never put back
        if callable(value) or isinstance(value, (staticmethod, classmethod, property)):
            out[attr] = _function_state(value)
        elif own and isinstance(value, dict) and attr.isupper() and not attr.startswith("_"):  # OP_DB, CONTRACTS
            out[attr] = (value, tuple((k, id(v)) for k, v in value.items()), dict(value))
    return out


_STATE_OF = operator.attrgetter("__code__", "__defaults__", "__kwdefaults__")


def _fast(owner: Any, entries: dict) -> tuple:
    """What a per-call check compares in C loops: the attribute names, their objects, and the state
    (code, defaults) of the Python functions among them."""
    attrs = tuple(entries)
    funcs = [s[0] for s in entries.values() if len(s) == 4]
    tables = [(s[0], s[1]) for s in entries.values() if len(s) == 3]
    return attrs, [s[0] for s in entries.values()], funcs, list(map(_STATE_OF, funcs)), tables


def _unchanged(owner: Any, fast: tuple) -> bool:
    attrs, values, funcs, states, tables = fast
    now = vars(owner)
    return (list(map(now.get, attrs)) == values and list(map(_STATE_OF, funcs)) == states
            and all(tuple(zip(t, map(id, t.values()))) == items for t, items in tables))


class _Baseline:
    """The fingerprint of the watched namespaces, the modules, and the count of ``torch.library``'s
    registrations, taken before any target import."""

    def __init__(self) -> None:
        self.entries = {label: (owner, _entries(owner, label.startswith(_OWN), label.startswith("torch")))
                        for owner, label in _watched()}
        self.fast = {label: _fast(owner, entries) for label, (owner, entries) in self.entries.items()}
        self.modules = {label: owner for owner, label in _watched() if isinstance(owner, types.ModuleType)}
        self.calls = 0
        self.module_count = len(sys.modules)
        self.registered = _library_registrations()
        self.reported: set = set()
        self.generation = registry_generation()

    def retake_own(self) -> None:
        """The fingerprint of our own modules again: a kernel family was registered or removed since (its rows
        joined the tables the oracle reads, by the registry's own hand, not a target's)."""
        self.generation = registry_generation()
        for label, (owner, _) in list(self.entries.items()):
            if label.startswith(_OWN):
                self.entries[label] = (owner, _entries(owner, True))
                self.fast[label] = _fast(owner, self.entries[label][1])

    def refresh_new_modules(self) -> None:
        """Modules of ours imported since (a lazy import): watched from now on."""
        if len(sys.modules) == self.module_count:
            return
        self.module_count = len(sys.modules)
        for owner, label in _watched():
            if label not in self.entries:
                self.entries[label] = (owner, _entries(owner, label.startswith(_OWN)))
                self.fast[label] = _fast(owner, self.entries[label][1])
                if isinstance(owner, types.ModuleType):
                    self.modules[label] = owner


_BASELINE: Optional[_Baseline] = None


def baseline() -> _Baseline:
    """This process's baseline, taken on the first call (before any target is imported: Note [The
    oracle's own code])."""
    global _BASELINE
    if _BASELINE is None:
        _BASELINE = _Baseline()
    return _BASELINE


def rebase() -> _Baseline:
    """Take the Python part of the baseline again, now (an in-process campaign, before it loads its target:
    what its caller set up -- a test's monkeypatch -- is the caller's, not the target's); returns the
    baseline it replaces, which :func:`restore` puts back when the campaign ends (else the caller's patch,
    undone by the caller, would read as a replacement and be put back in every later check)."""
    global _BASELINE
    old = baseline()
    _BASELINE = _Baseline()
    _BASELINE.reported, _BASELINE.calls = old.reported, old.calls
    return old


def restore(prior: Optional[_Baseline]) -> None:
    """The baseline from before :func:`rebase` again (the campaign that took it has ended); None: no
    rebase was taken (an isolated campaign), nothing to do."""
    global _BASELINE
    if prior is None:
        return
    if _BASELINE is not None:
        prior.reported, prior.calls = _BASELINE.reported, _BASELINE.calls
    _BASELINE = prior


def _library_registrations() -> int:
    import torch.library

    return len(getattr(torch.library, "_impls", ()))


def _name_of(value: Any) -> str:
    return f"{getattr(value, '__module__', None) or '?'}.{getattr(value, '__qualname__', type(value).__name__)}"


def _python_changes(base: _Baseline) -> list:
    out = []
    for label, module in base.modules.items():
        if sys.modules.get(label, module) is not module:
            out.append((f"{_SWITCH}{label}", f"the module {label} was replaced in sys.modules (put back)"))
            sys.modules[label] = module
    for label, (owner, entries) in base.entries.items():
        if _unchanged(owner, base.fast[label]):  # the common case, in C loops: nothing to name
            continue
        now = vars(owner)
        for attr, state in entries.items():
            value = now.get(attr)
            if len(state) == 3:  # a table: its entries put back
                if value is state[0] and tuple((k, id(v)) for k, v in value.items()) == state[1]:
                    continue
                out.append((f"{_SWITCH}{label}.{attr}", f"{label}.{attr}, a table the oracle reads, was changed "
                                                        f"(put back)"))
                state[0].clear()
                state[0].update(state[2])
                setattr(owner, attr, state[0])
                continue
            if value is not None and _function_state(value) == state:
                continue
            what = "replaced by " + _name_of(value) if value is not state[0] else "changed in place (its code)"
            out.append((f"{_SWITCH}{label}.{attr}", f"{label}.{attr} was {what} (put back)"))
            _put_back(owner, attr, state)
    return out


def _put_back(owner: Any, attr: str, state: tuple) -> None:
    try:
        setattr(owner, attr, state[0])
        if len(state) == 4:
            state[0].__code__, state[0].__defaults__, state[0].__kwdefaults__ = state[1:]
    except (AttributeError, TypeError):  # a read-only slot: the finding stands, nothing to put back
        pass


def _foreign_callables() -> list:
    """Callables of torch's namespaces that are not torch's (Note [The oracle's own code])."""
    out = []
    for owner, label, attrs in _torch_watched():
        now = vars(owner)
        for attr in attrs:
            value = now.get(attr)
            if _foreign(value):
                out.append((f"{_SWITCH}{label}.{attr}", f"{label}.{attr} is {_name_of(value)}, not torch's"))
    return out


@functools.lru_cache(maxsize=1)
def _torch_watched() -> tuple:
    """``(owner, label, names)`` of torch's namespaces: the names of them the oracle calls."""
    return tuple((owner, owner.__name__ if isinstance(owner, types.ModuleType) else f"torch.{owner.__name__}",
                  tuple(a for a in list(vars(owner)) if _watched_attr(owner, a)))
                 for owner in _TORCH_NAMESPACES + _TORCH_CLASSES)


def _torch_locations() -> tuple:
    """Where torch's own kernels are registered: its build tree (from a core op's schema) and its package."""
    debug = torch._C._dispatch_dump("aten::add.Tensor").splitlines()
    line = next((x for x in debug if x.startswith("debug: registered at ")), "")
    where = line.split("registered at ", 1)[-1]
    build = re.split(r"/(?:build/)?aten/src/", where)[0] if "/aten/src/" in where else None
    return tuple(p for p in (build, str(Path(torch.__file__).resolve().parent)) if p)


def _foreign_kernels() -> list:
    """``aten`` / ``prims`` kernels registered from outside torch (every op: Note [The oracle's own code])."""
    own = _torch_locations()
    out = []
    for op in torch._C._dispatch_get_all_op_names():
        if not op.startswith(("aten::", "prims::")):
            continue
        for m in _KERNEL_LINE.finditer(torch._C._dispatch_dump(op)):
            loc = m.group("loc")
            if not loc.startswith(own) and loc != "(none)":
                out.append((f"{_SWITCH}{op}", f"{op} has a {m.group('key')} kernel registered at {loc}, outside "
                                              f"torch; it cannot be taken back: every verdict after it is void"))
                break
    return out


def _left_modes() -> list:
    out = []
    while torch._C._len_torch_function_stack() > 0:
        mode = torch._C._pop_torch_function_stack()
        out.append((f"{_SWITCH}torch function mode", f"a TorchFunctionMode ({_name_of(type(mode))}) was left "
                                                     f"active (taken off)"))
    while torch._C._len_torch_dispatch_stack() > 0:
        mode = torch._C._pop_torch_dispatch_stack()
        out.append((f"{_SWITCH}torch dispatch mode", f"a TorchDispatchMode ({_name_of(type(mode))}) was left "
                                                     f"active (taken off)"))
    return out


def replaced(*, full: bool = False) -> list[tuple[str, str]]:
    """``(switch, text)`` per thing the oracle runs that is not what it was (Note [The oracle's own code]);
    what Python allows is put back.  ``full``: scan the dispatcher now (else on its own schedule).  A
    dispatcher kernel, which stays, is reported by the first call that finds it only."""
    base = baseline()
    base.calls += 1
    base.refresh_new_modules()
    if base.generation != registry_generation():
        base.retake_own()
    out = _left_modes() + _python_changes(base) + _foreign_callables()
    registered = _library_registrations()
    if full or base.calls == 1 or base.calls % FULL_EVERY == 0 or registered != base.registered:
        base.registered = registered
        for switch, text in _foreign_kernels():
            if switch not in base.reported:
                base.reported.add(switch)
                out.append((switch, text))
    return out
