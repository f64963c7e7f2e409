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


# Note [LoRA block entries]: what an entry of LoRAOptions.blocks sets, per op.  An entry replaces the default
# one of kernels.lora.BLOCKS[op][path] whole, so it names every size the kernel tiles by (powers of two:
# tl.arange's lengths) and num_warps; the rest is optional: the pipelining stages and register cap, the fused
# kernels' switches (kernels.lora's Notes: PREFETCH, HEADS_FIRST, META_FIRST, PDL, EARLY; the q side's
# PREFETCH_ALL and C_SPLIT), and on the token-major path the overrides chosen per batch (WIDE_BT, WIDE,
# EARLY_BLOCKS; kernels.lora._plan.token_major_blocks).
_LORA_SIZES = {"step_a_q": ("BT", "BLOCK_K"), "step_b_q": ("BT", "BH", "BLOCK_C"), "step_a_v": ("BT", "BH", "BLOCK_K"),
               "step_b_v": ("BT", "BLOCK_V"), "q_side_fused": ("BT", "BLOCK_K", "BLOCK_C"),
               "v_side_fused": ("BT", "BLOCK_K", "BLOCK_V")}
_LORA_FUSED_FLAGS = ("PREFETCH", "HEADS_FIRST", "META_FIRST", "PDL", "EARLY")
_LORA_NESTED = ("WIDE", "EARLY_BLOCKS")  # token-major entries of overrides


def _lora_block_kinds(op: str, path: str, nested: bool = False) -> dict:
    """key -> kind ("size", "count", "flag", "split", "entry") of what ``blocks[op][path]`` may set; ``nested``:
    inside WIDE / EARLY_BLOCKS (no further per-batch keys)."""
    kinds = {**dict.fromkeys(_LORA_SIZES[op], "size"), "num_warps": "size", "num_stages": "count",
             "maxnreg": "count"}
    if op.endswith("_fused"):
        kinds.update(dict.fromkeys(_LORA_FUSED_FLAGS, "flag"))
    if op == "q_side_fused":
        kinds.update(PREFETCH_ALL="flag", C_SPLIT="split")
    if path == "tok" and not nested:
        kinds.update(WIDE_BT="size", **dict.fromkeys(_LORA_NESTED, "entry"))
    return kinds


def _lora_check_value(where: str, key: str, value: Any, kind: str) -> None:
    is_int = isinstance(value, int) and not isinstance(value, bool)
    ok = {"size": is_int and value > 0 and value & (value - 1) == 0, "count": is_int and value > 0,
          "flag": isinstance(value, bool), "split": value is None or (is_int and value > 0)}.get(kind, True)
    if not ok:
        expected = {"size": "a power of two", "count": "a positive int", "flag": "True or False",
                    "split": "None (every column) or a positive number of columns"}[kind]
        raise OptionsError(f"LoRAOptions: {where}[{key!r}]={value!r} is invalid; expected {expected}")


def _lora_entry(op: str, path: str, entry: Any, nested: bool = False) -> tuple:
    """``entry`` (a mapping, or the (key, value) pairs a frozen one holds) checked and frozen: its pairs sorted
    by key, nested entries frozen the same way."""
    where = f"blocks[{op!r}][{path!r}]"
    pairs = entry.items() if isinstance(entry, Mapping) else entry
    try:
        items = dict(pairs)
    except (TypeError, ValueError):
        raise OptionsError(f"LoRAOptions: expected {where} to be a dict of block keys but got {entry!r}") from None
    kinds = _lora_block_kinds(op, path, nested)
    unknown = sorted(set(items) - set(kinds), key=str)
    if unknown:
        raise OptionsError(f"LoRAOptions: {where} has no key {unknown[0]!r}; the only valid keys are "
                           + ", ".join(repr(k) for k in kinds))
    if not nested:
        missing = [k for k, kind in kinds.items() if kind == "size" and k != "WIDE_BT" and k not in items]
        if missing:
            raise OptionsError(f"LoRAOptions: {where} lacks {', '.join(map(repr, missing))}; an entry replaces the "
                               f"default one whole: start from kernels.lora.BLOCKS[{op!r}][{path!r}]")
    for key, value in items.items():
        if kinds[key] == "entry":
            value = items[key] = _lora_entry(op, path, value, nested=True)
        _lora_check_value(where, key, value, kinds[key])
    return tuple(sorted(items.items()))


def _lora_blocks(value: Any) -> tuple:
    """``LoRAOptions.blocks`` frozen: ``((op, path, entry pairs), ...)`` sorted, from ``{op: {path: entry}}`` or
    from such triples."""
    if isinstance(value, Mapping):
        triples = []
        for op, paths in value.items():
            _one_of("LoRAOptions", "blocks op", op, tuple(_LORA_SIZES))
            if not isinstance(paths, Mapping):
                raise OptionsError(f"LoRAOptions: expected blocks[{op!r}] to be a dict {{path: entry}} but got "
                                   f"{paths!r}")
            triples += [(op, path, entry) for path, entry in paths.items()]
    else:
        try:
            triples = [tuple(t) for t in value]
        except TypeError:
            raise OptionsError(f"LoRAOptions: expected blocks to be a dict {{op: {{path: entry}}}} but got "
                               f"blocks={value!r}") from None
    frozen = {}
    for triple in triples:
        if len(triple) != 3:
            raise OptionsError(f"LoRAOptions: expected each of blocks to be (op, path, entry) but got {triple!r}")
        op, path, entry = triple
        _one_of("LoRAOptions", "blocks op", op, tuple(_LORA_SIZES))
        _one_of("LoRAOptions", f"blocks[{op!r}] path", path, ("seg", "tok"))
        frozen[(op, path)] = _lora_entry(op, path, entry)
    return tuple((op, path, entry) for (op, path), entry in sorted(frozen.items()))


