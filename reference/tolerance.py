"""The tolerance rule (docs/semantics.md#tolerance-rule) and one failure-message layout.

Note [Tolerance rule]
---------------------
A target passes when, over the defined region,

    err(target) <= K * err(baseline) + floor

where ``err(x) = max |x - ref64|`` against the float64 oracle, the *baseline* is the same
computation done in the target's dtype with the kernels' rounding points (the oracle's
``faithful`` mode: FlashAttention's ``upcast=False`` reference), ``K`` is a named constant per
family (its record's ``error_multiplier``, :data:`reference.registry.ERROR_MULTIPLIER`) and ``floor`` is twice the representation error of the float64 result in the output dtype
(FlashAttention's ``fwd_atol``) plus :data:`ABS_FLOOR`.  When no baseline exists (float64 outputs,
or a caller that has none) the per-dtype ``rtol``/``atol`` table of ``torch.testing.assert_close``
is the fallback; so is it when a baseline is not finite where the reference is, away from the dtype's
overflow threshold (Note [Non-finite baselines]): a non-finite baseline never widens the allowance,
and the message says the table was used.

fp32 targets that compute ``tl.dot`` in TF32 declare ``precision="tf32"`` (per entry point:
``Target.precision_for(op)``); their baseline then rounds matmul inputs to TF32, in both ways the
hardware may do it, and the worst counts (Note [TF32 rounding]), so that a TF32 kernel is held to a
TF32 standard and an exact-fp32 kernel to an fp32 one.  The report states which precision was used.

Note [Non-finite values]
------------------------
Where the float64 reference itself is not finite (inf, NaN; the LoRA oracle also holds an inf where a
rounding point overflows its dtype, reference/lora.py), the output must be that same value (NaN for
NaN, inf of the same sign), and such places take no part in the baseline error, the floor or the
allowance.  Everywhere else in the defined region the output is judged by the allowance, and a
non-finite output is a mismatch whatever the allowance (the allowance is always finite: an inf
allowance compared with an inf error would let a NaN output pass) -- with one exception: an
inf of the reference's sign where the reference is within the allowance of the dtype's overflow
threshold (:func:`overflow_threshold`, fp16: 65520).  A correct kernel's value there lies on either
side of the threshold, so it stores inf or the largest finite value (65504), and either is right (a
rule without this exception flags a correct fp16 step_b_q whose huge beyond-rank inputs put a few
outputs at the boundary, every finite error well within the allowance).  Where the reference lies beyond the threshold by more than the allowance, only inf is
right, and a saturated 65504 is a mismatch.

Note [Non-finite baselines]
---------------------------
The baseline error is measured where the reference lies in the output dtype's range and the baseline
is finite.  A baseline's inf there is one of two things.  (1) Its rounding across the overflow
threshold: the reference is within the allowance of the threshold (fp16: 65520) and the baseline, an
fp16 computation with its own error, lands beyond it -- the very boundary at which a target may store
inf (Note [Non-finite values]).  Such elements tell nothing about the dtype's rounding error and are
left out; the message counts them (counting them instead would send a correct fp16 step_b_q to the
``assert_close`` table, rtol 1e-3, far tighter than its baseline's error elsewhere).  (2) Anything
else (an inf or NaN away from the threshold) means the faithful computation is not a sample of the
dtype's error: the table is used for the whole output.  Either way the allowance stays finite: a
non-finite baseline never widens it.

Note [TF32 rounding]
--------------------
TF32 keeps 10 of fp32's 23 mantissa bits.  ``tl.dot`` with ``input_precision="tf32"`` (Triton's
default for fp32 on NVIDIA GPUs) hands raw fp32 operands to the tensor cores, which on the H200
*truncate* them; a kernel that rounds its operands itself first (ours: ``cvt``-style round to
nearest, :func:`kernel_oracle.kernels.interpreter.round_tf32`) gets round-to-nearest.  Both errors
have the same spread, but truncation is biased (every operand shrinks by 2**-11 of its value on
average), so its dot-product error is larger.  Measured here on CPU (torch emulation, random normal
operands, 20 draws each, M x K x N = 64x512x16, 64x512x128, 128x128x64, 256x1536x128, 64x16x512;
the "hardware" is truncated operands summed in reverse K order): its error is a median 2.3-2.6x,
at most 3.55x, that of the round-to-nearest baseline, so with K = 2 the old rule (round-to-nearest
baseline only) rejected 17-20 of 20 draws per shape on a handful of elements (median 6-35 of
1e3-3e4, the 3-72 elements at ~1.6x seen on SGLang's kernels on the H200); against the worst of a
truncated and a round-to-nearest baseline 0 of 100 draws fail, and a round-to-nearest kernel still
passes (0/100).  The rule stays tight: operands truncated to 8 mantissa bits fail 100/100, one
dropped element of the K sum 60/60.  (An fp16-rounded accumulator per K block of 16 is caught only
when K is long: 15/20 at K=512, 20/20 at K=1536, 0/20 at K=16, where it is no worse than TF32.)
``faithful="tf32"`` therefore carries both (``OracleResult.alternates``); ``"tf32-rne"`` and
``"tf32-trunc"`` hold a target to the one mode it declares.

Note [Baseline orders]
----------------------
``err(baseline)`` is one sample of the dtype's rounding error, and over a small defined region
(a handful of tokens) it is a noisy one.  Measured on vision attention in fp32 with logits x30
(4 and 12+7 tokens, one head, D=16, TRITON_INTERPRET): the *same* torch fp32 computation with its
sums in another, random order -- mathematically identical and equally valid -- failed the rule
against the natural-order baseline in 7 of 400 and 22 of 300 draws.  That is the rule crying wolf,
not a bug; the first main-job finding (F0001, our vision kernel in fp32 at 1.16x the allowance) was
one of these.  ``compare`` therefore accepts several baselines and takes the worst: the faithful
oracle's ``OracleResult.baselines``, which for fp32 vision holds the natural order and 7 others
(reference.vision.FP32_BASELINE_ORDERS: with 8 orders, 0 of the same 700 draws failed).  K and
the floor are unchanged, and every mutant of fuzz/mutants.py is still killed.

On the H200 a 10-minute soak (30,786 cases) of our vision kernel still gave 33 fp32 hits at 1.07x,
all with large logits (logit_scale 8-30, D=80/128).  Flash-attention kernels -- ours, cuDNN's --
fold ``scale * log2(e)`` into one factor, take ``exp2`` of base-2 logits, keep a running maximum
over key blocks and divide by the row sum last: roundings the plain-softmax baselines never make.
Half the alternates therefore take that form (``reference.vision.attention_block(exp2=True,
key_block=...)``, blocks of 32/64/128 and one): the same mathematics in fp32, what every FA-style
target computes.  Measured on the H200 with ``benchmarks/triage_vision_fp32`` it is not the whole
story: of 18 saved problems from two soaks, 17 fail without it and 13 with it (worst 1.47x), and
fresh large-logit draws fail 0 of 100 either way -- about one fp32 case in a thousand still misses
by a few elements.  Resolved in the kernel, not the rule: those misses were real excess error of our
kernel's fp32 logits (float64 logits in the kernel remove all 18, and a 10-minute soak then runs
43,326 cases clean: Note [Exact fp32] in ``kernels/vision/_kernel.py``).  The FA-form alternates stay:
they are valid fp32 computations of the same mathematics, and the rule was not loosened.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import torch

from kernel_oracle.reference.registry import ERROR_MULTIPLIER  # K of the rule, per family (Note [Reference tables])

__all__ = [
    "ABS_FLOOR",
    "ASSERT_CLOSE_TOLERANCES",
    "ERROR_MULTIPLIER",
    "Comparison",
    "compare",
    "FAITHFUL_MODES",
    "TF32_MODES",
    "check_faithful",
    "round_to_tf32",
    "tf32_mode",
]

# absolute floor added to every allowance: outputs that are exactly 0 still get a sliver
ABS_FLOOR = 1e-6
# torch.testing.assert_close's defaults, rtol and atol together (the fallback table)
ASSERT_CLOSE_TOLERANCES = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
}


# Note [TF32 rounding]: the two ways fp32 operands become TF32 (10 explicit mantissa bits)
TF32_MODES = ("rne", "trunc")
_TF32_DROP = 0x1FFF  # the 13 low mantissa bits TF32 does not keep
_QUIET_NAN = 0x7FC00000  # exponent all ones, top mantissa bit set: a NaN in every mode


# the oracles' ``faithful=`` values: False (float64), True (the target's dtype, exact fp32 products),
# "tf32" (fp32 matmul operands in TF32, both modes: the worst counts), "tf32-rne" / "tf32-trunc" (one mode)
FAITHFUL_MODES = (False, True, "tf32", "tf32-rne", "tf32-trunc")


def check_faithful(faithful: object) -> None:
    """Raise a clear ValueError unless ``faithful`` is one of :data:`FAITHFUL_MODES`."""
    if not (isinstance(faithful, bool) or (isinstance(faithful, str) and faithful in FAITHFUL_MODES[2:])):
        raise ValueError(f"faithful={faithful!r} is invalid; the only valid values are "
                         + ", ".join(repr(m) for m in FAITHFUL_MODES))


def tf32_mode(faithful: object) -> Optional[str]:
    """The single :func:`round_to_tf32` mode of a ``faithful`` value ("rne", "trunc"), or None
    (no TF32, or ``"tf32"``: both modes, which the oracles run one after the other)."""
    return {"tf32-rne": "rne", "tf32-trunc": "trunc"}.get(faithful) if isinstance(faithful, str) else None


def round_to_tf32(x: torch.Tensor, mode: str = "rne") -> torch.Tensor:
    """fp32 ``x`` (any shape) rounded to TF32, kept as fp32 (same shape): see Note [TF32 rounding].

    ``mode="rne"``: to nearest, ties to even (what a conversion instruction does, and what our kernels
    do to their operands before ``tl.dot``); ``mode="trunc"``: toward zero (what the tensor cores do
    when ``tl.dot`` is handed raw fp32 operands).  Special values, in both modes: +-inf stay, NaN
    becomes the quiet NaN ``0x7FC00000`` with its sign (a payload only in the dropped bits would
    otherwise turn into inf), and a round to nearest that carries past the largest TF32 value gives
    inf of the same sign, as IEEE rounding does.  :func:`kernel_oracle.kernels.interpreter.round_tf32`
    is the same function in Triton, tested bit for bit against this one.
    """
    if x.dtype != torch.float32:
        raise TypeError(f"Expected a float32 tensor but got dtype={x.dtype}")
    if mode not in TF32_MODES:
        raise ValueError(f"mode={mode!r} is invalid; the only valid values are {TF32_MODES}")
    bits = x.contiguous().view(torch.int32)
    mag = bits & 0x7FFFFFFF
    sign = bits ^ mag
    nan = mag > 0x7F800000
    mag = torch.where(nan, torch.zeros_like(mag), mag)  # no integer overflow on NaN patterns
    if mode == "rne":
        mag = mag + (0x0FFF + ((mag >> 13) & 1))  # finite magnitudes stay below 2**31
    mag = torch.where(nan, torch.full_like(mag, _QUIET_NAN), mag & ~_TF32_DROP)
    return (mag | sign).view(torch.float32).view(x.shape)


@dataclass
class Comparison:
    """Outcome of one comparison; ``message`` follows assert_close's layout plus our locator."""

    ok: bool
    err: float
    allowed: float
    baseline_err: Optional[float]
    ratio: float  # err / allowed (<= 1 passes)
    mismatched: int
    total: int
    worst_index: tuple[int, ...] = ()
    worst_rel: float = 0.0
    rule: str = "baseline"
    message: str = ""
    where: dict = field(default_factory=dict)


