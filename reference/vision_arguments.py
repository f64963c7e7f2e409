"""The arguments SGLang's ``VisionAttention.forward`` hands every vision backend beside the metadata.

Note [Window and sinks]
-----------------------
``VisionAttention.forward`` (``sglang/srt/layers/attention/vision.py``) calls its backend with
``attention_mask``, ``output_ws``, ``window_size`` and ``s_aux`` on every call, whatever the backend;
each one that changes the function is part of the vision op (docs/semantics.md#vision-attention), and a backend that takes
one and ignores it computes another function.  What the reference implements:

* ``window_size = (left, right)``: local attention within each sequence, FlashAttention's convention
  for equal query and key lengths: query ``i`` of a sequence attends key ``j`` of the same sequence iff
  ``j >= i - left`` (when ``left >= 0``) and ``j <= i + right`` (when ``right >= 0``); a negative side
  has no limit, so ``(-1, -1)`` (SGLang's default, and what ``None`` means here) is full attention.
  Every query sees at least itself, so no row is empty.
* ``s_aux``: attention sinks, one logit per query head ``(H,)`` (SGLang passes its ``sinks`` parameter
  sliced to the rank's heads): an extra term ``exp(s_aux[h])`` in the softmax denominator of every
  row of head ``h``, in the units of the scaled logits (not multiplied by the softmax scale), the way
  SGLang's other backends pass it to FlashAttention as ``sinks`` and its Triton kernels add
  ``exp(sink - max)`` to the row sum.  The sink has no value: the output of a row is
  ``sum_j exp(s_j) v_j / (sum_j exp(s_j) + exp(s_aux[h]))``.
* ``attention_mask``: None only.  The ``flashinfer_cudnn`` contract has no mask (the sequences are
  the mask); SGLang's SDPA backends read it.  A mask is refused rather than ignored.
* ``output_ws``: accepted and unused (the CUDA-graph output workspace of SGLang's Triton backend; the
  ``flashinfer_cudnn`` contract returns a fresh output): it does not change the function.

SGLang's ``flashinfer_cudnn`` backend ignores all four, so it accepts any value: a malformed one is
what strict validation rejects (after the upstream messages), with the contract table's rows
``vision.strict.window_size``, ``vision.strict.metadata_tensor`` (``s_aux``) and
``vision.strict.unsupported_argument``.  With strict validation off, a mask is ignored as upstream
ignores it, and a window or sinks that cannot be read leave the whole output unspecified
(``VisionArguments.malformed``): what such a call computes is defined nowhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from kernel_oracle.reference._helpers import describe_tensor
from kernel_oracle.reference.contracts import raise_contract

__all__ = ["NO_WINDOW", "VisionArguments", "resolve_arguments", "window_mask"]

# full attention: no limit on either side
NO_WINDOW = (-1, -1)


@dataclass(frozen=True)
class VisionArguments:
    """The resolved extra arguments: ``window`` (left, right) with -1 for no limit; ``sinks`` the
    ``s_aux`` tensor (H,) as given, or None; ``malformed``: a window or sinks that cannot be read
    (strict validation off only; they are then dropped and the output is unspecified)."""

    window: tuple[int, int] = NO_WINDOW
    sinks: Optional[torch.Tensor] = None
    malformed: bool = False

    @property
    def has_window(self) -> bool:
        return self.window[0] >= 0 or self.window[1] >= 0


def _window_problem(value) -> Optional[str]:
    """Why ``value`` is no window_size (None when it is one)."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        return "it is not a pair"
    if any(not isinstance(x, int) or isinstance(x, bool) for x in value):
        return "both entries must be Python ints"
    return None


def _sinks_ok(value, q: torch.Tensor) -> bool:
    return (isinstance(value, torch.Tensor) and value.is_floating_point() and tuple(value.shape) == (q.shape[1],)
            and value.device == q.device)


def resolve_arguments(q: torch.Tensor, kwargs: dict, strict: bool) -> VisionArguments:
    """The window and sinks of a call whose q is ``q`` (T,H,D), from its keywords (Note [Window and
    sinks]); ``strict``: raise the contract error naming a malformed argument (else mark it malformed)."""
    mask = kwargs.get("attention_mask")
    if strict and mask is not None:
        raise_contract("vision.strict.unsupported_argument", field="attention_mask",
                       got=describe_tensor(mask) if isinstance(mask, torch.Tensor) else repr(mask),
                       why="the flashinfer_cudnn contract has no mask (the sequences are the mask; only SGLang's "
                           "SDPA backends read one); pass attention_mask=None")
    window, sinks, malformed = kwargs.get("window_size"), kwargs.get("s_aux"), False
    why = None if window is None else _window_problem(window)
    if why is not None:
        if strict:
            raise_contract("vision.strict.window_size", got=repr(window), why=why)
        window, malformed = None, True
    if sinks is not None and not _sinks_ok(sinks, q):
        if strict:
            H = q.shape[1]
            raise_contract("vision.strict.metadata_tensor", field="s_aux",
                           expected=f"a floating-point tensor of shape ({H},) on {q.device} (one sink logit per "
                                    "query head)",
                           got=describe_tensor(sinks) if isinstance(sinks, torch.Tensor) else repr(sinks),
                           fix="pass the layer's sinks for this rank's query heads, e.g. sinks[h0:h0 + H]")
        sinks, malformed = None, True
    if window is None:
        return VisionArguments(NO_WINDOW, sinks, malformed)
    left, right = (int(x) for x in window)
    return VisionArguments((left if left >= 0 else -1, right if right >= 0 else -1), sinks, malformed)


def window_mask(q_pos: torch.Tensor, k_pos: torch.Tensor, window: tuple[int, int]) -> torch.Tensor:
    """bool (len(q_pos), len(k_pos)): which keys each query of one sequence attends under ``window``
    (positions within the sequence; Note [Window and sinks])."""
    left, right = window
    diff = k_pos[None, :] - q_pos[:, None]  # j - i
    ok = torch.ones(diff.shape, dtype=torch.bool, device=diff.device)
    if left >= 0:
        ok &= diff >= -left
    if right >= 0:
        ok &= diff <= right
    return ok
