"""What a target is (:class:`Target`) and how one is named (:class:`TargetSpec`).

Note [Target specs]
-------------------
A target is named by a spec string, parsed once into a frozen, hashable :class:`TargetSpec`:

=====================================  ==========  ==========================================
spec                                   kind        fields
=====================================  ==========  ==========================================
``reference``, ``triton``, ...         builtin     ``name``
``sglang`` / ``-trt`` / ``-v2``       builtin     ``name``, ``variant`` (the installed release)
``sglang==0.5.23``                     release     ``name="sglang"``, ``release``, ``variant="default"``
``sglang-trt==0.5.23``                 release     ``name="sglang-trt"``, ``release``, ``variant="trt"``
``sglang-v2==0.5.23``                  release     ``name="sglang-v2"``, ``release``, ``variant="v2"``
``sglang-csgmv==0.5.23``               release     ``name="sglang-csgmv"``, ``release``, ``variant="csgmv"``
``mutant:lora_wrong_slot``             mutant      ``name="mutant"``, ``mutant``
``package.module`` / ``pkg.mod:attr``  module      ``name="module"``, ``module``, ``attr``
=====================================  ==========  ==========================================

Any of them may end in a configuration, ``@key=value[,key=value...]`` (``triton@vision_fp32=tf32``,
``sglang-trt==0.5.23@lora_opti=on,cublas_kv_b=on``): kept sorted by key, so ``str(spec)`` is the canonical spelling and
``TargetSpec.parse(str(spec)) == spec``.  Which keys a target knows is the registry's business
(:func:`kernel_oracle.fuzz.targets.register_target`): parsing only checks the shape.  ``name`` is
the registry key the spec resolves through (a built-in name, ``"mutant"`` or ``"module"``), so a
release and the installed package of the same name share one adapter.

Note [Targets]
--------------
A :class:`Target` maps op names (``step_a_q`` ... ``v_side_fused``, ``vision``) to callables with
the signatures of :mod:`reference.lora` / :func:`reference.vision.flashinfer_cudnn_attention`, and
declares what the comparison needs to be fair:

* ``precision``: how it runs fp32 matmuls, one value for every entry point or a dict per op
  (``precision_for(op)``): ``"ieee"`` (exact fp32 products), ``"tf32"`` (TF32, operands rounded to
  nearest or truncated: the baseline takes the worst of both), or one mode, ``"tf32-rne"`` /
  ``"tf32-trunc"``; the tolerance baseline is the faithful oracle in that precision
  (reference.tolerance, Note [TF32 rounding]), and records name it per op;
* ``strict``: whether it implements our strict validation (third-party code does not: malformed
  metadata cases are then validation gaps by construction; ``--upstream-contracts-only`` skips them);
* ``excluded_dtypes``: dtype -> reason; a third-party Triton target run under the interpreter is not
  tested in bfloat16, because the interpreter computes bf16 arithmetic on raw bit patterns
  (docs/semantics.md#where-the-triton-interpreter-is-wrong) and we cannot neutralise that inside code we do not own;
  ``excluded_dtypes_by_family``: family -> {dtype: reason} for one family only (an SGLang release's
  vision wrapper runs on cuDNN SDPA, which takes no float32, while its kv_b kernels do):
  :meth:`Target.excluded_for` gives both together;
* ``poison``: an optional ``family -> context manager`` that makes the target allocate its fresh
  outputs full of NaN (our vision kernel's hook);
* ``declines``: what of the family's contract its code path does not have, feature -> reason: for
  LoRA an upstream contract id of the kv_b files (``"lora.missing_max_len"``: SGLang's ``triton_v2``
  correction reads no ``max_len``); for vision the features of SGLang's call it does not take (``"gqa"``,
  ``"window_size"``, ``"s_aux"``, ``"softmax_scale"``, ``"forward_metadata"``:
  :data:`kernel_oracle.harness.features_vision.VISION_FEATURES`): it is given no case of them and its record says
  why.  A target that takes an argument and ignores it declares nothing, and fails.  An SGLang release's
  vision wrapper declines what that release's own ``VisionAttention`` never passes it (0.5.10 passes
  neither ``softmax_scale`` nor ``window_size`` nor ``s_aux``; before 0.5.16 no ``forward_metadata``):
  a wrapper that ignores an argument its callers never pass has no defect;
* ``tiles``: family -> the block structure of its code as data (Note [Tile models] in
  :mod:`kernel_oracle.harness.tiles`): the strategies draw sizes around those blocks and the campaign counts
  how many cases reach past the first one; a family it does not describe has no coverage rows, with the reason;
* ``metadata_helper``: the target's own vision metadata helper, SGLang's
  ``prepare_flashinfer_cudnn_vision_attention_metadata(cu_seqlens, device, *, elem_per_token)``, which
  builds the metadata of problems with ``metadata_source="helper"`` (None: our stand-in).

A target with only some entry points is tested on those; an unavailable one carries the reason, and
callers report it.  :class:`TargetSources` says where code that is not installed comes from (the
SGLang wheels of ``sglang==X.Y.Z``); it travels with a campaign to its worker, never through the
environment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Optional, Union

from kernel_oracle.harness.family import FAMILY_OPS

__all__ = ["PRECISIONS", "RELEASE_NAMES", "SPEC_EXAMPLES", "Target", "TargetError", "TargetSources", "TargetSpec",
           "parse_target_list", "unavailable"]


class TargetError(ValueError):
    """An unknown or malformed target spec, or a configuration its target does not know."""


# fp32 matmul precisions a target may declare (the faithful oracle modes of reference.tolerance)
PRECISIONS = ("ieee", "tf32", "tf32-rne", "tf32-trunc")
# the names that take a published release (``NAME==X.Y.Z``), and the kernel variant each one selects
RELEASE_NAMES = {"sglang": "default", "sglang-trt": "trt", "sglang-v2": "v2", "sglang-csgmv": "csgmv"}
SPEC_EXAMPLES = ("'reference'", "'triton'", "'sglang==0.5.23'", "'mutant:NAME'", "'package.module[:attr]'")

_NAME = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_MODULE = re.compile(rf"{_IDENT}(\.{_IDENT})*")
_KEY = re.compile(r"[a-z][a-z0-9_]*")
_VALUE = re.compile(r"[A-Za-z0-9_.+-]+")
_VERSION_TOKEN = re.compile(r"[A-Za-z0-9_.+!-]+")
_MUTANT = re.compile(r"[A-Za-z0-9_]+")
_RESERVED = {"mutant": "mutant:NAME", "module": "package.module[:attr]"}


def _malformed(text: object, why: str) -> TargetError:
    return TargetError(f"Expected a target spec such as {', '.join(SPEC_EXAMPLES[:-1])} or {SPEC_EXAMPLES[-1]}, "
                       f"optionally with @key=value[,key=value...], but got spec={text!r}: {why}")


@dataclass(frozen=True)
class TargetSpec:
    """A parsed target spec (Note [Target specs]); build it with :meth:`parse` or the fields."""

    name: str
    release: Optional[str] = None
    variant: Optional[str] = None
    mutant: Optional[str] = None
    module: Optional[str] = None
    attr: Optional[str] = None
    configuration: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        pairs = tuple(sorted((str(k), str(v)) for k, v in self.configuration))
        text = self._text(pairs)
        for key, value in pairs:
            if not _KEY.fullmatch(key) or not _VALUE.fullmatch(value):
                raise _malformed(text, f"configuration {key}={value!r} is not key=value with a lower-case key "
                                       f"and a value of letters, digits and '_.+-'")
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            raise _malformed(text, f"configuration key {_first_duplicate(keys)!r} is given twice")
        object.__setattr__(self, "configuration", pairs)
        why = self._inconsistency()
        if why:
            raise _malformed(text, why)
        if self.variant is None:
            object.__setattr__(self, "variant", RELEASE_NAMES.get(self.name))

    def _inconsistency(self) -> str:
        """Why these fields name no spec ("" when they do)."""
        if self.module is not None:
            ok = (self.name == "module" and _MODULE.fullmatch(self.module) is not None and self.release is None
                  and self.mutant is None and (self.attr is None or _MODULE.fullmatch(self.attr) is not None))
            return "" if ok and self.variant is None else "a module spec is package.module or package.module:attr"
        if self.mutant is not None:
            ok = self.name == "mutant" and _MUTANT.fullmatch(self.mutant) and self.release is None
            return "" if ok and self.attr is None and self.variant is None else \
                "a mutant spec is mutant:NAME (letters, digits and underscores)"
        if self.name in _RESERVED:
            return f"pass {_RESERVED[self.name]}"
        if not _NAME.fullmatch(self.name) or self.attr is not None:
            return "a built-in name is lower-case letters, digits and '-'"
        if self.release is not None and self.name not in RELEASE_NAMES:
            return f"only {', '.join(RELEASE_NAMES)} take ==RELEASE"
        if self.release is not None and not _VERSION_TOKEN.fullmatch(self.release):
            return "the release after '==' is empty or has characters a version never has"
        if self.variant is not None and self.variant != RELEASE_NAMES.get(self.name):
            return f"variant={self.variant!r}, but {self.name} selects variant {RELEASE_NAMES.get(self.name)!r}"
        return ""

    @classmethod
    def parse(cls, text: object) -> "TargetSpec":
        """The spec of ``text`` (a :class:`TargetSpec` is returned as it is); :class:`TargetError`
        naming what to pass when it is malformed."""
        if isinstance(text, TargetSpec):
            return text
        if not isinstance(text, str) or not text:
            raise _malformed(text, "pass a non-empty string")
        if any(c.isspace() for c in text):
            raise _malformed(text, "a spec has no spaces")
        head, at, conf = text.partition("@")
        pairs = []
        if at:
            if not conf:
                raise _malformed(text, "the configuration after '@' is empty: pass @key=value[,key=value...]")
            for item in conf.split(","):
                key, eq, value = item.partition("=")
                if not eq or not key or not value:
                    raise _malformed(text, f"configuration item {item!r} is not key=value")
                pairs.append((key, value))
        return cls(configuration=tuple(pairs), **_head_fields(text, head))

    @property
    def kind(self) -> str:
        """``"builtin"``, ``"release"``, ``"mutant"`` or ``"module"``."""
        if self.module is not None:
            return "module"
        if self.mutant is not None:
            return "mutant"
        return "release" if self.release is not None else "builtin"

    @property
    def base(self) -> str:
        """The spec without its configuration (``sglang==0.5.23@pdl=off`` -> ``sglang==0.5.23``)."""
        return self._text(())

    def option(self, key: str, default: Optional[str] = None) -> Optional[str]:
        """The configuration value of ``key``, or ``default``."""
        return dict(self.configuration).get(key, default)

    def _text(self, pairs) -> str:
        if self.module is not None:
            head = self.module + (f":{self.attr}" if self.attr is not None else "")
        elif self.mutant is not None:
            head = f"mutant:{self.mutant}"
        else:
            head = self.name + (f"=={self.release}" if self.release is not None else "")
        return head + ("@" + ",".join(f"{k}={v}" for k, v in pairs) if pairs else "")

    def __str__(self) -> str:
        return self._text(self.configuration)

    def __repr__(self) -> str:
        return f"TargetSpec.parse({str(self)!r})"


def _first_duplicate(keys: list) -> str:
    seen: set = set()
    for k in keys:
        if k in seen:
            return k
        seen.add(k)
    return ""


def _head_fields(text: str, head: str) -> dict:
    """The fields of a spec's part before ``@`` (its shape only; :class:`TargetSpec` checks the rest)."""
    if head.startswith("mutant:"):
        return {"name": "mutant", "mutant": head[len("mutant:"):]}
    if "==" in head:
        name, _, release = head.partition("==")
        if name not in RELEASE_NAMES:
            raise _malformed(text, f"only {', '.join(RELEASE_NAMES)} take ==RELEASE")
        return {"name": name, "release": release, "variant": RELEASE_NAMES[name]}
    module, colon, attr = head.partition(":")
    if colon or "." in module:
        if not _MODULE.fullmatch(module) or (colon and not _MODULE.fullmatch(attr)):
            raise _malformed(text, "a module spec is package.module or package.module:attr")
        return {"name": "module", "module": module, "attr": attr if colon else None}
    if head in _RESERVED:
        raise _malformed(text, f"pass {_RESERVED[head]}")
    if not _NAME.fullmatch(head):
        if _MODULE.fullmatch(head):  # my_kernels: no built-in name has '_' or capitals, so a module
            return {"name": "module", "module": head, "attr": None}
        raise _malformed(text, "a built-in name is lower-case letters, digits and '-'")
    return {"name": head, "variant": RELEASE_NAMES.get(head)}


