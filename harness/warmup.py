"""Compile a target's kernels for a small fixed set of realistic sizes before any case is timed.

Note [Warm-up]
--------------
On a GPU the first call of a Triton kernel with a new specialisation compiles it (about a second,
far more than the call), so a campaign that meets realistic shapes for the first time inside its
budget spends that budget compiling.  Runtime sizes are not specialised (``do_not_specialize`` in
``kernels/lora``), so what selects a compiled kernel is the dtype, the layout flags (permutation,
CUDA-graph padding) and the bucketed block sizes -- a small set, which :func:`warm_up_cases` covers
with one realistic shape each (DeepSeek-style kv_b LoRA: H=16, qk=vd=128, kv_lora_rank=512,
R=16/64; Qwen2-VL-style vision: H=16, head dims 80/64/128), most common first: each family's record names
its cases (``Family.warm_up``: :mod:`harness.warmup_lora`, :mod:`harness.warmup_vision`).  A worker runs
:func:`warm_up` once when it starts, outside every campaign's budget; with the persistent kernel cache
(``harness.device.worker_env``, Note [Kernel cache]) a later worker only loads the binaries.

Only the target runs (:func:`harness.check.execute`): nothing is judged, and a target that raises
on a warm-up case is not a finding here (the campaign will meet the case and judge it).

Note [Variant warm-up]
----------------------
A few realistic shapes are not enough for our LoRA kernels: what selects a compiled kernel there is
the path (segment-major, or token-major with a 64- or 256-wide segment compare or a binary search),
the rank block (32, 64, 128), the layout family (aligned or generic), the permutation flag, the
dtype, the base dtype and the op (and the flat grid, and the fused q side's tile height) -- 2,896
variants, of which a GPU campaign meets a new one every few cases (a launch recorder over 2,000 cases
of the "gpu" preset meets 140-160 distinct variants, and more the longer it runs).  At about half a
second of LLVM and ptxas each, a campaign that compiled them as it met them would spend most of its
time compiling.  :func:`variant_cases` holds one
case per variant (each family's record names its variants, ``Family.variants``: LoRA's in
:mod:`harness.warmup_lora`) (the recorder test ``oracle_tests/harness/test_variant_warmup.py``: they launch distinct
variants, and every launch of fuzzed ``gpu``-preset cases is one of them), and for the ``triton``
target on CUDA the worker has them compiled first by child processes in parallel (compile only,
nothing runs on the GPU: :func:`fuzz.precompile.warm_up_target`) into Triton's disk cache, then
:func:`warm_up` runs each once and only loads the binary.

The permutation flag is a constexpr (a runtime flag makes the token-major v side markedly slower at
256 segments), so the set holds both values; ranks up to 32 share one block (``MIN_BLOCK_R``).  The
warm-up's cost on a cold and a warm cache is in docs/BENCHMARKS.md.  The cache persists by default
(``<KERNEL_ORACLE_CACHE>/triton``, Note [Kernel cache] in harness/device.py), so a later run loads
everything.
"""

from __future__ import annotations

import time
from typing import Optional, Sequence

from kernel_oracle.harness.check import execute
from kernel_oracle.harness.family import families

__all__ = ["WARM_UP_DTYPES", "variant_cases", "variant_families", "variant_ops", "warm_up", "warm_up_cases",
           "warm_up_dtypes"]

WARM_UP_DTYPES = ("float32", "bfloat16", "float16")

def _cases_of(part: str, ops: Sequence[str], dtypes: Sequence[str]) -> list:
    """Every registered family's cases of its record's ``part`` (``warm_up`` or ``variants``) for its ops among
    ``ops``, in registration order."""
    out: list = []
    for family in families():
        mine = [op for op in ops if op in family.ops]
        build = family.resolve(part) if mine else None
        if build is not None:
            out.extend(build(mine, dtypes))
    return out


def warm_up_cases(ops: Sequence[str], dtypes: Sequence[str] = WARM_UP_DTYPES) -> list:
    """The fixed warm-up cases of ``ops`` in ``dtypes``: each family's (its record's ``warm_up``: every op and
    dtype of its first batch, then the next batch, so a time limit cuts the rarest variants first)."""
    return _cases_of("warm_up", ops, dtypes)


def variant_cases(ops: Sequence[str], dtypes: Sequence[str] = WARM_UP_DTYPES) -> list:
    """One case per compiled variant of our kernels of ``ops`` that a campaign meets (Note [Variant warm-up]):
    each family's whose kernels have them (its record's ``variants``: LoRA's, 2,896 cases for every op and
    dtype), most common first, so a time limit cuts the rarest."""
    return _cases_of("variants", ops, dtypes)


def variant_ops(ops: Sequence[str]) -> tuple:
    """The ops of ``ops`` whose family's kernels compile variants (a record with ``variants``)."""
    return tuple(op for op in ops if any(op in f.ops and f.variants is not None for f in families()))


def variant_families(ops: Sequence[str]) -> tuple:
    """The families of ``ops`` whose kernels compile variants, in registration order."""
    return tuple(f.name for f in families() if f.variants is not None and set(f.ops) & set(ops))


def warm_up_dtypes(target, dtypes: Optional[Sequence[str]] = None) -> tuple[str, ...]:
    """``dtypes`` (default :data:`WARM_UP_DTYPES`) less the target's excluded ones."""
    return tuple(d for d in (dtypes or WARM_UP_DTYPES) if d not in (target.excluded_dtypes or {}))


def warm_up(target, device, *, time_s: Optional[float] = 120.0, dtypes: Optional[Sequence[str]] = None,
            variants: bool = False) -> dict:
    """Run ``target`` (a resolved :class:`~kernel_oracle.harness.targets.Target`) once on each warm-up
    case on ``device``.

    Stops after ``time_s`` seconds (``None``: no limit).  ``dtypes``: see :func:`warm_up_dtypes`.
    ``variants``: the plan also holds every variant case of our kernels (:func:`variant_cases`, Note [Variant
    warm-up]); a worker has them compiled in parallel first (:func:`fuzz.precompile.warm_up_target`),
    so that this loop only loads them.  Returns ``{"cases": run, "of": planned, "seconds": s,
    "complete": bool, "errors": ["op dtype: harness error", ...]}`` (target errors are not errors here).
    """
    if time_s is not None and not time_s > 0:
        raise ValueError(f"Expected a positive number of seconds or None but got time_s={time_s!r}")
    if not getattr(target, "available", True):
        return {"cases": 0, "of": 0, "seconds": 0.0, "complete": True, "errors": []}
    wanted = warm_up_dtypes(target, dtypes)
    ops = tuple(sorted(target.entries))
    plan = warm_up_cases(ops, wanted)
    if variants:
        plan += variant_cases(ops, wanted)
    t0 = time.monotonic()
    done, errors = 0, []
    for case in plan:
        if time_s is not None and time.monotonic() - t0 >= time_s:
            break
        try:
            execute(target, case, device, to_host=False)
        except Exception as exc:  # noqa: BLE001 - a harness error is reported, the warm-up goes on
            errors.append(f"{case.op} {case.dtype}: {type(exc).__name__}: {exc}")
        done += 1
    return {"cases": done, "of": len(plan), "seconds": round(time.monotonic() - t0, 3), "complete": done == len(plan),
            "errors": errors}
