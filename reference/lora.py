"""Pure-torch references for the kv_b LoRA steps of absorbed MLA (docs/semantics.md#kv_b-lora-steps).

Two layers:

* **Oracles** (``*_oracle``) return an :class:`OracleResult`: the whole output in float64 (or, with
  ``faithful=True``, computed with the published kernels' rounding points in the activation dtype:
  fp32 accumulation, step-A result rounded to the activation dtype, scaled step-B delta rounded to
  the activation dtype (split steps) or to ``base_output``'s dtype (fused) before it is added), plus
  a bool mask of the region the contract defines.  Inputs are never modified.
* **Drop-in steps** with SGLang's exact signatures (``step_a_q_fwd`` ...): same semantics and
  in-place behaviour as the kernels, any device and dtype, results in the input's dtype.  They
  compute through the oracle (float64 by default), so the reference is itself a target.

Note [Range at rounding points]
-------------------------------
The float64 oracle keeps every value exact at SPEC's rounding points but not beyond the rounded
dtype's range: where rounding to that dtype overflows (an fp16 step-B delta of 1e5, say), the oracle
holds the same inf, as every kernel with those rounding points must.  Without it a faithful kernel's
inf is judged against a finite float64 value (a correct fp16 step_b_v whose huge beyond-rank inputs
overflow a delta reads as a mismatch almost everywhere).  Precision stays float64: only the range is the dtype's.  Within
:data:`OVERFLOW_MARGIN` of the threshold (fp16: 65008 to 66032) a correct kernel may land on either
side: the oracle keeps the exact value there and, when any rounding point came that near, also gives
the output with those points overflowed (``OracleResult.overflow_alternate``, from the margin below
the threshold on); the tolerance rule accepts that alternate's inf or NaN (an overflowed step-A
result times a zero of A) as well as a finite value within the allowance of the exact one.  Both
sides occur: an fp16 output whose exact value is 65530 stored as 65504, and an fp16 delta of 65575
added to an fp32 base, inf in a correct kernel and in the fp16 baseline alike.

Shapes: ``S`` tokens, ``H`` heads, ``qk`` = qk_nope, ``vd`` = v_head_dim, ``FULL_K = qk + vd``,
``C`` = kv_lora_rank, ``R`` buffer rank, ``L`` slots.  ``B_buf (L, H*FULL_K, R)``,
``A_buf (L, R, C)``.  Routing is shared with the kernels (:mod:`reference.lora_routing`).
"""

from __future__ import annotations

import contextvars
import functools
from dataclasses import dataclass
from typing import Optional

import torch

from kernel_oracle.reference.lora_routing import (LoRARouting, check_data_tensor, check_in_place_layout, check_shape,
                                                  max_segment_len, route_lora_batch, validate_lora_batch)
from kernel_oracle.reference.signatures import SIGNATURES, ops_of
from kernel_oracle.reference.strict import resolve_strict
from kernel_oracle.reference.tolerance import check_faithful, overflow_threshold, round_to_tf32, tf32_mode

__all__ = [
    "OracleResult",
    "LORA_OPS",
    "validate_call",
    "step_a_q_fwd",
    "step_b_q_fwd",
    "step_a_v_fwd",
    "step_b_v_fwd",
    "q_side_fused_fwd",
    "v_side_fused_fwd",
    "step_a_q_oracle",
    "step_b_q_oracle",
    "step_a_v_oracle",
    "step_b_v_oracle",
    "q_side_fused_oracle",
    "v_side_fused_oracle",
]

# the six steps, in table order (their signatures: reference.signatures)
LORA_OPS = ops_of("lora")


