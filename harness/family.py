"""The families registry: one :class:`Family` record per kernel family.

Note [Families registry]
------------------------
A kernel family (``lora``: the kv_b LoRA steps; ``vision``: the flashinfer_cudnn attention; ``csgmv``:
SGLang's chunked SGMV) is one frozen :class:`Family` record: its name, a label for reports, its data (its
signature and contract rows, its tolerance ``k``, ...) and its parts.  Each part is a *loader*: a function of no arguments whose body imports the part
with an ordinary ``from ... import ...`` and returns it, so a reader and the import linter see every
dependency a record has, while nothing is imported until a part is asked for (:meth:`Family.resolve`) and
the command line lists the families without torch.  A record never names a module as a string.

The records import parts from every layer (the fuzz layer's case strategies, the jobs' selfcheck rows, the
benchmarks), so they live in the top layer, :mod:`kernel_oracle.families`, which the package root imports:
importing any module of the package registers the built-in records first.  This module, in the harness,
imports none of them (the layers contract of ``.importlinter``); the harness reads a record through
:func:`get_family` and calls its parts, as a plug-in registry does.

:func:`register_family` adds a record (a second record of the same name is refused) and its rows to the
reference layer's tables (Note [Reference tables] in :mod:`kernel_oracle.reference.registry`); the tables the
harness builds from the records (the op database) rebuild themselves (:func:`watch_registry`).
:func:`get_family` looks one up, :func:`families` lists them in registration order, and
:data:`FAMILY_OPS` / :data:`FAMILY_OF` are live read-only views of the registry (family -> its ops;
family or op -> family).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping, Optional

from kernel_oracle.reference.contract_row import Contract
from kernel_oracle.reference.registry import register_reference, unregister_reference
from kernel_oracle.reference.signatures import Signature

__all__ = ["FAMILY_OF", "FAMILY_OPS", "PARTS", "Family", "FamilyError", "Loader", "campaign_ops", "default_family_names",
           "families", "family_names", "get_family", "op_choices", "op_groups", "op_text", "register_family",
           "registry_generation", "unregister_family", "watch_registry"]


# a part's loader: imports the part when called, and returns it (Note [Families registry])
Loader = Callable[[], object]
# the fields of a record that hold loaders, the first three required
PARTS = ("reference", "problem", "strategies", "kernels", "benchmark", "cases", "selfcheck", "mismatch", "locator",
         "declined", "independent", "opinfos", "mutations", "tile_models", "valid_part", "row_structure", "features", "for_declines", "triggers", "words", "warm_up", "variants")
_REQUIRED_PARTS = PARTS[:3]


class FamilyError(ValueError):
    """A malformed, duplicate or unknown family (a ``ValueError``: a usage error where a user named it)."""


@dataclass(frozen=True)
class Family:
    """One kernel family.

    Data: ``label``: how reports name it; ``signatures``: its rows of ``reference.signatures.SIGNATURES`` (its
    ``ops`` are theirs, in order; a record without rows names its ``ops``); ``contract_rows``: its rows of the
    contract table; ``error_multiplier``: the tolerance rule's ``k`` for it (None where ``mismatch`` judges its
    outputs); ``never_sent``: the declinable features whose cases make a target that declines them address
    memory outside its tensors, which no command sends it (a corpus entry included; the other declines spare a
    campaign what its target's callers never pass or what is known, and a corpus entry may measure them);
    ``compiling_targets``: the target names whose campaigns of this family compile many kernel variants first
    (the main job warms them up); ``corpus_across_ops``: its ops share one routing, so a corpus entry's cases
    run for every op of it a target has; ``bare_function_op``: the op a target module's bare function
    (``package.module:attr``) is taken as; ``by_default``: whether the commands that take every family unless
    told (``run`` and the main job, ``mutants``, ``bench``) take this one (False: only where ``--op`` names it).

    Every other field is a part's loader (Note [Families registry]), None where the family has no such part,
    and :meth:`resolve` gives the part.  Required: ``reference``: the module of its float64 oracles and drop-in
    entry points; ``problem``: the class of its plain-data problem; ``strategies``: its Hypothesis problem
    strategy.  Optional: ``kernels``: our Triton module of its entry points; ``benchmark``: the module of its
    benchmark shapes; ``cases``: its case strategy, ``f(*, ops, dtypes, declines, categories, limits, big,
    tiles)``, which draws the categories it has among those asked, its sizes around the blocks of the target's
    tile model ``tiles`` (:func:`kernel_oracle.fuzz.strategies.cases` calls it; None: no cases to fuzz);
    ``opinfos``: its rows of the op database (:mod:`kernel_oracle.harness.opinfo`); ``mutations``: its
    :class:`~kernel_oracle.harness.mutations.MutationKinds`; ``independent``: the formulation the selfcheck
    compares its reference with, ``f(op, args, kwargs) -> (value, defined)``; ``selfcheck``: its own selfcheck
    rows, ``f(device, cases, seed)`` (None: the generic loop of :mod:`kernel_oracle.jobs.selfcheck`);
    ``mismatch``: its oracle's own comparison, ``f(baseline, actual, out_dtype, repro)`` -> the reason or None,
    in place of the tolerance rule; ``locator``: ``f(call)`` -> ``(locate, route)``, its words for an output
    element in a mismatch message and the call's routing, whose unrouted rows must stay bit-identical (needed
    where ``mismatch`` is None); ``declined``: ``f(problem, mutation, declines)`` -> the features of a target's
    ``declines`` a case uses, which no campaign gives that target; ``tile_models``: model name ->
    :class:`~kernel_oracle.harness.tiles.TileModel` of the codes of it whose blocks are known.

    The hooks of the shared path, each answering "not mine" where None: ``valid_part``: the
    :class:`~kernel_oracle.harness.malformed.ValidPart` of a malformed case (none: no valid part);
    ``row_structure``: ``f(case, call, rows)`` -> the
    :class:`~kernel_oracle.harness.buckets.RowStructure` a mismatch's region reads (none: ``everywhere``);
    ``features``: the :class:`~kernel_oracle.harness.features.FeatureTable` of the call features a failure
    may need and a target may decline (none: no features); ``for_declines``: ``f(case_dict, declines)`` -> the
    same case as a target declining those can be given it (none: as it is); ``triggers``: name -> predicate
    of its known-issue triggers (none: no trigger); ``words``: ``f(problem_dict)`` -> its problem in a
    report's words, standard library only (none: field by field); ``warm_up`` and ``variants``:
    ``f(ops, dtypes)`` -> the fixed warm-up cases and one case per compiled variant of our kernels of it
    (none: no warm-up, no variants)."""

    name: str
    label: str
    reference: Loader
    problem: Loader
    strategies: Loader
    kernels: Optional[Loader] = None
    benchmark: Optional[Loader] = None
    cases: Optional[Loader] = None
    selfcheck: Optional[Loader] = None
    mismatch: Optional[Loader] = None
    locator: Optional[Loader] = None
    declined: Optional[Loader] = None
    independent: Optional[Loader] = None
    opinfos: Optional[Loader] = None
    mutations: Optional[Loader] = None
    tile_models: Optional[Loader] = None
    valid_part: Optional[Loader] = None
    row_structure: Optional[Loader] = None
    features: Optional[Loader] = None
    for_declines: Optional[Loader] = None
    triggers: Optional[Loader] = None
    words: Optional[Loader] = None
    warm_up: Optional[Loader] = None
    variants: Optional[Loader] = None
    ops: tuple[str, ...] = field(default=())
    signatures: tuple[Signature, ...] = field(default=())
    contract_rows: tuple[Contract, ...] = field(default=())
    error_multiplier: Optional[float] = None
    never_sent: tuple[str, ...] = field(default=())
    compiling_targets: tuple[str, ...] = field(default=())
    corpus_across_ops: bool = False
    bare_function_op: Optional[str] = None
    by_default: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier() or self.name != self.name.lower():
            raise FamilyError(f"Family: name={self.name!r}; pass a lower-case identifier such as 'lora'")
        if not isinstance(self.signatures, tuple) or not all(isinstance(s, Signature) for s in self.signatures):
            raise FamilyError(f"Family {self.name!r}: signatures={self.signatures!r}; pass a tuple of "
                              f"reference.signatures.Signature rows")
        if not self.ops:  # its ops are its signature rows'
            object.__setattr__(self, "ops", tuple(s.op for s in self.signatures))
        if not isinstance(self.ops, tuple) or not self.ops or not all(isinstance(o, str) and o for o in self.ops):
            raise FamilyError(f"Family {self.name!r}: ops={self.ops!r}; pass a non-empty tuple of op names, or "
                              f"its signature rows")
        if len(set(self.ops)) != len(self.ops):
            raise FamilyError(f"Family {self.name!r}: ops={self.ops!r} repeat a name")
        if self.signatures and self.mismatch is None and self.error_multiplier is None:
            raise FamilyError(f"Family {self.name!r}: its outputs are judged by the tolerance rule (no mismatch "
                              f"part), which needs its k: pass error_multiplier=2.0 or a mismatch part")
        if self.bare_function_op is not None and self.bare_function_op not in self.ops:
            raise FamilyError(f"Family {self.name!r}: bare_function_op={self.bare_function_op!r} is none of its ops "
                              f"{list(self.ops)}")
        if self.signatures and self.ops != tuple(s.op for s in self.signatures):
            raise FamilyError(f"Family {self.name!r}: ops={self.ops!r} differ from its signature rows' "
                              f"{tuple(s.op for s in self.signatures)!r}; leave ops out")
        for part in PARTS:
            loader = getattr(self, part)
            if (loader is None and part in _REQUIRED_PARTS) or not (loader is None or callable(loader)):
                raise FamilyError(f"Family {self.name!r}: {part}={loader!r}; pass the part's loader, a function "
                                  f"that imports the part and returns it (def _{part}(): from package.module "
                                  f"import thing; return thing), never an import path")

    def resolve(self, what: str):
        """The part ``what`` (one of :data:`PARTS`) its loader returns; None where the family has none."""
        if what not in PARTS:
            raise FamilyError(f"Family.resolve: what={what!r}; the only valid values are {list(PARTS)}")
        loader = getattr(self, what)
        return None if loader is None else loader()

    def contracts(self) -> tuple[str, ...]:
        """The ids of the contract table's rows whose entry points are this family's."""
        from kernel_oracle.reference.contracts import CONTRACTS

        return tuple(c.id for c in CONTRACTS.values() if c.api == self.name)


_REGISTRY: dict[str, Family] = {}
_OF: dict[str, str] = {}  # family or op name -> family, rebuilt at each (un)registration: read per case
_WATCHERS: list[Callable[[], None]] = []  # called after each (un)registration: tables built from the records
_GENERATION = [0]  # (un)registrations so far


def _reindex() -> None:
    _OF.clear()
    _OF.update({f.name: f.name for f in _REGISTRY.values()})
    _OF.update({op: f.name for f in _REGISTRY.values() for op in f.ops})
    _GENERATION[0] += 1
    for watcher in _WATCHERS:
        watcher()


def register_family(family: Family) -> Family:
    """Add ``family``, and its signature rows, contract rows and tolerance multiplier to the reference
    layer's tables (Note [Reference tables] in :mod:`kernel_oracle.reference.registry`); :class:`FamilyError`
    naming it when a family of that name or an op of it is already registered, or a row of it is another's.
    Returns ``family``."""
    if not isinstance(family, Family):
        raise FamilyError(f"register_family: expected a Family but got {family!r}")
    if family.name in _REGISTRY:
        raise FamilyError(f"register_family: family {family.name!r} is already registered; "
                          f"unregister_family({family.name!r}) first to replace it")
    taken = {op: f.name for f in _REGISTRY.values() for op in (f.name, *f.ops)}
    clash = sorted({*family.ops, family.name} & set(taken))
    if clash:
        raise FamilyError(f"register_family: family {family.name!r} names {clash}, which family "
                          f"{taken[clash[0]]!r} already has")
    try:
        register_reference(family.name, signatures=family.signatures, contract_rows=family.contract_rows,
                           error_multiplier=family.error_multiplier)
    except ValueError as exc:
        raise FamilyError(f"register_family: {exc}") from None
    _REGISTRY[family.name] = family
    try:
        _reindex()
    except Exception:  # a table built from the records refused it (its OpInfo rows): as if never registered
        unregister_family(family.name)
        raise
    return family


def unregister_family(name: str) -> Family:
    """Remove the family ``name`` and its reference tables, and return its record (a test's toy family, a
    plug-in replaced)."""
    try:
        family = _REGISTRY.pop(name)
    except KeyError:
        raise FamilyError(f"unregister_family: family {name!r} is not registered") from None
    unregister_reference(name)
    _reindex()
    return family


def watch_registry(watcher: Callable[[], None]) -> None:
    """Call ``watcher()`` after every later (un)registration: a table built from the records (the op
    database) rebuilds itself then."""
    _WATCHERS.append(watcher)


def registry_generation() -> int:
    """How many (un)registrations there have been (what a fingerprint of the tables was taken at)."""
    return _GENERATION[0]


def get_family(name: str) -> Family:
    """The record of family ``name``; :class:`FamilyError` naming the registered ones otherwise."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise FamilyError(f"family={name!r} is unknown; the only valid values are {list(_REGISTRY)}") from None


