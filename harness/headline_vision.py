"""The vision problem in a report's words (:func:`harness.headline.example_text`), which the ``vision`` record
names (its ``words``).  Standard library only: reports read it."""

from __future__ import annotations

from kernel_oracle.harness.headline import plural

__all__ = ["vision_words"]


def vision_words(p: dict) -> str:
    """A vision problem (its dict): its sequences, heads and head dim, then the features it has."""
    lens = [int(n) for n in p.get("lengths") or ()]
    parts = [f"{plural(len(lens), 'sequence')} of {lens} tokens" if lens else "no sequence",
             f"H={p.get('H')}" + (f", H_kv={p.get('H_kv')}" if p.get("H_kv") is not None else ""),
             f"D={p.get('D')}"]
    extras = [(f"v/o shifted by {p.get('v_shift')}/{p.get('o_shift')} tokens", p.get("v_shift") or p.get("o_shift")),
              (f"gaps {list(p.get('gaps') or ())}", p.get("gaps")), (f"window {p.get('window')}", p.get("window")),
              (f"sinks ({p.get('sinks')})", p.get("sinks")),
              (f"softmax_scale {p.get('softmax_scale')}", p.get("softmax_scale") is not None),
              (f"metadata via {p.get('path')}", p.get("path") not in (None, "metadata"))]
    return ", ".join(parts + [words for words, on in extras if on])