def _mismatch_header(what: str, got: object, want: object) -> Comparison:
    msg = f"The values for {what} are not comparable: expected {want}, got {got}."
    return Comparison(False, float("inf"), 0.0, None, float("inf"), 0, 0, rule="meta", message=msg)


def _finite_max(x: torch.Tensor, mask: torch.Tensor) -> float:
    """max of ``x`` over ``mask`` (0.0 when empty)."""
    return float(torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device)).max()) if x.numel() else 0.0


@dataclass
class _Regions:
    """The float64 views and element masks one comparison works on (Note [Non-finite values]).

    ``a``/``r``: output and reference in float64; ``r_out``: the reference rounded to the output
    dtype; ``special``: defined elements where the reference is not finite (the output must be that
    very value, ``same_special``); ``regular``: the other defined elements, judged by the allowance;
    ``in_range``: regular elements whose reference the output dtype represents (where baselines and
    the representation floor are measured); ``alt``/``either``: the overflowed alternate reference and
    where an intermediate rounding point may overflow either way (None: nowhere)."""

    a: torch.Tensor
    r: torch.Tensor
    r_out: torch.Tensor
    special: torch.Tensor
    regular: torch.Tensor
    in_range: torch.Tensor
    same_special: torch.Tensor
    ref_abs: torch.Tensor
    zero: torch.Tensor
    alt: Optional[torch.Tensor]
    either: Optional[torch.Tensor]

    def like_alt(self, x: torch.Tensor) -> torch.Tensor:
        """Where ``x`` is the alternate's inf, or its NaN (an overflowed value times a zero further on)."""
        return self.either & ((x == self.alt) | (torch.isnan(x) & torch.isnan(self.alt)))


