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
:func:`warm_up` once when it starts, outside every campaign's budget; with a persistent Triton cache
(``harness.device.worker_env(..., triton_cache=DIR)``) a later worker only loads the binaries.

Only the target runs (:func:`harness.check.execute`): nothing is judged, and a target that raises
on a warm-up case is not a finding here (the campaign will meet the case and judge it).
"""

from __future__ import annotations

import time
from typing import Optional, Sequence

from kernel_oracle.harness.check import Case, execute
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
    lora_ops = [op for op in ops if op != "vision"]
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


def warm_up(target, device, *, time_s: Optional[float] = 120.0, dtypes: Optional[Sequence[str]] = None) -> dict:
    """Run ``target`` (a resolved :class:`~fuzz.targets.Target`) once on each warm-up case on ``device``.

    Stops after ``time_s`` seconds (``None``: no limit).  ``dtypes`` default: :data:`WARM_UP_DTYPES`
    less the target's excluded ones.  Returns ``{"cases": run, "of": planned, "seconds": s,
    "complete": bool, "errors": ["op dtype: harness error", ...]}`` (target errors are not errors here).
    """
    if time_s is not None and not time_s > 0:
        raise ValueError(f"Expected a positive number of seconds or None but got time_s={time_s!r}")
    if not getattr(target, "available", True):
        return {"cases": 0, "of": 0, "seconds": 0.0, "complete": True, "errors": []}
    wanted = tuple(d for d in (dtypes or WARM_UP_DTYPES) if d not in (target.excluded_dtypes or {}))
    plan = warm_up_cases(tuple(sorted(target.entries)), wanted)
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
