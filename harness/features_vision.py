"""The features of SGLang's vision call (Note [Needed features] in :mod:`harness.features`), which the ``vision``
record names (its ``features``): the ones a failure may need, and the keywords of the call a target may
decline (:data:`VISION_FEATURES`).  Standard library only (reports read the words)."""

from __future__ import annotations

from kernel_oracle.harness.features import FeatureTable

__all__ = ["VISION_FEATURES", "VISION_FEATURE_TABLE"]

# the features of SGLang's vision call a target may decline (Target.declines): a campaign never draws them for it
VISION_FEATURES = ("gqa", "window_size", "s_aux", "softmax_scale", "forward_metadata")

# what a vision problem uses, by name: the features a failure may need and the keywords of SGLang's call a
# target may decline (a full call passes window_size and s_aux, if only their no-op values)
_USES = {
    "gqa": lambda get: get("H_kv") is not None and get("H_kv") != get("H"),
    "window": lambda get: get("window") is not None and tuple(get("window")) != (-1, -1),
    "sinks": lambda get: get("sinks") is not None,
    "softmax_scale": lambda get: get("softmax_scale") is not None,
    "gaps": lambda get: any(get("gaps") or ()),
    "window_size": lambda get: get("window") is not None or bool(get("full_call")),
    "s_aux": lambda get: get("sinks") is not None or bool(get("full_call")),
    "forward_metadata": lambda get: get("path", "metadata") != "kwargs",
}

VISION_FEATURE_TABLE = FeatureTable(
    names=("gqa", "window", "sinks", "softmax_scale", "gaps"),
    words={"gqa": "with k/v of fewer heads than q (GQA/MQA)", "window": "with a window_size",
           "sinks": "with attention sinks (s_aux)", "softmax_scale": "with a softmax_scale",
           "gaps": "with uncovered tokens between sequences"},
    uses=_USES,
    neutral={"gqa": {"H_kv": None}, "window": {"window": None}, "sinks": {"sinks": None},
             "softmax_scale": {"softmax_scale": None}, "gaps": {"gaps": ()}},
    declinable=VISION_FEATURES,
)