@dataclass(frozen=True)
class OracleResult:
    """``value``: the full expected output (float64, or the output dtype when faithful);
    ``defined``: bool mask of the same shape, True where the contract fixes the value."""

    value: torch.Tensor
    defined: torch.Tensor
    # faithful mode only: the same computation in other summation orders (fp32 vision) (see reference.tolerance,
    # Note [Baseline orders]); ``compare(baseline=result.baselines)`` takes the worst of them
    alternates: tuple = ()
    # float64 mode, only when a rounding point came within OVERFLOW_MARGIN of its dtype's overflow threshold:
    # the output with those points overflowed (Note [Range at rounding points]); an inf of it is a right
    # output too (``compare(overflow_alternate=...)``)
    overflow_alternate: Optional[torch.Tensor] = None

    @property
    def baselines(self) -> tuple:
        """``value`` and the alternates: every same-dtype computation the tolerance rule measures."""
        return (self.value, *self.alternates)


# Relative distance beyond a dtype's overflow threshold under which the float64 oracle keeps a rounding
# point's exact value instead of inf (Note [Range at rounding points]): a kernel's own value there may
# lie on either side of the threshold (fp32 accumulation, TF32 operands: relative errors far below
# 2**-7), so its inf and its largest finite value are both right, and the tolerance rule judges the
# exact value (Note [Non-finite values] in reference.tolerance).  Farther out every kernel overflows.
OVERFLOW_MARGIN = 2.0 ** -7


# float64 mode's range at rounding points, set by :func:`_overflow_both` for one oracle call:
# ("margin", near) -- inf beyond the threshold by more than OVERFLOW_MARGIN, and ``near`` collects, per
# rounding point, whether a value came within the margin of the threshold (either side); ("early", None)
# -- inf from OVERFLOW_MARGIN below the threshold on: the output of a kernel whose values there overflowed
_RANGE: contextvars.ContextVar = contextvars.ContextVar("lora_oracle_range", default=("margin", None))


