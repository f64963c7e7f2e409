"""Which rows a tile of the kv_b LoRA kernels holds, and its slot (Notes [Tiles, paths and slots], [Slot-sorted
tiles], [Flat slot grid], [Row search] and [Slot metadata first] in :mod:`kernels.lora._kernels`).  Every function
here is a ``@triton.jit`` helper that Triton inlines."""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["pick_slot", "route", "slot_meta", "tile_and_head"]


@triton.jit
def _first_above(incl, k, SEG_TILE: tl.constexpr):
    """For each ``k``, the first index ``s`` of the non-decreasing ``incl`` (SEG_TILE,) with
    ``incl[s] > k`` (SEG_TILE - 1 when there is none): a branch-free binary search of log2(SEG_TILE)
    steps, each one ``tl.gather`` from registers (Note [Row search]).  SEG_TILE is a power of two."""
    pos = tl.zeros_like(k)
    for i in tl.static_range(16):
        if (SEG_TILE >> (i + 1)) > 0:
            pos = tl.where(tl.gather(incl, pos + (SEG_TILE >> (i + 1)) - 1, 0) <= k, pos + (SEG_TILE >> (i + 1)), pos)
    return pos


@triton.jit
def _slot_rows(pid, lane_tok, w, starts, seg_rows, slots, BT: tl.constexpr, SEG_TILE: tl.constexpr):
    """Rows ``pid*BT + lane_tok`` of the list of slot ``w``'s rows in segment order (Note [Slot-sorted
    tiles]): (valid, logical row, whether any row is valid).  ``starts``, ``seg_rows``, ``slots``:
    (SEG_TILE,) per segment."""
    lens = tl.where(slots == w, seg_rows, 0)
    k = pid * BT + lane_tok  # the k-th row of this slot
    total = tl.sum(lens, axis=0)
    valid = k < total
    has_rows = pid * BT < total  # lane 0 holds the tile's first row: a scalar, no reduction
    if has_rows:  # tiles past the slot's rows (most of a non-FLAT grid at decode) skip scan and search
        incl = tl.cumsum(lens, axis=0)
        # row k lies in the first segment whose inclusive end passes k (lengths >= 0: incl is sorted)
        seg = _first_above(incl, k, SEG_TILE)
        logical = k + tl.gather(starts - (incl - lens), seg, 0)
    else:
        logical = k
    return valid, logical, has_rows


@triton.jit
def _flat_tile(pid, seg_rows, slots, n_slots, BT: tl.constexpr, NSLOT: tl.constexpr):
    """Program ``pid`` of a flat grid (Note [Flat slot grid]): (slot, tile of that slot, live).

    Slots 0..n_slots-1 in order, each with ceil(rows / BT) tiles; weight indices outside [0, n_slots)
    count for no slot.  A pid past the last tile is not live: slot 0 (a valid index, read for its rank)
    and tile ``pid``, which lies past slot 0's rows, so nothing is selected."""
    offs_w = tl.arange(0, NSLOT)
    hit = (slots[:, None] == offs_w[None, :]) & (offs_w < n_slots)[None, :]  # (SEG_TILE, NSLOT)
    tiles = (tl.sum(tl.where(hit, seg_rows[:, None], 0), axis=0) + BT - 1) // BT  # (NSLOT,) per slot
    incl = tl.cumsum(tiles, axis=0)
    live = pid < tl.sum(tiles, axis=0)
    w = tl.sum((incl <= pid).to(tl.int32), axis=0)  # the first slot whose tiles reach past pid
    first = tl.sum(tl.where(offs_w < w, tiles, 0), axis=0)  # that slot's first program
    return tl.where(live, w, 0), tl.where(live, pid - first, pid), live


