"""Compile a target's kernels for a small fixed set of realistic sizes before any case is timed.

Note [Warm-up]
--------------
On a GPU the first call of a Triton kernel with a new specialisation compiles it (about a second,
far more than the call), so a campaign that meets realistic shapes for the first time inside its
budget spends that budget compiling.  Runtime sizes are not specialised (``do_not_specialize`` in
``kernels/lora``), so what selects a compiled kernel is the dtype, the layout flags (permutation,
CUDA-graph padding) and the bucketed block sizes -- a small set, which :func:`warm_up_cases` covers
with one realistic shape each (DeepSeek-style kv_b LoRA: H=16, qk=vd=128, kv_lora_rank=512,
R=16/64; Qwen2-VL-style vision: H=16, head dims 80/64/128), most common first.  A worker runs
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
case per variant (the recorder test ``oracle_tests/harness/test_variant_warmup.py``: they launch distinct
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

import itertools
import time
from typing import Optional, Sequence

from kernel_oracle.harness.check import Case, execute
from kernel_oracle.harness.family import FAMILY_OPS
from kernel_oracle.harness.problems import LoRAProblem, VisionProblem

__all__ = ["WARM_UP_DTYPES", "warm_up", "warm_up_cases"]

WARM_UP_DTYPES = ("float32", "bfloat16", "float16")

# LoRA batches: (seg_lens, weight_indices, lora_ranks, extra problem fields), most common first
_LORA_BATCHES = (
    ((300, 17, 129), (0, 1, 0), (16, 8), {}),  # prefill, ragged at tile edges
    ((1,) * 64, tuple(i % 4 for i in range(64)), (16, 16, 8, 0), {}),  # decode
    ((33, 64), (1, 0), (64, 64), {"R": 64, "permute": True}),  # permuted rows, rank 64
    ((1,) * 24, tuple(i % 2 for i in range(24)), (16, 16), {"cuda_graph_pad_to": 32}),  # graph replay
)
_LORA_DIMS = dict(H=16, qk=128, vd=128, C=512, R=16)
# vision batches: (lengths, head dim)
_VISION_BATCHES = (((1024, 77, 256), 80), ((64, 129), 64), ((300,), 128))


def warm_up_cases(ops: Sequence[str], dtypes: Sequence[str] = WARM_UP_DTYPES) -> list[Case]:
    """The fixed warm-up cases of ``ops`` in ``dtypes``: every op and dtype of the first batch, then
    the next batch, so a time limit cuts the rarest variants first."""
    out: list[Case] = []
    lora_ops = [op for op in ops if op in FAMILY_OPS["lora"]]  # (csgmv has no warm-up cases)
    for seg_lens, slots, ranks, extra in _LORA_BATCHES:
        for dtype in dtypes:
            for op in lora_ops:
                fields = {**_LORA_DIMS, **extra}
                scalings = tuple(1.0 - 0.25 * i for i in range(len(ranks)))
                out.append(Case(LoRAProblem(op=op, seg_lens=seg_lens, weight_indices=slots, lora_ranks=ranks,
                                            scalings=scalings, dtype=dtype, seed=1, **fields)))
    if "vision" in ops:
        for lengths, head_dim in _VISION_BATCHES:
            for dtype in dtypes:
                out.append(Case(VisionProblem(lengths=lengths, H=16, D=head_dim, dtype=dtype, seed=1)))
    return out


# Note [Variant warm-up]: what selects a compiled kernel of ours (Note [Specialization] in kernels/lora),
# most common in a GPU campaign first (a launch recorder over 2,000 cases of the "gpu" preset on the CPU:
# token-major with few segments, then segment-major; rank blocks 64 and 32; generic layouts 2 to 1 over
# aligned ones).  One case each: paths x rank blocks x layouts x dtypes x base dtypes x ops.
# (segment lengths, slots, ops or None for all, what it selects).  Token-major launches over 3 or more
# slots can take the flat grid (Note [Flat slot grid]: only where it halves the programs, which one or two
# slots never do), a variant of its own; the fused q side's tile height depends on the rows per slot
# (WIDE_BT in kernels.lora.BLOCKS), so its other heights get cases of their own.
_VARIANT_PATHS = (
    ((1,) * 8, 2, None, "token-major, one compare over 64 segment ends"),
    ((256,), 2, None, "segment-major"),
    # one slot never takes the flat grid; 50 rows keep the fused q side's tiles short (below WIDE_BT)
    ((1,) * 50 + (0,) * 50, 1, None, "token-major, one compare over 256 segment ends"),
    ((1,) * 300, 2, None, "token-major, binary search (wide fused-q tiles: 150 rows per slot)"),
    ((3,) * 60, 4, None, "token-major, one compare over 64 ends, the flat grid"),
    ((1,) * 200, 4, None, "token-major, one compare over 256 ends, the flat grid"),
    ((5,) * 60, 4, ("q_side_fused",), "the flat grid, one compare over 64 ends, wide fused-q tiles"),
    ((1,) * 256, 4, ("q_side_fused",), "the flat grid, one compare over 256 ends, wide fused-q tiles"),
    ((5,) * 60, 1, ("q_side_fused",), "one compare over 64 ends, wide fused-q tiles (one slot: per-slot grid)"),
    ((1,) * 200, 1, ("q_side_fused",), "one compare over 256 ends, wide fused-q tiles (one slot: per-slot grid)"),
    ((1,) * 300, 8, ("q_side_fused",), "binary search, fused-q tiles of 37 rows per slot"),
)
_VARIANT_RANKS = (32, 64, 128)  # BLOCK_R buckets (kernels.lora._launch.MIN_BLOCK_R and up)
# the rank block of a buffer rank past 128 (the fuzzer's tile edge 129 of the "gpu" preset's ranks, about one
# case in 300): every other dimension again, after all of the above
_RARE_RANKS = (256,)
_VARIANT_LAYOUTS = (dict(H=2, qk=63, vd=47, C=129),  # sizes off 8 elements: the generic family
                    dict(H=2, qk=64, vd=48, C=128))  # everything 16-byte aligned: the aligned family
_BASE_OPS = ("step_b_q", "step_b_v", "q_side_fused", "v_side_fused")  # ops with a base_output


def variant_cases(ops: Sequence[str], dtypes: Sequence[str] = WARM_UP_DTYPES) -> list[Case]:
    """One LoRA case per compiled variant of our LoRA kernels that a campaign meets (Note [Variant
    warm-up]): path x rank block x layout family x permutation x dtype x base dtype (the same, or fp32)
    x op, most common first, so a time limit cuts the rarest.  2,896 cases for every op and dtype."""
    lora_ops = [op for op in ops if op in FAMILY_OPS["lora"]]  # (csgmv has no warm-up cases)
    out: list[Case] = []
    for rank_blocks in (_VARIANT_RANKS, _RARE_RANKS):
        for seg_lens, n_slots, only, _ in _VARIANT_PATHS:
            slots = tuple(i % n_slots for i in range(len(seg_lens)))
            for R in rank_blocks:
                ranks = tuple(R if w % 2 == 0 else R // 2 for w in range(n_slots))
                scalings = tuple(1.0 if w % 2 == 0 else 0.5 for w in range(n_slots))
                for dims, permute, dtype, op in itertools.product(_VARIANT_LAYOUTS, (False, True), dtypes, lora_ops):
                    if only is not None and op not in only:
                        continue
                    bases = (None, "float32") if op in _BASE_OPS and dtype != "float32" else (None,)
                    out.extend(Case(LoRAProblem(op=op, seg_lens=seg_lens, weight_indices=slots, lora_ranks=ranks,
                                                scalings=scalings, R=R, permute=permute, dtype=dtype, base_dtype=base,
                                                seed=1, **dims)) for base in bases)
    return out


def warm_up_dtypes(target, dtypes: Optional[Sequence[str]] = None) -> tuple[str, ...]:
    """``dtypes`` (default :data:`WARM_UP_DTYPES`) less the target's excluded ones."""
    return tuple(d for d in (dtypes or WARM_UP_DTYPES) if d not in (target.excluded_dtypes or {}))


def warm_up(target, device, *, time_s: Optional[float] = 120.0, dtypes: Optional[Sequence[str]] = None,
            variants: bool = False) -> dict:
    """Run ``target`` (a resolved :class:`~kernel_oracle.harness.targets.Target`) once on each warm-up
    case on ``device``.

    Stops after ``time_s`` seconds (``None``: no limit).  ``dtypes``: see :func:`warm_up_dtypes`.
    ``variants``: the plan also holds every LoRA variant case (:func:`variant_cases`, Note [Variant
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
