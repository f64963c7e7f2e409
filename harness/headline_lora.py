"""The kv_b LoRA problem in a report's words (:func:`harness.headline.example_text`), which the ``lora`` record
names (its ``words``).  Standard library only: reports read it."""

from __future__ import annotations

from kernel_oracle.harness.headline import plural

__all__ = ["lora_words"]


def lora_words(p: dict) -> str:
    """A LoRA problem (its dict): its segments, slots, ranks, scalings and heads, then the features it has."""
    lens = [int(n) for n in p.get("seg_lens") or ()]
    slots, ranks, scal = p.get("weight_indices") or (), p.get("lora_ranks") or (), p.get("scalings") or ()
    parts = [f"{plural(len(lens), 'segment')} of {lens} rows" if lens else "no segment",
             f"slots {list(slots)}" if slots else "",
             f"ranks {list(ranks)} (R={p.get('R')})", f"scalings {[round(float(x), 4) for x in scal]}",
             f"H={p.get('H')}"]
    extras = [("permuted", p.get("permute")), (f"CUDA-graph padding to {p.get('cuda_graph_pad_to')}",
                                                p.get("cuda_graph_pad_to") is not None),
              (f"stale host ints {p.get('stale_host_ints')}", p.get("stale_host_ints") is not None),
              (f"eager counts {p.get('eager_counts')}", p.get("eager_counts") is not None),
              (f"seg_lens {p.get('seg_lens_drift')}", p.get("seg_lens_drift")),
              ("no max_len", p.get("with_max_len") is False), ("no seg_lens", p.get("with_seg_lens") is False),
              (f"{p.get('extra_rows')} unrouted rows", p.get("extra_rows")),
              (f"poison past the rank ({p.get('poison_beyond_rank')})", p.get("poison_beyond_rank"))]
    return ", ".join([x for x in parts if x] + [words for words, on in extras if on])