@triton.jit
def route(pid, lane_tok, w_prog, seg_indptr, weight_indices, perm, n_launch, tiles_per_seg, num_rows,
           search_steps, TOKEN_MAJOR: tl.constexpr, HAS_PERM: tl.constexpr, BT: tl.constexpr,
           SEG_TILE: tl.constexpr, SORTED: tl.constexpr = False, FLAT: tl.constexpr = False,
           NSLOT: tl.constexpr = 8):
    """Rows of tile ``pid`` for this program's slot: (selected, slot, physical row, whether any row is
    selected: a scalar, from the tile's first row where the route knows it, Note [Row search]).

    ``lane_tok`` in [0, BT) is each lane's token in the tile; ``w_prog`` the slot a token-major
    program serves (its grid coordinate), ignored segment-major (the segment's slot) and FLAT (found
    from ``pid``; ``search_steps`` then carries the weight buffer's slot count, Note [Flat slot grid])."""
    if TOKEN_MAJOR and SORTED and SEG_TILE > 0:
        # Note [Slot-sorted tiles]: tile pid holds rows pid*BT .. of the list of THIS slot's rows, in
        # segment order, so a tile is full of one slot's rows however the batch interleaves slots
        offs_n = tl.arange(0, SEG_TILE)
        in_n = offs_n < n_launch
        starts = tl.load(seg_indptr + offs_n, mask=in_n, other=0)
        ends = tl.load(seg_indptr + 1 + offs_n, mask=in_n, other=0)
        slots = tl.load(weight_indices + offs_n, mask=in_n, other=-1)
        seg_rows = tl.maximum(ends - starts, 0)  # negative lengths of malformed metadata count as 0
        if FLAT:  # Note [Flat slot grid]: the (slot, tile) pair comes from pid, not from the grid
            # a flat launch passes the weight buffer's slot count in search_steps (no binary search here)
            w_prog, pid, live = _flat_tile(pid, seg_rows, slots, search_steps, BT, NSLOT)
        valid, logical, has_rows = _slot_rows(pid, lane_tok, w_prog, starts, seg_rows, slots, BT, SEG_TILE)
        if FLAT:  # a pid past the last tile selects nothing (tl.where: the interpreter makes `valid & live` int32)
            valid = tl.where(live, valid, False)
            has_rows = has_rows & live
        slot = w_prog
    elif TOKEN_MAJOR:
        logical = pid * BT + lane_tok
        first = tl.load(seg_indptr)
        last = tl.load(seg_indptr + n_launch)
        valid = (logical >= first) & (logical < last)
        # segment = the first b in [0, n_launch) with seg_indptr[b+1] > logical
        if SEG_TILE > 0:
            # few segments (decode): count the segment ends <= row in one load, no dependent chain
            offs_n = tl.arange(0, SEG_TILE)
            ends = tl.load(seg_indptr + 1 + offs_n, mask=offs_n < n_launch, other=2147483647)
            seg = tl.sum((ends[None, :] <= logical[:, None]).to(tl.int32), axis=1)
        else:
            lo = tl.zeros_like(lane_tok)
            hi = lo + n_launch
            for _ in range(search_steps):
                active = (lo < hi) & valid
                mid = (lo + hi) // 2
                end = tl.load(seg_indptr + mid + 1, mask=active, other=0)
                right = active & (end <= logical)
                lo = tl.where(right, mid + 1, lo)
                hi = tl.where(active & (end > logical), mid, hi)
            seg = lo
        seg = tl.minimum(seg, n_launch - 1)
        valid = valid & (tl.load(weight_indices + seg, mask=valid, other=-1) == w_prog)
        has_rows = tl.max(valid.to(tl.int32), axis=0) > 0
        slot = w_prog
    else:
        seg = pid // tiles_per_seg
        tile = pid - seg * tiles_per_seg
        start = tl.load(seg_indptr + seg)
        end = tl.load(seg_indptr + seg + 1)
        logical = start + tile * BT + lane_tok
        valid = logical < end
        has_rows = start + tile * BT < end  # the tile's first row
        slot = tl.load(weight_indices + seg)
    if HAS_PERM:
        # clamped like upstream: with strict=False a bad entry must not fault
        phys = tl.load(perm + tl.minimum(tl.maximum(logical, 0), num_rows - 1), mask=valid, other=0)
    else:
        phys = logical.to(tl.int64)
    phys = tl.minimum(tl.maximum(phys, 0), num_rows - 1)
    return valid, slot, phys, has_rows


@triton.jit
def slot_meta(lora_ranks, scalings, w_prog, n_slots, FLAT: tl.constexpr, NSLOT: tl.constexpr):
    """Note [Slot metadata first]: the rank and scaling of a token-major program's slot, loaded before
    its route.  A flat grid learns its slot from the route, so it loads every slot's (NSLOT,) (those at
    or past ``n_slots`` read as rank 0) and :func:`pick_slot` selects one; otherwise the slot is the
    grid coordinate ``w_prog`` and the two are scalars."""
    if FLAT:
        offs_w = tl.arange(0, NSLOT)
        ranks = tl.load(lora_ranks + offs_w, mask=offs_w < n_slots, other=0)
        scales = tl.load(scalings + offs_w, mask=offs_w < n_slots, other=0.0)
    else:
        ranks = tl.load(lora_ranks + w_prog)
        scales = tl.load(scalings + w_prog)
    return ranks, scales


@triton.jit
def pick_slot(ranks, scales, w, FLAT: tl.constexpr, NSLOT: tl.constexpr):
    """Slot ``w``'s (rank, scaling) from :func:`slot_meta`'s."""
    if FLAT:
        hit = tl.arange(0, NSLOT) == w
        return tl.sum(tl.where(hit, ranks, 0), axis=0), tl.sum(tl.where(hit, scales, 0.0), axis=0)
    else:
        return ranks, scales


@triton.jit
def tile_and_head(HEADS_FIRST: tl.constexpr):
    """(row tile, head) of this program on a grid (row tiles, heads, ...).  The GPU starts programs in
    grid-axis-0-first order; HEADS_FIRST renumbers them so that consecutive programs take the heads of
    one row tile instead of the row tiles of one head (base rows of one token are adjacent in memory)."""
    tile = tl.program_id(0)
    head = tl.program_id(1)
    if HEADS_FIRST:
        lin = tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)
        tile = lin // tl.num_programs(1)
        head = lin % tl.num_programs(1)
    return tile, head