class _Arith:
    """Arithmetic of one precision mode: float64 (exact reference) or faithful (kernel rounding).

    ``faithful="tf32-rne"`` / ``"tf32-trunc"`` is faithful with every matmul input rounded to TF32
    to nearest / truncated (reference.tolerance, Note [TF32 rounding]); ``"tf32"`` runs both
    (:func:`_tf32_both`).
    """

    def __init__(self, faithful: bool | str):
        check_faithful(faithful)
        if faithful == "tf32":
            raise ValueError("faithful='tf32' runs two modes: call the oracle, not _Arith, with it")
        self.faithful = bool(faithful)
        self.tf32 = tf32_mode(faithful)
        self.compute = torch.float32 if faithful else torch.float64
        self.range, self.near = _RANGE.get()

    def load(self, t: torch.Tensor) -> torch.Tensor:
        """A matmul operand in the compute dtype (TF32-rounded in the tf32 modes)."""
        t = t.to(self.compute)
        return round_to_tf32(t, self.tf32) if self.tf32 else t

    def round(self, t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Round to ``dtype`` in faithful mode; in float64 mode keep the value exact but not beyond
        ``dtype``'s range (Note [Range at rounding points]): inf where the exact value lies beyond the
        overflow threshold by more than :data:`OVERFLOW_MARGIN` (from that far below it on in the
        "early" range of :func:`_overflow_both`), the exact value elsewhere."""
        if self.faithful:
            return t.to(dtype).to(self.compute)
        threshold = overflow_threshold(dtype)
        mag = t.abs()
        if self.near is not None:
            self.near.append(((mag > threshold * (1.0 - OVERFLOW_MARGIN)) &
                              (mag <= threshold * (1.0 + OVERFLOW_MARGIN))).any())
        limit = threshold * (1.0 + OVERFLOW_MARGIN if self.range == "margin" else 1.0 - OVERFLOW_MARGIN)
        return torch.where((mag > limit) & torch.isfinite(t), torch.copysign(torch.full_like(t, float("inf")), t), t)


# ---- the four per-slot contractions, on gathered rows (k routed rows of one slot) ----------------

def _a_q(x: torch.Tensor, b_w: torch.Tensor, heads: int, qk: int, r: int) -> torch.Tensor:
    """x (k,H,qk) @ K-half of b_w (H*FULL_K, R) -> (k,H,r)."""
    w = b_w.reshape(heads, -1, b_w.shape[-1])[:, :qk, :r]  # (H, qk, r)
    return torch.bmm(x.transpose(0, 1), w).transpose(0, 1)


def _b_q(xa: torch.Tensor, a_w: torch.Tensor, r: int) -> torch.Tensor:
    """xa[..., :r] (k,H,r) @ a_w[:r] (r,C) -> (k,H,C)."""
    k, h, _ = xa.shape
    return (xa[:, :, :r].reshape(k * h, r) @ a_w[:r]).reshape(k, h, -1)


def _a_v(x: torch.Tensor, a_w: torch.Tensor, r: int) -> torch.Tensor:
    """x (k,H,C) @ a_w[:r].T (C,r) -> (k,H,r)."""
    k, h, c = x.shape
    return (x.reshape(k * h, c) @ a_w[:r].T).reshape(k, h, r)


def _b_v(xa: torch.Tensor, b_w: torch.Tensor, heads: int, qk: int, vd: int, r: int) -> torch.Tensor:
    """xa[..., :r] (k,H,r) @ V-half of b_w transposed -> (k,H,vd)."""
    w = b_w.reshape(heads, -1, b_w.shape[-1])[:, qk:qk + vd, :r]  # (H, vd, r)
    return torch.bmm(xa[:, :, :r].transpose(0, 1), w.transpose(1, 2)).transpose(0, 1)


# ---- validation of the data arguments (strict mode) ----------------------------------------------

def _check_int(field: str, value: object) -> None:
    from kernel_oracle.reference.contracts import raise_contract

    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise_contract("lora.strict.tensor_attr", field=field, expected="a positive Python int",
                       got=repr(value), fix=f"pass {field} as an int > 0")


def _validate(op: str, x: torch.Tensor, *, B_buf=None, A_buf=None, base=None, full_k=None, qk=None, vd=None) -> None:
    device = x.device
    for name, t in (("input", x), ("B_buf", B_buf), ("A_buf", A_buf), ("base_output", base)):
        if t is not None or name == "input":
            check_data_tensor(name, t, device)
    if x.dim() != 3:
        check_shape("input", x, (None, None, None), "activations are (S, H, dim)")
    S, H, D = x.shape
    for name, t in (("B_buf", B_buf), ("A_buf", A_buf)):
        if t is not None and t.dim() != 3:
            check_shape(name, t, (None, None, None), "LoRA buffers are 3-D (L, rows, cols)")
    if full_k is not None:
        _check_int("full_K_per_head", full_k)
    if qk is not None:
        _check_int("qk_nope_head_dim", qk)
        _check_int("v_head_dim", vd)
        full_k = qk + vd
    L = R = None
    if B_buf is not None:
        L, R = B_buf.shape[0], B_buf.shape[2]
        check_shape("B_buf", B_buf, (None, H * full_k, None),
                    f"B_buf rows are H*FULL_K = {H}*{full_k} for {H} heads")
    if A_buf is not None:
        if L is None:
            L, R = A_buf.shape[0], A_buf.shape[1]
        check_shape("A_buf", A_buf, (L, R, None), "A_buf is (L, R, kv_lora_rank) with B_buf's L and R")
    C = A_buf.shape[2] if A_buf is not None else None
    if op == "step_a_q" or op == "q_side_fused":
        if D > full_k:
            check_shape("q_nope", x, (S, H, full_k), f"qk_nope ({D}) cannot exceed full_K_per_head ({full_k})")
    elif op == "step_b_q":
        check_shape("q_lora_a", x, (S, H, R), "step B's input holds R columns (the buffer's rank)")
    elif op in ("step_a_v", "v_side_fused"):
        check_shape("attn_output", x, (S, H, C), "attn_output's last dim is kv_lora_rank")
    elif op == "step_b_v":
        check_shape("attn_lora_a", x, (S, H, R), "step B's input holds R columns (the buffer's rank)")
    if base is not None:
        out_dim = C if op in ("step_b_q", "q_side_fused") else vd
        check_shape("base_output", base, (S, H, out_dim), "base_output is (S, H, output dim) of the step")
        check_in_place_layout("base_output", base)


def _routing_dims(name: str, weights) -> tuple[int, int]:
    """(L, R) of the routing weight buffer ``name`` (``A_buf (L, R, C)`` or ``B_buf (L, rows, R)``);
    (0, 0) when it is not 3-D (strict mode rejects that)."""
    if not isinstance(weights, torch.Tensor) or weights.dim() != 3:
        return 0, 0
    return weights.shape[0], (weights.shape[1] if name == "A_buf" else weights.shape[2])


def validate_call(op: str, *args, strict: Optional[bool] = None) -> int:
    """Every check a LoRA step makes before it computes; shared by the oracles and ``kernels.lora``.

    ``op``: one of :data:`LORA_OPS`; ``args``: the step's positional arguments in SGLang's order
    (its row of :data:`reference.signatures.SIGNATURES`).  In order: the upstream contract (missing
    ``max_len``/``seg_lens``), then, when strict, the data arguments' shapes and the batch info's metadata
    (:func:`reference.lora_routing.validate_lora_batch`).  Returns the longest-segment length.

    With ``strict=False`` nothing is read from the device beyond what upstream reads
    (``seg_lens.max()`` only when ``max_len`` is None), so a kernel wrapper stays CUDA-graph capturable.
    """
    if op not in LORA_OPS:
        raise ValueError(f"op={op!r} is unknown; the only valid values are {list(LORA_OPS)}")
    sig = SIGNATURES[op]
    names = sig.params
    if len(args) != len(names):
        raise TypeError(f"{op} takes {len(names)} positional arguments {names} but got {len(args)}")
    a = dict(zip(names, args))
    strict = resolve_strict(strict)
    max_len = max_segment_len(a[sig.batch_info])  # the upstream contract comes before strict validation
    if not strict:
        return max_len
    x = args[0]
    _validate(op, x, B_buf=a.get("B_buf"), A_buf=a.get("A_buf"), base=a.get("base_output"),
              full_k=a.get("full_K_per_head"), qk=a.get("qk_nope_head_dim"), vd=a.get("v_head_dim"))
    num_slots, _ = _routing_dims(sig.routing_weight, a[sig.routing_weight])
    validate_lora_batch(a[sig.batch_info], num_rows=x.shape[0], num_slots=num_slots, device=x.device)
    return max_len


def _routing(batch_info, x: torch.Tensor, weights: torch.Tensor, max_rank: int, strict: bool) -> LoRARouting:
    return route_lora_batch(batch_info, num_rows=x.shape[0], num_slots=weights.shape[0], max_rank=max_rank,
                            device=x.device, strict=strict)


def _dev(idx: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return idx.to(like.device)


def _fresh_output(route: LoRARouting, x, R, arith, out_dtype, fill):
    """(S,H,R) output of a step A and its defined mask; ``fill(w, r, rows) -> (k,H,r)``."""
    S, H = x.shape[0], x.shape[1]
    value = torch.zeros(S, H, R, dtype=arith.compute if not arith.faithful else out_dtype, device=x.device)
    defined = torch.zeros(S, H, R, dtype=torch.bool, device=x.device)
    for g in route.groups():
        if g.rank <= 0:
            continue
        rows = _dev(route.rows[g.index], x)
        res = fill(g.slot, g.rank, rows)
        value[rows, :, : g.rank] = res.to(value.dtype)
        defined[rows, :, : g.rank] = True
    _blank_undefined(route, defined)
    return OracleResult(value, defined)


def _accumulated_output(route: LoRARouting, base, arith, delta):
    """base + delta over routed rows; ``delta(w, r, s, rows) -> (k,H,N)`` already rounded."""
    out_dtype = arith.compute if not arith.faithful else base.dtype
    value = base.detach().to(out_dtype).clone()
    defined = torch.ones(base.shape, dtype=torch.bool, device=base.device)
    # rows repeated by a malformed permutation are undefined: keep their last-write value there
    exact_rows = not arith.faithful and not route.all_undefined and not route.undefined_rows.numel()
    for g in route.groups():
        if g.rank <= 0:
            continue
        rows = _dev(route.rows[g.index], base)
        d = delta(g.slot, g.rank, g.scaling, rows)
        if exact_rows:  # float64: value[rows] is base[rows] already; add in place (no gather/scatter copies)
            value.index_add_(0, rows, d)
            continue
        new = base[rows].to(arith.compute) + d
        value[rows] = new.to(out_dtype)
    _blank_undefined(route, defined)
    return OracleResult(value, defined)


def _blank_undefined(route: LoRARouting, defined: torch.Tensor) -> None:
    if route.all_undefined:
        defined.fill_(False)
    elif route.undefined_rows.numel():
        defined[_dev(route.undefined_rows, defined)] = False


# ---- oracles -------------------------------------------------------------------------------------

def _tf32_both(oracle):
    """``faithful="tf32"``: the oracle with operands rounded to nearest (``value``) and truncated
    (an alternate), so that the rule takes the worst of the two (reference.tolerance, Note [TF32 rounding])."""

    @functools.wraps(oracle)
    def run(*args, faithful=False, **kwargs) -> OracleResult:
        if not (isinstance(faithful, str) and faithful == "tf32"):
            return oracle(*args, faithful=faithful, **kwargs)
        rne = oracle(*args, faithful="tf32-rne", **kwargs)
        trunc = oracle(*args, faithful="tf32-trunc", **kwargs)
        return OracleResult(rne.value, rne.defined, rne.alternates + trunc.baselines)

    return run


def _overflow_both(oracle):
    """float64 mode: when a rounding point came within :data:`OVERFLOW_MARGIN` of its dtype's overflow
    threshold, the oracle again with those points overflowed, as ``overflow_alternate`` (Note [Range at
    rounding points]).  One host sync per call; the second run only in that rare case."""

    @functools.wraps(oracle)
    def run(*args, faithful=False, **kwargs) -> OracleResult:
        if faithful:
            return oracle(*args, faithful=faithful, **kwargs)
        near: list = []
        token = _RANGE.set(("margin", near))
        try:
            result = oracle(*args, faithful=faithful, **kwargs)
        finally:
            _RANGE.reset(token)
        if not near or not bool(torch.stack(near).any()):
            return result
        token = _RANGE.set(("early", None))
        try:
            early = oracle(*args, faithful=faithful, **kwargs)
        finally:
            _RANGE.reset(token)
        return OracleResult(result.value, result.defined, result.alternates, overflow_alternate=early.value)

    return run


@_overflow_both
@_tf32_both
def step_a_q_oracle(q_nope, B_buf, batch_info, full_K_per_head, *, faithful=False, strict=None) -> OracleResult:
    """``out[t,h,:r] = q_nope[t,h,:] @ B_buf[w, h*FULL_K : h*FULL_K+qk, :r]``.

    q_nope (S,H,qk), B_buf (L,H*FULL_K,R) -> value (S,H,R); defined only on routed rows, ``[:r]``.
    """
    validate_call("step_a_q", q_nope, B_buf, batch_info, full_K_per_head, strict=strict)
    route = _routing(batch_info, q_nope, B_buf, _routing_dims("step_a_q", B_buf)[1], False)
    a = _Arith(faithful)
    H, qk, R = q_nope.shape[1], q_nope.shape[2], B_buf.shape[2]
    return _fresh_output(route, q_nope, R, a, q_nope.dtype, lambda w, r, rows: a.round(
        _a_q(a.load(q_nope[rows]), a.load(B_buf[w]), H, qk, r), q_nope.dtype))


@_overflow_both
@_tf32_both
def step_b_q_oracle(q_lora_a, A_buf, batch_info, base_output, *, faithful=False, strict=None) -> OracleResult:
    """``base[t,h,:] += s * (q_lora_a[t,h,:r] @ A_buf[w,:r,:])``.

    q_lora_a (S,H,R), A_buf (L,R,C), base_output (S,H,C) -> value (S,H,C).
    """
    validate_call("step_b_q", q_lora_a, A_buf, batch_info, base_output, strict=strict)
    route = _routing(batch_info, q_lora_a, A_buf, _routing_dims("A_buf", A_buf)[1], False)
    a = _Arith(faithful)
    return _accumulated_output(route, base_output, a, lambda w, r, s, rows: a.round(
        s * _b_q(a.load(q_lora_a[rows]), a.load(A_buf[w]), r), q_lora_a.dtype))


@_overflow_both
@_tf32_both
def step_a_v_oracle(attn_output, A_buf, batch_info, *, faithful=False, strict=None) -> OracleResult:
    """``out[t,h,:r] = attn_output[t,h,:] @ A_buf[w,:r,:].T``.

    attn_output (S,H,C), A_buf (L,R,C) -> value (S,H,R).
    """
    validate_call("step_a_v", attn_output, A_buf, batch_info, strict=strict)
    route = _routing(batch_info, attn_output, A_buf, _routing_dims("A_buf", A_buf)[1], False)
    a = _Arith(faithful)
    R = A_buf.shape[1]
    return _fresh_output(route, attn_output, R, a, attn_output.dtype, lambda w, r, rows: a.round(
        _a_v(a.load(attn_output[rows]), a.load(A_buf[w]), r), attn_output.dtype))


@_overflow_both
@_tf32_both
def step_b_v_oracle(attn_lora_a, B_buf, batch_info, base_output, qk_nope_head_dim, v_head_dim, *,
                    faithful=False, strict=None) -> OracleResult:
    """``base[t,h,:] += s * (attn_lora_a[t,h,:r] @ B_buf[w, h*FULL_K+qk : (h+1)*FULL_K, :r].T)``.

    attn_lora_a (S,H,R), B_buf (L,H*FULL_K,R), base_output (S,H,vd) -> value (S,H,vd).
    """
    validate_call("step_b_v", attn_lora_a, B_buf, batch_info, base_output, qk_nope_head_dim, v_head_dim, strict=strict)
    route = _routing(batch_info, attn_lora_a, B_buf, _routing_dims("step_b_v", B_buf)[1], False)
    a = _Arith(faithful)
    H = attn_lora_a.shape[1]
    return _accumulated_output(route, base_output, a, lambda w, r, s, rows: a.round(
        s * _b_v(a.load(attn_lora_a[rows]), a.load(B_buf[w]), H, qk_nope_head_dim, v_head_dim, r),
        attn_lora_a.dtype))


@_overflow_both
@_tf32_both
def q_side_fused_oracle(q_nope, B_buf, A_buf, batch_info, base_output, full_K_per_head, *,
                        faithful=False, strict=None) -> OracleResult:
    """Step A_q then step B_q; the delta is rounded to ``base_output``'s dtype when faithful.

    q_nope (S,H,qk), B_buf (L,H*FULL_K,R), A_buf (L,R,C), base_output (S,H,C) -> value (S,H,C).
    """
    validate_call("q_side_fused", q_nope, B_buf, A_buf, batch_info, base_output, full_K_per_head, strict=strict)
    route = _routing(batch_info, q_nope, B_buf, _routing_dims("q_side_fused", B_buf)[1], False)
    a = _Arith(faithful)
    H, qk = q_nope.shape[1], q_nope.shape[2]

    def delta(w, r, s, rows):
        mid = a.round(_a_q(a.load(q_nope[rows]), a.load(B_buf[w]), H, qk, r), q_nope.dtype)
        return a.round(s * _b_q(a.load(mid), a.load(A_buf[w]), r), base_output.dtype)

    return _accumulated_output(route, base_output, a, delta)


@_overflow_both
@_tf32_both
def v_side_fused_oracle(attn_output, A_buf, B_buf, batch_info, base_output, qk_nope_head_dim, v_head_dim, *,
                        faithful=False, strict=None) -> OracleResult:
    """Step A_v then step B_v; the delta is rounded to ``base_output``'s dtype when faithful.

    attn_output (S,H,C), A_buf (L,R,C), B_buf (L,H*FULL_K,R), base_output (S,H,vd) -> value (S,H,vd).
    """
    validate_call("v_side_fused", attn_output, A_buf, B_buf, batch_info, base_output, qk_nope_head_dim, v_head_dim, strict=strict)
    route = _routing(batch_info, attn_output, B_buf, _routing_dims("v_side_fused", B_buf)[1], False)
    a = _Arith(faithful)
    H = attn_output.shape[1]

    def delta(w, r, s, rows):
        mid = a.round(_a_v(a.load(attn_output[rows]), a.load(A_buf[w]), r), attn_output.dtype)
        return a.round(s * _b_v(a.load(mid), a.load(B_buf[w]), H, qk_nope_head_dim, v_head_dim, r), base_output.dtype)

    return _accumulated_output(route, base_output, a, delta)


# ---- drop-in steps with SGLang's signatures ------------------------------------------------------

def _fresh(result: OracleResult, dtype: torch.dtype) -> torch.Tensor:
    return torch.where(result.defined, result.value, torch.zeros((), dtype=result.value.dtype,
                                                                  device=result.value.device)).to(dtype)


def _write_back(result: OracleResult, base_output: torch.Tensor) -> torch.Tensor:
    """Write only rows whose value changed or is defined-new; untouched rows stay bit-identical."""
    new = result.value.to(base_output.dtype)
    changed = (new != base_output) & result.defined
    rows = torch.nonzero(changed.flatten(1).any(dim=1)).flatten()
    if rows.numel() == base_output.shape[0]:  # every row changes: one copy, no gather/scatter
        base_output.copy_(new)
    elif rows.numel():
        base_output[rows] = new[rows]
    return base_output


def step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head, *, faithful=False, strict=None):
    """SGLang ``step_a_q_fwd``: (S,H,qk) -> fresh (S,H,R) in q_nope's dtype (zeros outside the
    defined region)."""
    return _fresh(step_a_q_oracle(q_nope, B_buf, batch_info, full_K_per_head, faithful=faithful, strict=strict),
                  q_nope.dtype)


def step_b_q_fwd(q_lora_a, A_buf, batch_info, base_output, *, faithful=False, strict=None):
    """SGLang ``step_b_q_fwd``: accumulates into ``base_output`` (S,H,C) in place and returns it."""
    return _write_back(step_b_q_oracle(q_lora_a, A_buf, batch_info, base_output, faithful=faithful,
                                       strict=strict), base_output)


def step_a_v_fwd(attn_output, A_buf, batch_info, *, faithful=False, strict=None):
    """SGLang ``step_a_v_fwd``: (S,H,C) -> fresh (S,H,R) in attn_output's dtype."""
    return _fresh(step_a_v_oracle(attn_output, A_buf, batch_info, faithful=faithful, strict=strict),
                  attn_output.dtype)


