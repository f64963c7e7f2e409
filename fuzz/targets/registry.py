"""The targets registry: anything with SGLang's signatures can be fuzzed.

Note [Targets registry]
-----------------------
:func:`register_target` maps a spec's ``name`` (:class:`~kernel_oracle.harness.targets.TargetSpec`:
a built-in name such as ``triton`` or ``sglang``, or ``mutant`` / ``module`` for the specs of those
kinds) to a factory ``(spec, device, sources) -> Target``, together with the configuration keys that
target knows (``triton@vision_fp32=tf32``) and their valid values.  :func:`resolve_target` parses the
spec once, refuses a configuration key or value the target does not know (a :class:`TargetError`
listing the known ones), checks its entry points' parameter lists against the signature table
(:func:`harness.entry_signatures.check_entries`: a wrong one is dropped, its problem kept in
``signature_errors``) and caches the target per spec, device and sources.  One module per adapter
in this package registers itself (``reference``, ``triton``, ``sglang``, ``torch-varlen``,
``flashinfer-cudnn``, ``mutant:NAME``, ``package.module[:attr]``); the registry imports none of them.
A resolution never raises for an unavailable target: check ``.available`` and report ``.reason``.
"""

from __future__ import annotations

from typing import Callable, Mapping, Optional, Union

from kernel_oracle.harness.entry_signatures import check_entries
from kernel_oracle.harness.targets import Target, TargetError, TargetSources, TargetSpec

__all__ = ["Factory", "builtin_targets", "register_target", "resolve_target", "resolved_spec", "serves",
           "target_configuration"]

Factory = Callable[[TargetSpec, str, TargetSources], Target]
_FACTORIES: dict[str, Factory] = {}
_CONFIGURATION: dict[str, dict[str, tuple[str, ...]]] = {}
_FAMILIES: dict[str, tuple[str, ...]] = {}
_KINDS = ("mutant", "module")  # registry names of the spec kinds that are not built-in names
_CACHE: dict = {}


def register_target(name: str, factory: Factory, *, configuration: Optional[Mapping[str, tuple]] = None,
                    families: Optional[tuple] = None) -> None:
    """Make specs named ``name`` resolve through ``factory(spec, device, sources)``; ``configuration``:
    key -> its valid values, the ``@key=value`` items this target knows (none by default); ``families``:
    the only op families the target can serve, where that is known before it is resolved (a vision
    peer: ``("vision",)``), so a plan leaves the other families out without importing the peer."""
    if not name or ":" in name or "." in name or "=" in name:
        raise TargetError(f"register_target: name={name!r}; pass a built-in name such as 'triton', or "
                          f"{' / '.join(map(repr, _KINDS))} for those kinds of spec")
    _FACTORIES[name] = factory
    _CONFIGURATION[name] = {str(k): tuple(str(v) for v in values) for k, values in (configuration or {}).items()}
    if families is not None:
        _FAMILIES[name] = tuple(families)


def serves(spec: Union[str, TargetSpec], family: str) -> Optional[bool]:
    """False when the target of ``spec`` was registered with ``families`` that leave ``family`` out;
    None when that is known only once it is resolved."""
    families = _FAMILIES.get(TargetSpec.parse(spec).name)
    return None if families is None or family in families else False


def builtin_targets() -> tuple[str, ...]:
    """The registered built-in names (``reference``, ``triton``, ...), in registration order."""
    return tuple(n for n in _FACTORIES if n not in _KINDS)


def target_configuration(name: str) -> dict[str, tuple[str, ...]]:
    """key -> valid values of the configuration the target ``name`` knows."""
    return dict(_CONFIGURATION.get(name, {}))


def _check_configuration(spec: TargetSpec) -> None:
    known = _CONFIGURATION.get(spec.name, {})
    for key, value in spec.configuration:
        if key not in known:
            hint = (f"the only valid keys are {sorted(known)}" if known
                    else f"{spec.base} takes no configuration: pass {spec.base!r}")
            raise TargetError(f"target {str(spec)!r}: configuration key {key!r} is unknown; {hint}")
        if value not in known[key]:
            raise TargetError(f"target {str(spec)!r}: {key}={value!r} is invalid; the only valid values are "
                              + ", ".join(repr(v) for v in known[key]))


def _importable(name: str) -> bool:
    """Whether ``name`` is a top-level module this process can import: in the current directory or on
    ``sys.path`` (found, not yet imported; Note [Modules beside the user])."""
    from .user_modules import find_spec

    return name.isidentifier() and find_spec(name) is not None


def resolved_spec(spec: Union[str, TargetSpec]) -> TargetSpec:
    """``spec`` as it resolves: a plain name that is no registered target but an importable module
    (``mykernels``) is that module's spec; any other spec is itself."""
    parsed = TargetSpec.parse(spec)
    if (parsed.name not in _FACTORIES and parsed.kind == "builtin" and not parsed.configuration
            and _importable(parsed.name)):
        return TargetSpec(name="module", module=parsed.name)
    return parsed


def resolve_target(spec: Union[str, TargetSpec], device="cpu", *, sources: Optional[TargetSources] = None) -> Target:
    """The :class:`Target` of ``spec`` (a spec string or a :class:`TargetSpec`), cached per spec, device
    and sources; :class:`TargetError` for a malformed or unknown spec or configuration."""
    parsed = TargetSpec.parse(spec)
    sources = sources or TargetSources()
    key = (parsed, str(device), sources)
    if key in _CACHE:
        return _CACHE[key]
    parsed = resolved_spec(parsed)
    factory = _FACTORIES.get(parsed.name)
    if factory is None:
        from .user_modules import where_looked

        raise TargetError(f"target={str(parsed)!r} is unknown; the only built-in targets are "
                          f"{list(builtin_targets())}, and it is no importable module either (tried "
                          f"'import {parsed.name.replace('-', '_')}': {where_looked(parsed.name.replace('-', '_'))}; "
                          f"or pass mutant:NAME or package.module[:attr])")
    _check_configuration(parsed)
    from kernel_oracle.harness import oracle_integrity  # torch: when a target is resolved, not when registered

    oracle_integrity.baseline()  # before the target's code runs here (Note [The oracle's own code])
    target = factory(parsed, str(device), sources)
    if target.available:  # Note [Entry-point signatures]: a wrong parameter list is dropped, and said
        target.signature_errors = check_entries(str(parsed), target.entries)
        for op, why in target.signature_errors.items():
            target.entries.pop(op)
            target.notes[op] = why
    _CACHE[key] = target
    return target
