"""The row structure of a vision call's output (Note [Buckets] in :mod:`harness.buckets`: a mismatch's region),
which the ``vision`` record names (its ``row_structure``): each output token's sequence and position in it, read
from the resolved metadata."""

from __future__ import annotations

from typing import Optional

from kernel_oracle.reference.vision_metadata import resolve_flashinfer_cudnn

from kernel_oracle.harness.buckets import RowStructure

__all__ = ["vision_rows"]


def vision_rows(case, call, S: int) -> Optional[RowStructure]:
    """The structure of the ``S`` output tokens of a vision ``call`` (sequences as segments, no slots); None when
    its metadata does not resolve."""
    kw = {k: v for k, v in call.kwargs.items() if k not in ("softmax_scale", "forward_metadata")}
    try:
        plan = resolve_flashinfer_cudnn(*call.args[:4], call.kwargs.get("softmax_scale"),
                                        call.kwargs.get("forward_metadata"), strict=False, **kw)
    except Exception:  # noqa: BLE001 - malformed metadata: no structure to name
        return None
    seg, pos, lengths = [-1] * S, [0] * S, []
    for b in range(plan.num_sequences):
        o, n = int(plan.o_start[b]), int(plan.lengths[b])
        lengths.append(n)
        for i in range(n):
            if 0 <= o + i < S:
                seg[o + i], pos[o + i] = b, i
    return RowStructure(seg, pos, [-1] * S, lengths)