def step_b_v_fwd(attn_lora_a, B_buf, batch_info, base_output, qk_nope_head_dim, v_head_dim, *,
                 faithful=False, strict=None):
    """SGLang ``step_b_v_fwd``: accumulates into ``base_output`` (S,H,vd) in place and returns it."""
    return _write_back(step_b_v_oracle(attn_lora_a, B_buf, batch_info, base_output, qk_nope_head_dim,
                                       v_head_dim, faithful=faithful, strict=strict), base_output)


def q_side_fused_fwd(q_nope, B_buf, A_buf, batch_info, base_output, full_K_per_head, *, faithful=False,
                     strict=None):
    """Fused q side (step A_q then B_q) into ``base_output`` (S,H,C), in place."""
    return _write_back(q_side_fused_oracle(q_nope, B_buf, A_buf, batch_info, base_output, full_K_per_head,
                                           faithful=faithful, strict=strict), base_output)


def v_side_fused_fwd(attn_output, A_buf, B_buf, batch_info, base_output, qk_nope_head_dim, v_head_dim, *,
                     faithful=False, strict=None):
    """Fused v side (step A_v then B_v) into ``base_output`` (S,H,vd), in place."""
    return _write_back(v_side_fused_oracle(attn_output, A_buf, B_buf, batch_info, base_output,
                                           qk_nope_head_dim, v_head_dim, faithful=faithful, strict=strict),
                       base_output)
