"""Each family's plainer variants of a problem: the LoRA and vision problems' ``simplifications()`` and
``feature_variants()`` (Note [Minimal examples] in :mod:`kernel_oracle.harness.simplify`, which tries them),
and the shape class of a batch of lengths.  Plain dataclass edits: no torch, nothing of the harness."""

from __future__ import annotations

import dataclasses
from typing import Iterator

__all__ = ["length_class", "lora_feature_variants", "lora_simplifications", "vision_feature_variants",
           "vision_simplifications"]


def _replace(problem, **changes):
    changed = {k: v for k, v in changes.items() if getattr(problem, k) != v}
    return dataclasses.replace(problem, **changed) if changed else None


def _still_stale(stale, segments: int):
    """Stale CUDA-graph host ints ``(bs, num_segments, max_len)`` for a batch of ``segments`` segments: each
    count no larger than ``segments - 1`` (smaller than the replayed batch, as the strategy draws them), the
    capture-time ``max_len`` kept (an upper bound still); None stays None."""
    if stale is None:
        return None
    bs, num, max_len = stale
    top = max(segments - 1, 0)
    return min(bs, top), min(num, top), max_len


def _lora_without_segment(p, b: int):
    keep = [i for i in range(len(p.seg_lens)) if i != b]
    # eager counts described the segments there were; stale graph ints stay stale for the ones left
    return dataclasses.replace(p, seg_lens=tuple(p.seg_lens[i] for i in keep),
                               weight_indices=tuple(p.weight_indices[i] for i in keep),
                               eager_counts=None, stale_host_ints=_still_stale(p.stale_host_ints, len(keep)),
                               graph_tail=False)


def _shorter(n: int) -> list:
    return sorted({x for x in (1, 2, n // 2, n - 1) if 0 < x < n})


def lora_simplifications(p) -> Iterator:
    for b in reversed(range(len(p.seg_lens))):
        yield _lora_without_segment(p, b)
    for b, n in enumerate(p.seg_lens):
        for m in _shorter(n):
            yield dataclasses.replace(p, seg_lens=p.seg_lens[:b] + (m,) + p.seg_lens[b + 1:], eager_counts=None)
    yield _replace(p, H=1)
    yield _replace(p, extra_rows=0)
    yield _replace(p, seg_lens_drift=None, eager_counts=None, max_len_slack=0)
    yield _replace(p, with_max_len=True)
    yield _replace(p, stale_host_ints=None)
    if p.stale_host_ints is not None:  # the capture-time max_len down to the longest segment
        yield _replace(p, stale_host_ints=(*p.stale_host_ints[:2], max(p.seg_lens, default=0)))
    yield _replace(p, graph_tail=False)
    yield _replace(p, strided=False, offset_views=False)
    yield _replace(p, poison_beyond_rank=None)
    yield _replace(p, base_dtype=None)
    order = list(dict.fromkeys(w for w in p.weight_indices if 0 <= w < len(p.lora_ranks)))
    if order and len(order) == len(set(p.weight_indices)) and order != list(range(len(p.lora_ranks))):
        # only the slots the segments use, numbered 0.. in order of first use
        yield dataclasses.replace(p, weight_indices=tuple(order.index(w) for w in p.weight_indices),
                                  lora_ranks=tuple(p.lora_ranks[w] for w in order),
                                  scalings=tuple(p.scalings[w] for w in order))


def _vision_without_sequence(p, b: int):
    keep = [i for i in range(len(p.lengths)) if i != b]
    gaps = tuple(p.gaps[i] for i in keep) if p.gaps else ()
    return dataclasses.replace(p, lengths=tuple(p.lengths[i] for i in keep), gaps=gaps)


def lora_feature_variants(p) -> dict:
    """A LoRA problem's :meth:`~harness.problems.LoRAProblem.feature_variants`."""
    slot = p.weight_indices[0] if p.weight_indices else 0
    return {"permutation": _replace(p, permute=False),
            "slot": _replace(p, weight_indices=tuple(slot for _ in p.weight_indices)),
            "rank": _replace(p, lora_ranks=tuple(p.R for _ in p.lora_ranks)),
            "scaling": _replace(p, scalings=tuple(1.0 for _ in p.scalings)),
            "stale host ints": _replace(p, stale_host_ints=None),
            # stale host ints need the graph: what a case of them depends on, the variant above says
            "cuda graph": (_replace(p, cuda_graph_pad_to=None, graph_tail=False)
                           if p.stale_host_ints is None else None)}


def vision_feature_variants(p) -> dict:
    """A vision problem's :meth:`~harness.problems.VisionProblem.feature_variants`."""
    return {"offsets": _replace(p, v_shift=0, o_shift=0)}


def length_class(lengths) -> str:
    """The shape class of a batch of sequence or segment ``lengths``: ``empty`` (none above 0), ``long``
    (one of 1024 or more), else ``ragged``."""
    lens = [n for n in lengths if n]
    if not lens:
        return "empty"
    return "long" if max(lens) >= 1024 else "ragged"


def vision_simplifications(p) -> Iterator:
    for b in reversed(range(len(p.lengths))):
        yield _vision_without_sequence(p, b)
    for b, n in enumerate(p.lengths):
        for m in _shorter(n):
            yield dataclasses.replace(p, lengths=p.lengths[:b] + (m,) + p.lengths[b + 1:])
    yield _replace(p, H=1, H_kv=None)
    yield _replace(p, extra_tokens=0)
    yield _replace(p, four_d=False, batch=1)
    yield _replace(p, layout="contiguous")
    yield _replace(p, sequence_lengths_4d=False, max_seqlen_kind="int")
    yield _replace(p, full_call=False)
    yield _replace(p, logit_scale=1.0)