def _regions(actual: torch.Tensor, ref64: torch.Tensor, defined: torch.Tensor,
             overflow_alternate: Optional[torch.Tensor]) -> _Regions:
    f64 = torch.float64
    zero = torch.zeros((), dtype=f64, device=actual.device)
    a = actual.detach().to(f64)
    r = ref64.detach().to(f64)
    r_out = r.to(actual.dtype).to(f64)
    special = defined & ~torch.isfinite(r)
    regular = defined & ~special
    alt = None if overflow_alternate is None else overflow_alternate.detach().to(a.device, f64)
    return _Regions(a=a, r=r, r_out=r_out, special=special, regular=regular,
                    in_range=regular & torch.isfinite(r_out), same_special=(a == r) | (torch.isnan(a) & torch.isnan(r)),
                    ref_abs=torch.where(regular, r.abs(), zero), zero=zero, alt=alt,
                    either=None if alt is None else regular & ~torch.isfinite(alt))


def _baseline_error(rg: _Regions, baselines: tuple, dtype: torch.dtype, family: str) -> tuple:
    """``(baseline_err or None, allowed, note)`` of the faithful baselines (Note [Non-finite baselines]):
    the error is measured where a baseline is finite; its infs are allowed only as roundings across the
    overflow threshold, else (``None``) the caller uses the assert_close table.  One host sync."""
    r, in_range, zero = rg.r, rg.in_range, rg.zero
    b64 = [b.detach().to(rg.a.device, torch.float64) for b in baselines]
    err_t = torch.stack([torch.where(in_range & torch.isfinite(b), (b - r).abs(), zero).amax() for b in b64])
    floor_t = 2.0 * torch.where(in_range, (rg.r_out - r).abs(), zero).amax() + ABS_FLOOR
    allowed_t = ERROR_MULTIPLIER[family] * err_t.amax() + floor_t
    reach = in_range & (r.abs() + allowed_t >= overflow_threshold(dtype))
    crossed_t = stray_t = torch.zeros((), dtype=torch.int64, device=rg.a.device)
    for b in b64:
        off = in_range & ~torch.isfinite(b)
        across = off & torch.isinf(b) & (torch.sign(b) == torch.sign(r)) & reach
        if rg.either is not None:
            across = across | (off & rg.like_alt(b))
        crossed_t, stray_t = crossed_t + across.sum(), stray_t + (off & ~across).sum()
    base_err, allowed, crossed, stray = torch.stack(
        [err_t.amax(), allowed_t, crossed_t.to(torch.float64), stray_t.to(torch.float64)]).tolist()
    if stray:
        return None, allowed, (f"a baseline is not finite where the reference is (e.g. it overflowed) at {int(stray)} "
                               "element(s) away from the overflow threshold: fell back to the assert_close table")
    if crossed:
        return base_err, allowed, (f"a baseline rounded to inf across an overflow threshold at {int(crossed)} "
                                   "element(s) (not counted in baseline_err)")
    return base_err, allowed, ""