def families() -> tuple[Family, ...]:
    """Every registered record, in registration order."""
    return tuple(_REGISTRY.values())


def family_names() -> tuple[str, ...]:
    """Every registered family's name, in registration order (``("lora", "vision", "csgmv")`` built in)."""
    return tuple(_REGISTRY)


def default_family_names() -> tuple[str, ...]:
    """The names of the families taken where no ``--op`` names any (``by_default``), in registration order."""
    return tuple(name for name, f in _REGISTRY.items() if f.by_default)


def op_choices() -> tuple[str, ...]:
    """What an item of ``--op`` may name, sorted: every family and every op."""
    return tuple(sorted(FAMILY_OF))


def op_groups(text: str) -> dict[str, tuple[str, ...]]:
    """family -> its ops that ``text`` names: the one grammar of ``--op`` in every command, a comma list of
    family and op names (``lora``: every LoRA op; ``step_a_q,step_b_q``: those two; ``lora,vision``: both
    families).  Families in the order first named, each one's ops in its record's order.  :class:`FamilyError`
    naming the valid values for an empty list or an unknown name."""
    items = [p.strip() for p in str(text).split(",") if p.strip()]
    unknown = [p for p in items if p not in _OF]
    if not items or unknown:
        ops = [op for f in _REGISTRY.values() for op in f.ops if op != f.name]
        named = f"names {unknown}, which no family has" if unknown else "names nothing"
        raise FamilyError(f"{text!r} {named}; the only valid values are the families {list(_REGISTRY)} and their "
                          f"ops {ops}, comma-separated")
    named: dict[str, set] = {}
    for item in items:
        family = _REGISTRY[_OF[item]]
        named.setdefault(family.name, set()).update(family.ops if item == family.name else (item,))
    return {name: tuple(op for op in _REGISTRY[name].ops if op in wanted) for name, wanted in named.items()}