def _thawed(pairs: tuple) -> dict:
    """A frozen entry as a dict again (its nested entries too)."""
    return {k: _thawed(v) if k in _LORA_NESTED else v for k, v in pairs}


@dataclass(frozen=True)
class LoRAOptions:
    """How the kv_b LoRA kernels launch (Note [Launch options]; the Notes of :mod:`kernels.lora._kernels`
    say what each does).

    * ``route``: ``"auto"`` lets the planner pick segment-major or token-major tiles; ``"seg"`` /
      ``"tok"`` force one path (tests and benchmarks);
    * ``early_reads``: Note [Early reads]: the fused decode kernels read metadata and weights before
      the previous kernel ends (only right when nothing still running writes them);
    * ``slot_sorted``: Note [Slot-sorted tiles]: token-major tiles over few segments take one slot's rows
      in segment order (``False``: consecutive logical rows);
    * ``flat_slots``: Note [Flat slot grid]: slot-sorted launches over few slots lay their (slot, tile)
      pairs out on one grid axis, where that launches at most ``1 / flat_slots_min_saving`` of the
      per-slot grid's programs (``0``: wherever allowed);
    * ``fp32_dot``: ``"auto"``: ``tl.dot`` in TF32 for fp32 activations with fp32 weights on a GPU, exact
      fp32 where tiles are upcast (the interpreter, mixed dtypes); ``"tf32"``: TF32 on operands rounded
      to TF32 wherever the tiles are fp32, the interpreter included (it emulates the tensor cores);
    * ``blocks``: entries that replace the default block table's (``kernels.lora.BLOCKS``), as
      ``{op: {path: entry}}`` (Note [LoRA block entries]); kept as sorted ``(op, path, pairs)`` triples,
      so that the value is hashable.
    """

    route: str = "auto"
    early_reads: bool = False
    slot_sorted: bool = True
    flat_slots: bool = True
    flat_slots_min_saving: float = 2
    fp32_dot: str = "auto"
    blocks: tuple = ()

    def block_entry(self, op: str, path: str) -> Optional[dict]:
        """The entry ``blocks`` gives ``op`` on ``path`` (a fresh dict), or None: the default table's."""
        for o, p, pairs in self.blocks:
            if (o, p) == (op, path):
                return _thawed(pairs)
        return None

    def __post_init__(self) -> None:
        _one_of("LoRAOptions", "route", self.route, ("auto", "seg", "tok"))
        _is_bool("LoRAOptions", "slot_sorted", self.slot_sorted)
        _is_bool("LoRAOptions", "flat_slots", self.flat_slots)
        saving = self.flat_slots_min_saving
        if isinstance(saving, bool) or not isinstance(saving, (int, float)) or not saving >= 0:
            raise OptionsError(f"LoRAOptions: expected flat_slots_min_saving to be a number >= 0 (0: the flat grid "
                               f"wherever allowed) but got flat_slots_min_saving={saving!r}")
        _one_of("LoRAOptions", "fp32_dot", self.fp32_dot, ("auto", "tf32"))
        object.__setattr__(self, "blocks", _lora_blocks(self.blocks))
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
      Triton's per-call work;
    * ``kernel``: ``"triton"`` the portable Triton kernel (interpreter, every GPU); ``"gluon"`` the
      warp-specialized Hopper kernel (Note [Gluon Hopper kernel] in :mod:`kernels.vision._gluon`) where
      it runs (sm_90, fp16/bf16, no window or sinks, head dims up to 128, TMA-readable layouts), the
      Triton kernel elsewhere; the planned launch says which (``VisionLaunch.kernel``).

    A launch is planned under the options in force and keeps them: the launch cache and the repeated
    call are keyed on them (Note [Launch cache] in :mod:`kernels.vision.attention`).
    """

    split_head_dim: Optional[bool] = None
    fp32_exact: int = 2
    fold_scale: bool = True
    direct_launch: bool = True
    kernel: str = "triton"

    def __post_init__(self) -> None:
        _exactly_one_of("VisionOptions", "split_head_dim", self.split_head_dim, (None, False, True))
        _exactly_one_of("VisionOptions", "fp32_exact", self.fp32_exact, (0, 1, 2))
        _is_bool("VisionOptions", "fold_scale", self.fold_scale)
        _is_bool("VisionOptions", "direct_launch", self.direct_launch)
        _one_of("VisionOptions", "kernel", self.kernel, ("triton", "gluon"))


def _sections() -> dict:
    """name -> options class of each kernel family's section of :class:`LaunchOptions` (its fields with a
    default factory)."""
    return {f.name: f.default_factory for f in dataclasses.fields(LaunchOptions)
            if f.default_factory is not dataclasses.MISSING}


@dataclass(frozen=True)
class LaunchOptions:
    """The one options value: ``lora``, ``vision`` and ``poison_outputs`` (fresh outputs allocated
    full of NaN, so a test sees every element a kernel failed to write)."""

    lora: LoRAOptions = field(default_factory=LoRAOptions)
    vision: VisionOptions = field(default_factory=VisionOptions)
    poison_outputs: bool = False

    def __post_init__(self) -> None:
        for name, cls in _sections().items():
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
            if name in _sections() and isinstance(value, Mapping):
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
