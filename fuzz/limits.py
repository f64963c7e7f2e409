"""Size presets of generated problems (:class:`Limits`, :data:`LIMITS`, :data:`REALISTIC_SHARE`).

Sizes come from a preset because what is affordable differs by six orders of magnitude (Note [Strategies] in
:mod:`kernel_oracle.fuzz.strategies`): ``"tiny"`` for Triton kernels under the CPU interpreter, ``"small"`` for
the pure-torch reference on the CPU, ``"full"`` for realistic GPU sizes, ``"gpu"`` a GPU campaign's default
(``"small"``-like boundary-heavy problems mixed with ``"full"`` ones).  Every family's strategy reads the same
preset names (csgmv keeps its own bounds per name: ``CSGMV_LIMITS`` in :mod:`kernel_oracle.fuzz.strategies_csgmv`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import hypothesis.strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import SearchStrategy

__all__ = ["LIMITS", "REALISTIC_SHARE", "Limits", "default_limits", "with_realistic_share"]


@dataclass(frozen=True)
class Limits:
    """Size bounds of generated problems; ``big_*`` values are drawn rarely (1 in ``big_odds``)."""

    max_segments: int
    max_seg_len: int
    big_segments: int
    big_seg_len: int
    max_slots: int
    ranks: tuple[int, ...]  # buffer ranks R
    heads: int
    qk_dims: tuple[int, ...]
    v_dims: tuple[int, ...]
    kv_lora_ranks: tuple[int, ...]
    max_extra_rows: int
    max_sequences: int
    max_seq_len: int
    big_seq_len: int
    vision_heads: int
    head_dims: tuple[int, ...]
    tile_reach: int = 1  # blocks past the first a tiled size may run (Note [Tile-aware sizes])
    big_odds: int = 16

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            vals = v if isinstance(v, tuple) else (v,)
            if not vals or any(not isinstance(x, int) or x < 0 for x in vals):
                raise InvalidArgument(f"Expected non-negative ints but got {f.name}={v!r}")
        if self.max_seg_len > self.big_seg_len:
            raise InvalidArgument(f"max_seg_len={self.max_seg_len} is larger than big_seg_len={self.big_seg_len}")
        if self.max_segments > self.big_segments:
            raise InvalidArgument(f"max_segments={self.max_segments} is larger than big_segments={self.big_segments}")
        if self.max_seq_len > self.big_seq_len:
            raise InvalidArgument(f"max_seq_len={self.max_seq_len} is larger than big_seq_len={self.big_seq_len}")
        if self.max_slots < 1 or self.heads < 1 or self.vision_heads < 1 or self.big_odds < 1:
            raise InvalidArgument(f"Expected max_slots, heads, vision_heads, big_odds >= 1 but got "
                                  f"max_slots={self.max_slots}, heads={self.heads}, "
                                  f"vision_heads={self.vision_heads}, big_odds={self.big_odds}")


LIMITS = {
    # Triton under the CPU interpreter: a few dozen programs per call at most
    "tiny": Limits(max_segments=3, max_seg_len=16, big_segments=4, big_seg_len=33, max_slots=3, ranks=(16,),
                   heads=2, qk_dims=(16, 24), v_dims=(16, 8), kv_lora_ranks=(32, 24), max_extra_rows=2,
                   max_sequences=3, max_seq_len=12, big_seq_len=40, vision_heads=4, head_dims=(16, 8, 24),
                   tile_reach=1),
    # the pure-torch reference on the CPU
    "small": Limits(max_segments=8, max_seg_len=24, big_segments=200, big_seg_len=600, max_slots=8,
                    ranks=(16, 8, 32), heads=4, qk_dims=(48, 16, 72), v_dims=(40, 16, 24),
                    kv_lora_ranks=(64, 32, 80), max_extra_rows=4, max_sequences=6, max_seq_len=40,
                    big_seq_len=700, vision_heads=3, head_dims=(16, 24, 40), tile_reach=2),
    # a GPU: hundreds of segments, thousands of tokens (rare), realistic dims
    "full": Limits(max_segments=64, max_seg_len=300, big_segments=512, big_seg_len=4096, max_slots=8,
                   ranks=(16, 32, 64, 128), heads=16, qk_dims=(128, 64, 72), v_dims=(128, 64, 40),
                   kv_lora_ranks=(512, 256, 200), max_extra_rows=16, max_sequences=16, max_seq_len=1500,
                   big_seq_len=16384, vision_heads=16, head_dims=(80, 64, 72, 128), tile_reach=4),
    # a GPU campaign: small and boundary-heavy -- lengths 0..64 (tile edges 15-17 .. 63-65
    # half the time), a few segments, dims on both sides of the tiles -- mixed with "full" (REALISTIC_SHARE)
    "gpu": Limits(max_segments=8, max_seg_len=64, big_segments=64, big_seg_len=300, max_slots=4,
                  ranks=(16, 32, 64), heads=4, qk_dims=(16, 48, 128), v_dims=(16, 40, 128),
                  kv_lora_ranks=(32, 64, 512), max_extra_rows=4, max_sequences=6, max_seq_len=64,
                  big_seq_len=1500, vision_heads=4, head_dims=(16, 64, 80, 128), tile_reach=2),
}

# presets that mix in realistic problems: name -> (the realistic preset, one problem in N drawn from it);
# 1 in 7 is ~14% realistic cases, enough to meet real sizes every few seconds, cheap enough to keep
# a GPU campaign at small-case speed
REALISTIC_SHARE = {"gpu": ("full", 7)}


def default_limits(device, target: str = "") -> str:
    """The preset a campaign uses unless told (``run_campaign(limits=None)``): ``"gpu"`` on a CUDA
    device (kernels compiled), ``"small"`` for the pure-torch ``reference`` on the CPU, ``"tiny"``
    for every other target on the CPU (Triton kernels under the interpreter)."""
    if str(device).startswith("cuda"):
        return "gpu"
    return "small" if target == "reference" else "tiny"


@st.composite
def _one_in(draw, common: SearchStrategy, rare: SearchStrategy, odds: int):
    """``rare`` once in ``odds`` draws, else ``common`` (shrinks towards ``common``)."""
    return draw(rare if draw(st.integers(0, odds - 1)) == odds - 1 else common)


def with_realistic_share(limits, common: SearchStrategy, build) -> SearchStrategy:
    """``common``, mixed with ``build(the realistic preset's name)`` once in :data:`REALISTIC_SHARE`'s odds when
    ``limits`` names a mixed preset."""
    if not isinstance(limits, str) or limits not in REALISTIC_SHARE:
        return common
    name, odds = REALISTIC_SHARE[limits]
    return _one_in(common, build(name), odds)