def op_text(family: str, ops) -> str:
    """The ``--op`` text of ``ops`` of ``family``: the family's name for all of its ops, else the ops
    joined by commas (what a campaign's ``op`` holds)."""
    ops = tuple(ops)
    return family if set(ops) == set(get_family(family).ops) else ",".join(ops)


def campaign_ops(text: str) -> tuple[str, tuple[str, ...]]:
    """``(family, ops)`` of one campaign's ``op`` (:func:`op_groups` of one family); :class:`FamilyError`
    when ``text`` names ops of several families (a campaign fuzzes one)."""
    groups = op_groups(text)
    if len(groups) > 1:
        raise FamilyError(f"{text!r} names ops of {len(groups)} families ({', '.join(groups)}); a campaign "
                          f"fuzzes one family: pass the ops of one, or run them all with kernel-oracle run --op "
                          f"{','.join(groups)}")
    return next(iter(groups.items()))


class _FamilyOps(Mapping):
    """family name -> its ops, read from the registry at each access."""

    def __getitem__(self, name: str) -> tuple[str, ...]:
        return _REGISTRY[name].ops

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(_REGISTRY))

    def __len__(self) -> int:
        return len(_REGISTRY)

    def __repr__(self) -> str:
        return f"FAMILY_OPS({dict(self)!r})"


class _FamilyOf(Mapping):
    """family name or op name -> its family: the registry's index, current after every (un)registration."""

    def __getitem__(self, name: str) -> str:
        return _OF[name]

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(_OF))

    def __len__(self) -> int:
        return len(_OF)

    def __repr__(self) -> str:
        return f"FAMILY_OF({_OF!r})"


# family -> its ops in a stable order
FAMILY_OPS: Mapping[str, tuple[str, ...]] = _FamilyOps()
# op or family name -> family (what a campaign's ``op`` may be)
FAMILY_OF: Mapping[str, str] = _FamilyOf()