def parse_target_list(text: str) -> list[TargetSpec]:
    """The specs of a comma-separated list (``--targets``): ``triton@a=1,b=2,sglang==0.5.23`` is two
    specs, since a ``key=value`` item after a configured spec continues its configuration."""
    items: list[str] = []
    for item in (part.strip() for part in str(text).split(",")):
        if not item:
            continue
        if items and "@" in items[-1] and "@" not in item and "==" not in item and _KEY.fullmatch(
                item.partition("=")[0]) and "=" in item:
            items[-1] += "," + item
        else:
            items.append(item)
    return [TargetSpec.parse(item) for item in items]


@dataclass(frozen=True)
class TargetSources:
    """Where code that is not installed comes from: ``sglang_wheel``, a wheel or a directory of wheels
    for the ``sglang==X.Y.Z`` targets (``--sglang-wheel``; None: the cache, then ``pip download``)."""

    sglang_wheel: Optional[str] = None


@dataclass
class Target:
    """Entry points of one target and what a fair comparison needs (Note [Targets])."""

    name: str
    entries: dict = field(default_factory=dict)  # op -> callable
    available: bool = True
    reason: str = ""
    precision: Union[str, dict] = "ieee"  # one for every op, or op -> precision (ops not named: "ieee")
    strict: bool = True
    excluded_dtypes: dict = field(default_factory=dict)  # dtype name -> reason
    excluded_dtypes_by_family: dict = field(default_factory=dict)  # family -> {dtype name: reason}
    poison: Optional[Callable] = None  # family -> context manager
    notes: dict = field(default_factory=dict)  # op -> why it is missing
    status: Optional[Callable[[], str]] = None  # a live ``reason`` (e.g. an engine's fallback note)
    release: Optional[str] = None  # the upstream package's version (known issues apply per release)
    declines: dict = field(default_factory=dict)  # feature or contract -> why this target does not implement it
    metadata_helper: Optional[Callable] = None  # the target's own vision metadata helper (SGLang's signature)
    signature_errors: dict = field(default_factory=dict)  # op -> why its entry point's parameters are wrong
    tiles: dict = field(default_factory=dict)  # family -> tile model (Note [Tile models] in harness.tiles)

    def __post_init__(self) -> None:
        if isinstance(self.precision, dict):
            known = {op for ops in FAMILY_OPS.values() for op in ops}
            for op, prec in self.precision.items():
                if op not in known:
                    raise TargetError(f"target {self.name!r}: precision names op={op!r}; the only valid ops are "
                                      f"{sorted(known)}")
                self._check_precision(prec, f"precision[{op!r}]")
        else:
            self._check_precision(self.precision, "precision")

    def _check_precision(self, prec: object, what: str) -> None:
        if not isinstance(prec, str) or prec not in PRECISIONS:
            raise TargetError(f"target {self.name!r}: {what}={prec!r}; the only valid values are "
                              + ", ".join(repr(p) for p in PRECISIONS))

    def precision_for(self, op: str) -> str:
        """How this target runs fp32 matmuls in ``op`` (the ``precision=`` of ``expected_outcome``)."""
        if isinstance(self.precision, dict):
            return self.precision.get(op, "ieee")
        return self.precision

    def precisions(self) -> dict:
        """op -> precision for every entry point."""
        return {op: self.precision_for(op) for op in sorted(self.entries)}

    def precision_summary(self) -> str:
        """One line for reports: ``"ieee"`` when every entry point agrees, else
        ``"tf32: step_a_q, ...; ieee: vision"``."""
        by: dict = {}
        for op, prec in self.precisions().items():
            by.setdefault(prec, []).append(op)
        if len(by) <= 1:
            return next(iter(by), self.precision if isinstance(self.precision, str) else "ieee")
        return "; ".join(f"{prec}: {', '.join(ops)}" for prec, ops in by.items())

    def has(self, op: str) -> bool:
        return op in self.entries

    def entry(self, op: str) -> Callable:
        try:
            return self.entries[op]
        except KeyError:
            raise TargetError(f"target {self.name!r} has no entry point for op {op!r}; it has "
                              f"{sorted(self.entries)}") from None

    def ops(self, family: str) -> tuple[str, ...]:
        return tuple(op for op in FAMILY_OPS[family] if op in self.entries)

    def excluded_for(self, family: Optional[str] = None) -> dict:
        """dtype -> why it is not tested: the target-wide exclusions and those of ``family``."""
        return {**self.excluded_dtypes, **(self.excluded_dtypes_by_family.get(family) or {})}

    def dtypes(self, candidates, family: Optional[str] = None) -> tuple[str, ...]:
        excluded = self.excluded_for(family)
        return tuple(d for d in candidates if d not in excluded)

    def to_record(self) -> dict:
        reason = self.status() if self.status is not None else self.reason
        return {"name": self.name, "available": self.available, "reason": reason,
                "entry_points": sorted(self.entries), "precision": self.precision_summary(),
                "precision_by_op": self.precisions(), "strict": self.strict,
                "excluded_dtypes": dict(self.excluded_dtypes),
                "excluded_dtypes_by_family": {f: dict(d) for f, d in self.excluded_dtypes_by_family.items()},
                "missing": dict(self.notes), "release": self.release, "declines": dict(self.declines),
                "signature_errors": dict(self.signature_errors), "tiles": dict(self.tiles)}


def unavailable(name: str, reason: str, **kw) -> Target:
    """A target that cannot run here, with the reason callers report."""
    return Target(name, {}, available=False, reason=reason, **kw)