def _failure_lines(what: str, dtype, *, mismatched: int, total: int, err: float, abs_at, allowed_at: float,
                   greatest_rel: float, rel_at, ratio: float, worst, rule: str, base_err, baseline_note: str,
                   n_bad: int, where: dict, repro: str) -> list[str]:
    """The message of a failed comparison, in assert_close's layout plus our locator (STYLE 5)."""
    lines = [
        f"Tensor-likes are not close! ({what}, {dtype})",
        "",
        f"Mismatched elements: {mismatched} / {total} ({100.0 * mismatched / total:.1f}%)",
        f"Greatest absolute difference: {err:.6g} at index {abs_at} (up to {allowed_at:.6g} allowed)",
        f"Greatest relative difference: {greatest_rel:.6g} at index {rel_at}",
        f"Worst element: {ratio:.3g}x its allowance at index {worst}",
        f"Rule: {rule}" + (f"; baseline_err={base_err:.6g}" if base_err is not None else ""),
    ]
    if baseline_note:
        lines.append(f"Baseline: {baseline_note}")
    if n_bad:
        lines.append(f"Non-finite values where the reference is finite, or the reverse: {n_bad}")
    if where:
        lines.append("Where: " + ", ".join(f"{k}={v}" for k, v in where.items()))
    if repro:
        lines.append(f"Reproduce: {repro}")
    return lines


def compare(
    actual: torch.Tensor,
    ref64: torch.Tensor,
    defined: torch.Tensor,
    *,
    family: str,
    baseline: Optional[torch.Tensor | Sequence[torch.Tensor]] = None,
    out_dtype: Optional[torch.dtype] = None,
    locate: Optional[Callable[[tuple[int, ...]], dict]] = None,
    repro: str = "",
    what: str = "output",
    overflow_alternate: Optional[torch.Tensor] = None,
) -> Comparison:
    """Compare ``actual`` with the float64 oracle ``ref64`` over ``defined`` (Note [Tolerance rule]).

    ``actual``: the target's output (any float dtype, same shape); ``baseline``: the faithful
    same-dtype result, or several (the worst counts: Note [Baseline orders]; optional);
    ``locate(index)``: maps an output index to names such as segment, slot, head, token, appended to
    the message; ``repro``: a line that reproduces it; ``overflow_alternate``: the reference with its
    near-threshold rounding points overflowed (the LoRA oracle's, Note [Range at rounding points] in
    reference/lora.py): where it is inf or NaN and the reference finite, that value is a right output too.
    """
    if tuple(actual.shape) != tuple(ref64.shape):
        return _mismatch_header(f"{what} shape", tuple(actual.shape), tuple(ref64.shape))
    if out_dtype is not None and actual.dtype != out_dtype:
        return _mismatch_header(f"{what} dtype", actual.dtype, out_dtype)
    if actual.device != ref64.device:
        ref64, defined = ref64.to(actual.device), defined.to(actual.device)
    if family not in ERROR_MULTIPLIER:
        raise ValueError(f"family={family!r} is unknown; the only valid values are {sorted(ERROR_MULTIPLIER)}")
    dtype = actual.dtype
    total = int(defined.sum())
    if total == 0:
        return Comparison(True, 0.0, 0.0, None, 0.0, 0, 0, rule="empty", message="nothing defined to compare")
    rg = _regions(actual, ref64, defined, overflow_alternate)
    a, r, regular, special, zero = rg.a, rg.r, rg.regular, rg.special, rg.zero
    baselines = () if baseline is None else (baseline,) if isinstance(baseline, torch.Tensor) else tuple(baseline)
    base_err, baseline_note = None, ""
    if baselines and dtype != torch.float64:
        base_err, allowed, baseline_note = _baseline_error(rg, baselines, dtype, family)
    if base_err is not None:
        per_elem_allowed = torch.full_like(r, allowed)
        rule = f"err <= {ERROR_MULTIPLIER[family]:g} * baseline_err + floor"
    else:
        rtol, atol = ASSERT_CLOSE_TOLERANCES.get(dtype, ASSERT_CLOSE_TOLERANCES[torch.float32])
        per_elem_allowed = atol + rtol * rg.ref_abs
        allowed = _finite_max(per_elem_allowed, regular)
        rule = f"|a - r| <= {atol:g} + {rtol:g} * |r| (assert_close table for {dtype})"
    # an inf output of the reference's sign is a correct rounding of any value within the allowance of the
    # reference that reaches the dtype's overflow threshold (Note [Non-finite values])
    overflowed = regular & torch.isinf(a) & (torch.sign(a) == torch.sign(r)) & \
        (rg.ref_abs + per_elem_allowed >= overflow_threshold(dtype))
    if rg.either is not None:
        overflowed = overflowed | rg.like_alt(a)
    nonfinite = regular & ~torch.isfinite(a) & ~overflowed
    inf = torch.full((), float("inf"), dtype=torch.float64, device=actual.device)
    diff = torch.where(regular & ~overflowed & torch.isfinite(a), (a - r).abs(), zero)
    diff = torch.where(nonfinite | (special & ~rg.same_special), inf, diff)
    err = float(diff.max())
    over = defined & ~(diff <= per_elem_allowed)  # NaN in diff or allowance: a mismatch, never a pass
    mismatched = int(over.sum())
    ratios = torch.where(defined, diff / per_elem_allowed.clamp_min(1e-300), zero)
    ratios = torch.where(over & ~(ratios > 1.0), inf, ratios)
    worst = _argmax_index(ratios)
    ratio = float(ratios[worst])
    rel = torch.where(defined, diff / rg.ref_abs.clamp_min(1e-300), zero)
    abs_at, rel_at = _argmax_index(diff), _argmax_index(rel)
    greatest_rel = float(rel[rel_at])
    ok = mismatched == 0
    where = locate(worst) if locate is not None else {}
    lines = [f"Baseline: {baseline_note}"] if baseline_note else []
    if not ok:
        lines = _failure_lines(what, dtype, mismatched=mismatched, total=total, err=err, abs_at=abs_at,
                               allowed_at=float(per_elem_allowed[abs_at]), greatest_rel=greatest_rel, rel_at=rel_at,
                               ratio=ratio, worst=worst, rule=rule, base_err=base_err, baseline_note=baseline_note,
                               n_bad=int(nonfinite.sum()) + int((special & ~rg.same_special).sum()), where=where,
                               repro=repro)
    return Comparison(ok, err, allowed, base_err, ratio, mismatched, total, worst, greatest_rel, rule,
                      "\n".join(lines), where)


@functools.lru_cache(maxsize=None)  # per rounding point of the LoRA oracle and twice per comparison: 7.6 us uncached
def overflow_threshold(dtype: torch.dtype) -> float:
    """The smallest magnitude that rounds to inf in ``dtype`` (round to nearest): its largest finite
    value plus half a unit in the last place (fp16: 65520); inf for float64."""
    if dtype == torch.float64 or not dtype.is_floating_point:
        return math.inf
    top = torch.tensor(torch.finfo(dtype).max, dtype=dtype)
    below = torch.nextafter(top, torch.zeros((), dtype=dtype))
    return float(top) + (float(top) - float(below)) / 2


def _argmax_index(x: torch.Tensor) -> tuple[int, ...]:
    """Index (a tuple) of the largest element of ``x``.  Plain integer arithmetic: torch.unravel_index
    imports torch.fx's symbolic shapes (and sympy), two seconds on a process's first mismatch."""
    flat = int(torch.argmax(x))
    index = []
    for size in reversed(x.shape):
        flat, i = divmod(flat, size)
        index.append(i)
    return tuple(reversed(index))
