"""Triton kernels of the kv_b LoRA steps (SPEC.md part 1); launched by :mod:`kernels.lora._launch`.

Note [Tiles, paths and slots]
-----------------------------
Every kernel works on a tile of ``M`` (token, head) rows and serves ONE slot.  Which rows a tile
holds is decided by :func:`_route`, in one of two ways chosen per call by the wrapper (a constexpr,
``TOKEN_MAJOR``):

* segment-major: program ``pid`` owns tile ``pid % tiles_per_seg`` of segment
  ``pid // tiles_per_seg``; the tile's slot is the segment's.  Good for prefill (long segments);
* token-major: program ``pid`` owns logical rows ``pid*BT .. pid*BT+BT-1`` of the whole batch, finds
  each row's segment by a binary search of ``seg_indptr``, and keeps the rows whose slot is its own
  grid coordinate ``w_prog`` (grid axis 2 = slots x output blocks).  Good for decode (hundreds of
  one-token segments): a segment-major tile would be 1/BT full, while here the ``L`` programs of a
  tile share its rows between them, each runs one short dependency chain, and each loads its slot's
  weights once per tile rather than once per token.  Programs whose slot has no row in the tile
  exit after routing.  (Slot-sorted tiles and the flat grid change which rows a token-major tile
  holds and where its slot comes from: the two Notes below.)

Rank handling: ``r = min(R, lora_ranks[w])``; ``r <= 0`` skips the slot (nothing is stored, so
in-place outputs stay bit-identical).  Every operand along the rank axis is masked to ``< r`` on
both sides, so values beyond a slot's rank (in step-B inputs or in the weights) never contribute.

Precision: loads keep the data dtype and ``tl.dot`` accumulates in fp32 (``DOT_PREC``: TF32 for
fp32 activations, as upstream; ``"ieee"`` for upcast tiles).  Rounding points as SPEC.md: step-A
results are cast to the activation dtype; the scaled step-B delta is cast to the activation dtype
(split) or to ``base_output``'s dtype (fused), then added to ``base`` in fp32 and stored in
``base``'s dtype.  ``UPCAST`` (interpreter, or weights of another dtype than the activations) turns
every tile to fp32 right after its load; ``FIX_BF16`` makes the fp32 <-> bf16 conversions exact
(round to nearest even) under the interpreter (:mod:`kernels.interpreter`).

Note [Slot-sorted tiles]
------------------------
Token-major tiles of consecutive logical rows hold the rows of every slot: at decode, with ``L`` slots
interleaved, each of the ``L`` programs of a tile masks off ``(L-1)/L`` of its rows, so the batch needs
``L`` times the programs, and each program's instructions serve ``1/L`` of its tile.  When the
segments fit one compare tile (``SEG_TILE > 0``: at most 256 launched), ``SORTED`` routes instead
tile ``pid`` of slot ``w`` to rows ``pid*BT ..`` of the list of ``w``'s rows in segment order: one
load each of ``seg_indptr`` (starts and ends) and ``weight_indices`` over the compare tile, a prefix
sum of the lengths of ``w``'s segments (negative lengths of malformed metadata count as 0), and a
binary search of it per row (Note [Row search]).  The grid is unchanged (``ceil(S/BT)`` tiles per slot, an upper bound:
programs past their slot's rows skip the prefix sum and the compare, and store nothing; Note [Flat
slot grid] launches fewer).  With well-formed metadata every row still belongs to one program, so
in-place updates do not race.  Measured on the H200
(``bench_lora --decode-ab``, do_bench_cudagraph medians, 2026-11-30): decode-bs256 fused q 49.4 -> 30.5
us, v 29.6 -> 25.1 us, same blocks; decode-bs64 fused 11.3 -> 11.2 and 8.70 -> 8.65 us (with 64-row
tiles one tile already held every row).  With the chosen blocks and the skipped compare: bs256 q 24.8,
v 19.3 us; bs64 q 10.2, v 7.7 us; with the prefix sum skipped too, bs256 q 24.2, v 18.4 us
(docs/kernels_lora.md).
``PREFETCH`` (fused kernels) loads the first base and weight blocks of the second product before
step A and each next block one iteration ahead: decode is a chain of dependent loads, not bytes
(q 11.2 -> 10.8 us, v 8.7 -> 7.9 us at decode-bs64).

Note [Flat slot grid]
---------------------
The slot-sorted grid above is ``ceil(S/BT)`` tiles for EACH of the ``L`` slots (grid axis 2 = slots x
output blocks), but slot ``w`` fills only ``ceil(n_w/BT)`` of its tiles: at decode-bs256 with 4 slots,
three quarters of the programs route and exit, and launch + route was 7 us of a 24 us call.  ``FLAT``
(with ``SORTED``) launches only what the real (slot, tile) pairs can need: grid axis 2 is the output
blocks alone, and axis 0 is ``ceil(S/BT) + L - 1``, an upper bound of ``sum_w ceil(n_w/BT)``: each
term is below ``n_w/BT + 1``, so the integer sum is at most ``ceil(sum_w n_w / BT) + L - 1``, and
``sum_w n_w <= S`` with well-formed metadata.  Each program counts every slot's rows from the same
compare-tile loads (a ``(SEG_TILE, NSLOT)`` select and sum; ``NSLOT`` a power-of-two bucket of the
runtime ``n_slots``), takes ``ceil(rows/BT)`` tiles per slot and their inclusive prefix sum, and finds
its (slot, tile) from its pid; then it routes exactly as above.  Slots are laid out in order and each
tile of a slot is one pid, so with well-formed metadata every row still belongs to one program.  Weight
indices outside ``[0, n_slots)`` count for no slot (their rows stay untouched, as with ``SORTED``);
a pid past the last tile (the bound is loose by up to ``L - 1``, and malformed metadata may shrink
the counts) selects nothing and reads slot 0's rank, a valid index.  With more than
:data:`kernels.lora._launch.FLAT_SLOTS_MAX` slots the wrapper launches the slot-sorted grid instead,
and it launches the flat grid only where that halves the programs (``FLAT_SLOTS_MIN_SAVING``: each
flat program also counts every slot's rows).  The slot count ``n_slots`` travels in ``search_steps``,
which only the binary search (``SEG_TILE == 0``, never flat) reads: a kernel parameter of its own,
unused by every other launch, cost the segment-major fused q kernel 12 registers (96 -> 108, one
block per SM fewer) with ptxas of triton 3.6 on identical TTGIR and PTX, and prefill-8x2048 went
669 -> 718 us (H200, 2026-12-01 s10h-s10i).

Note [Row search]
-----------------
A slot-sorted tile's lane ``k`` (its ``k``-th row of slot ``w``) lies in the first segment whose
inclusive prefix sum of ``w``'s lengths passes ``k``.  That used to be one (BT x SEG_TILE) compare and
sum, 16384 elements at decode-bs256 (BT=64, SEG_TILE=256): 128 per thread, the largest part of a
program's routing.  :func:`_first_above` finds it instead by a branch-free binary search over the
prefix sums held in registers, ``log2(SEG_TILE)`` steps of one ``tl.gather`` each (8 at 256), then one
more gather of the segment's start.  The lengths are clamped to >= 0, so the prefix sums are sorted
and the search finds the same segment as the compare did; lanes past the slot's rows are not valid
either way.  Whether a program has any row to serve is read from its first row (``has_rows``, a
scalar) where the route knows it (slot-sorted, flat and segment-major tiles) instead of a reduction
over the tile.

Note [Whole-row prefetch]
-------------------------
``PREFETCH`` keeps one block of the fused q side's second product in flight.  On a 32-row decode tile
the output block loop is four short iterations, each waiting for the loads issued one iteration
before.  ``PREFETCH_ALL`` (q side) issues the first four base blocks and A blocks before step A
(the base blocks alone were slower: decode-bs64 q 9.77 / 9.28 against 9.43 / 8.78 us, s12b / s12c),
unrolled by hand (a Triton loop cannot carry a list of tiles); columns past four
blocks take the plain loop after them.  With one pipelining stage (no cp.async copies set up for
step A's single block) it is the token-major choice for 32-row tiles; 64-row tiles hold twice the
registers per block and keep ``PREFETCH`` (``WIDE`` in :data:`kernels.lora._launch.BLOCKS`).  Nsight
Compute (s12a) puts the rest of decode-bs64's time in each program's instruction chain: the route
(~370 instructions per warp), step A, and per output block a shared-memory round trip for A and
another for the product's layout change, with barriers; not in waiting for DRAM.

Note [Rank-wide loads]
----------------------
The rank axis of ``B_buf`` (L, H*FULL_K, R) is its innermost one, so a row of the fused q side's
step-A weight tile is ``R`` contiguous elements.  Masked to the slot's runtime ``rank``, it loaded one
element at a time (``LDG.E.U16`` and a byte permute each; Nsight Compute on decode-bs64, 2026-12-01
s12a), on the chain before step A's product.  The fused q kernel loads it masked to the buffer rank
``R`` instead, which the aligned family receives divided by ``ALIGN`` (so the compiler knows whole
16-byte vectors), and zeroes step A's result columns past ``rank`` after the product: each column
depends on its own weight column only, and A's rows past ``rank`` load as 0, so values past a slot's
rank still never contribute, and the loads stay inside the buffer.  H200 (s12c, two interleaved rounds
against the previous tree, ``bench_lora --decode-floor``): decode-bs64 q 9.11 / 9.19 -> 8.87 / 8.74 us,
decode-bs256 q 16.93 / 17.03 -> 16.38 / 16.32.  The same on the v side (its step-B tile's rows zeroed
after the load, since a NaN there times a zero of the intermediate is still NaN) cost decode-bs64 v
7.37 / 7.44 -> 7.80 / 7.66, so the v side keeps the rank mask.

Note [Slot metadata first]
--------------------------
A program needs its slot's rank (whether to work at all) and scaling.  Loaded after the route, they
were one more dependent load round on each program's chain.  ``META_FIRST`` (fused kernels,
token-major) loads them before the route: on a per-slot grid the slot is the grid coordinate; a flat
grid, which learns its slot from the route, loads every slot's (``NSLOT``, those at or past the slot
count read as rank 0) in the route's first load round and selects one after it (:func:`_slot_meta`,
:func:`_pick_slot`).  H200, ``bench_lora --decode-ab`` round 14 (2026-12-01 s14a / s14d): decode-bs64
q 7.99 / 7.88 -> 7.83 / 7.71 us, v 7.55 / 7.48 -> 7.41 / 7.34; decode-bs256 q 16.34 -> 16.18.

Note [Programmatic dependent launch]
------------------------------------
On Hopper a kernel launched with programmatic stream serialization (Triton's ``launch_pdl``) may start
before the kernel ahead of it in the stream has finished, once every program of that kernel has
executed ``griddepcontrol.launch_dependents`` (or exited).  ``PDL`` (fused kernels, sm_90 and newer;
:func:`kernels.lora._launch._pdl_options`) makes each program's first two instructions
``launch_dependents`` (the next kernel may be scheduled now) and ``wait`` (block until the previous
kernel has completed and its writes are visible).  Nothing is read before the wait, so any input may
come from the kernel just before (the base output of the previous call, metadata written by a copy
kernel): the overlap is the launch and scheduling of our programs with the previous kernel's tail, not
any of our work.  What follows us must itself wait before reading our output, which every PDL kernel
does and a kernel launched without PDL gets from stream order.  The interpreter cannot run the two
instructions, so they are compiled only for a GPU; the GPU test chains eight in-place calls in a CUDA
graph and requires the bits of eight eager calls without PDL.  H200, round 14 (s14d), with META_FIRST:
decode-bs64 q 7.71 -> 6.94 us, v 7.34 -> 6.68; decode-bs256 q 16.18 -> 15.46, v 12.15 -> 11.47.

Note [Early reads]
------------------
Under PDL the wait sits at the top, so each program's route (one load round of metadata), its slot's rank
and scaling, and its first weight blocks all start only when the previous kernel has finished.  None of them
depends on that kernel in a decode step as SGLang runs it: metadata and LoRA weights are written before a
CUDA graph's replay, and the kernels in flight write only activations.  ``EARLY`` (fused kernels,
token-major, with PDL; :func:`kernels.lora._launch.early_reads`, off by default) issues them before the
wait and waits just before the first read of an input that a kernel may produce: q / attention rows and the
base output.  The q side loads the four A blocks (``PREFETCH_ALL``) and step A's first weight block early;
the v side step B's first weight block (``PREFETCH``); a kernel without those prefetches waits right after the
route.  Every program waits, also one with no rows, so that our completion still implies the previous
kernel's (a kernel after us may read what that one wrote).  It is an opt-in because it is wrong when the
kernel just before writes the metadata or the weights (``seg_indptr`` from a ``cumsum`` launched just before,
say): the early reads may see them half written, and nothing detects that.  The 16-row q tiles of
``EARLY_BLOCKS`` go with it: on the flat grid their route, the costliest (every slot's rows counted), is
now off the chain.  H200, ``bench_lora --decode-floor --routes auto [--early-reads]`` (2026-12-02 s18d,
do_bench_cudagraph median): decode-bs64 q 7.25 -> 4.78 us, v 6.73 -> 5.78; decode-bs256 q 15.69 -> 14.89,
v 11.50 -> 11.01 (the A/B rounds 21-24 in ``benchmarks/bench_lora.py``).

Note [Specialization]
---------------------
Triton compiles one kernel per combination of its integer arguments' classes (1, a multiple of 16,
other) and constexprs, and a compilation costs about a second on the H200: a campaign must not
compile per case.  So no runtime integer is specialized (``do_not_specialize``): not the counts that
change with every batch (segments launched, tiles per segment, rows, search steps, output blocks,
slots), not the sizes (``H``, ``R``, ``QK``, ``C``, ``VD``, ``FULL_K``, ``C_BLOCKS``), not the strides.
What the compiler needs for wide loads -- unit innermost strides, and sizes and row/slot strides that
are multiples of 16 bytes (the mask of a size decides the vector width) -- arrives as ONE constexpr,
``ALIGN`` (:data:`kernels.lora._launch.ALIGN` elements, or 1): when a call has it all, sizes and
strides are passed divided by ``ALIGN`` and multiplied back here, and the innermost strides are the
constant 1, so the compiler sees what it needs (as the vision kernel does, Note [Alignment] there);
any other call runs the generic kernel.  Constexprs are bucketed: ``BLOCK_R`` a power of two,
``SEG_TILE`` one of :data:`kernels.lora._launch.SEG_TILE_BUCKETS` or 0, the rest flags or block sizes
from ``BLOCKS``, ``NSLOT`` a power of two (8 for up to 8 slots, :func:`kernels.lora._launch.slot_block`).
What selects a compiled kernel is then the dtypes, ``BLOCK_R``, the path, ``ALIGN``, and the permutation
flag.  Pointers do not multiply it: each kernel exists in two families (:func:`_two_families`), an
aligned one launched only when ``ALIGN > 1`` and every data pointer is 16-byte aligned, and a generic
one that specializes no pointer on alignment (a misaligned view, 23% of the tiny preset's launches,
used to double the variants); metadata pointers, read one element at a time, never specialize on it.
A few hundred variants in all, which a persistent Triton cache keeps between runs (``--triton-cache``,
:mod:`harness.warmup`).
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from ..interpreter import cast_rounded, round_tf32, rounded_f32, to_f32


@triton.jit
def _operand(x, DOT_PREC: tl.constexpr):
    """A dot operand.  In TF32 it is rounded to nearest first: the tensor cores truncate fp32 operands
    to TF32, and pre-rounded values pass through that truncation unchanged (docs/kernels_lora.md)."""
    if DOT_PREC == "tf32":
        x = round_tf32(x, False)
    return x


@triton.jit
def _ld(ptrs, mask, UPCAST: tl.constexpr, FIX_BF16: tl.constexpr, DOT_PREC: tl.constexpr):
    """A matmul operand tile (fp32 when UPCAST; TF32-rounded when the dot runs in TF32)."""
    x = tl.load(ptrs, mask=mask, other=0.0)
    if UPCAST:
        x = to_f32(x, FIX_BF16)
    return _operand(x, DOT_PREC)


@triton.jit
def _base_block(rows, cols, stride, sel, hi):
    """The base tile of the selected ``rows`` at columns ``cols`` below ``hi``, as stored (the fused
    kernels' current block, or under PREFETCH the next one, loaded an iteration ahead)."""
    return tl.load(rows[:, None] + cols[None, :] * stride, mask=sel[:, None] & (cols < hi)[None, :], other=0.0)


@triton.jit
def _base_blocks4(rows, c_lo, offs, BLOCK: tl.constexpr, stride, sel, hi):
    """The four base blocks from column ``c_lo`` on (Note [Whole-row prefetch]); ``offs`` = arange(BLOCK)."""
    return (_base_block(rows, c_lo + offs, stride, sel, hi), _base_block(rows, c_lo + BLOCK + offs, stride, sel, hi),
            _base_block(rows, c_lo + 2 * BLOCK + offs, stride, sel, hi),
            _base_block(rows, c_lo + 3 * BLOCK + offs, stride, sel, hi))


@triton.jit
def _delta(mid, w, s, base_ptr, DOT_PREC: tl.constexpr, FIX_BF16: tl.constexpr):
    """The fused sides' scaled second product ``mid @ w * s`` (BT, block) in fp32, rounded to the base's
    dtype (SPEC.md's rounding point of the fused delta)."""
    d = tl.dot(mid, w, input_precision=DOT_PREC) * s
    return rounded_f32(d, base_ptr.dtype.element_ty, FIX_BF16)


@triton.jit
def _out_block(y_rows, cc, sy_c, sel, hi):
    """Pointers and mask of the selected rows' output columns ``cc`` (below ``hi``): (BT, block) each.
    The mask is built first: in this order every kernel's sm_90 SASS stayed byte-identical to that of the
    code before these helpers (``benchmarks.hopper_sass --against``, docs/kernels_lora.md)."""
    m = sel[:, None] & (cc < hi)[None, :]
    return y_rows[:, None] + cc[None, :] * sy_c, m


@triton.jit
def _store_sum(d, y_raw, y_ptrs, m, base_ptr, FIX_BF16: tl.constexpr):
    """Base ``y_raw`` (as loaded) + the rounded delta ``d``, stored in the base's dtype."""
    y = to_f32(y_raw, FIX_BF16)
    tl.store(y_ptrs, cast_rounded(y + d, base_ptr.dtype.element_ty, FIX_BF16), mask=m)


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
def _route(pid, lane_tok, w_prog, seg_indptr, weight_indices, perm, n_launch, tiles_per_seg, num_rows,
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
def _slot_meta(lora_ranks, scalings, w_prog, n_slots, FLAT: tl.constexpr, NSLOT: tl.constexpr):
    """Note [Slot metadata first]: the rank and scaling of a token-major program's slot, loaded before
    its route.  A flat grid learns its slot from the route, so it loads every slot's (NSLOT,) (those at
    or past ``n_slots`` read as rank 0) and :func:`_pick_slot` selects one; otherwise the slot is the
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
def _pick_slot(ranks, scales, w, FLAT: tl.constexpr, NSLOT: tl.constexpr):
    """Slot ``w``'s (rank, scaling) from :func:`_slot_meta`'s."""
    if FLAT:
        hit = tl.arange(0, NSLOT) == w
        return tl.sum(tl.where(hit, ranks, 0), axis=0), tl.sum(tl.where(hit, scales, 0.0), axis=0)
    else:
        return ranks, scales


# ---- split steps ---------------------------------------------------------------------------------

# Note [Specialization]: runtime ints Triton must not specialize on (they change from batch to batch)
_COUNTS = ("n_launch", "tiles_per_seg", "num_rows", "search_steps", "n_cblocks")
# metadata pointers, read one element at a time: their 16-byte alignment (views at an offset) is of no use
_METADATA = ("seg_indptr", "weight_indices", "lora_ranks", "scalings", "perm")
_DATA = ("x_ptr", "a_ptr", "b_ptr", "out_ptr", "base_ptr")


def _two_families(dns: tuple):
    """``triton.jit`` twice (Note [Specialization]): the returned kernel is the aligned family, launched
    only with ``ALIGN > 1`` and every data pointer 16-byte aligned (so its pointers specialize one way);
    its ``.generic`` twin, launched with ``ALIGN == 1``, specializes no pointer on alignment at all."""
    def deco(fn):
        aligned = triton.jit(fn, do_not_specialize=dns, do_not_specialize_on_alignment=_METADATA)
        aligned.generic = triton.jit(fn, do_not_specialize=dns, do_not_specialize_on_alignment=_METADATA + _DATA)
        return aligned
    return deco

_DNS_STEP_A_Q = _COUNTS + ('FULL_K', 'R', 'sx_t', 'sx_h', 'sb_l', 'sb_row', 'so_t', 'so_h',
                           'QK', 'sx_d', 'sb_r', 'so_r')


@_two_families(_DNS_STEP_A_Q)
def step_a_q_kernel(x_ptr, b_ptr, out_ptr, seg_indptr, weight_indices, lora_ranks, perm,
                    n_launch, tiles_per_seg, num_rows, search_steps, n_cblocks, QK, FULL_K, R,
                    sx_t, sx_h, sx_d, sb_l, sb_row, sb_r, so_t, so_h, so_r,
                    TOKEN_MAJOR: tl.constexpr, HAS_PERM: tl.constexpr, SEG_TILE: tl.constexpr, SORTED: tl.constexpr,
                    FLAT: tl.constexpr, NSLOT: tl.constexpr,
                    BT: tl.constexpr,
                    BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr, UPCAST: tl.constexpr,
                    DOT_PREC: tl.constexpr, FIX_BF16: tl.constexpr,
                    ALIGN: tl.constexpr):
    """out[t,h,:r] = q[t,h,:QK] @ B[w, h*FULL_K : h*FULL_K+QK, :r]; grid (row tiles, H)."""
    # strides and sizes arrive divided by ALIGN; ALIGN > 1 also promises unit innermost strides
    sx_t = sx_t * ALIGN
    sx_h = sx_h * ALIGN
    sb_l = sb_l * ALIGN
    sb_row = sb_row * ALIGN
    so_t = so_t * ALIGN
    so_h = so_h * ALIGN
    QK = QK * ALIGN
    if ALIGN > 1:  # (see Note [Specialization])
        sx_d = 1
        sb_r = 1
        so_r = 1
    pid = tl.program_id(0)
    cb = tl.program_id(2) % n_cblocks  # grid axis 2: slot (token-major, not FLAT) x output block
    w_prog = tl.program_id(2) // n_cblocks
    h = tl.program_id(1)
    lane = tl.arange(0, BT)
    sel, w, phys, has_rows = _route(pid, lane, w_prog, seg_indptr, weight_indices, perm, n_launch, tiles_per_seg,
                                    num_rows, search_steps, TOKEN_MAJOR, HAS_PERM, BT, SEG_TILE, SORTED,
                                    FLAT, NSLOT)
    offs_k = tl.arange(0, BLOCK_K)
    offs_r = tl.arange(0, BLOCK_R)
    x_rows = x_ptr + phys * sx_t + h * sx_h
    o_rows = out_ptr + phys * so_t + h * so_h
    rank = tl.minimum(tl.load(lora_ranks + w), R)
    if (rank > 0) & has_rows:
        w_base = b_ptr + w.to(tl.int64) * sb_l + (h * FULL_K).to(tl.int64) * sb_row
        acc = tl.zeros((BT, BLOCK_R), dtype=tl.float32)
        for k0 in range(0, QK, BLOCK_K):
            kk = k0 + offs_k
            xt = _ld(x_rows[:, None] + kk[None, :] * sx_d, sel[:, None] & (kk < QK)[None, :], UPCAST, FIX_BF16, DOT_PREC)
            wt = _ld(w_base + kk[:, None] * sb_row + offs_r[None, :] * sb_r,
                     (kk < QK)[:, None] & (offs_r < rank)[None, :], UPCAST, FIX_BF16, DOT_PREC)
            acc = tl.dot(xt, wt, acc, input_precision=DOT_PREC)
        tl.store(o_rows[:, None] + offs_r[None, :] * so_r,
                 cast_rounded(acc, out_ptr.dtype.element_ty, FIX_BF16),
                 mask=sel[:, None] & (offs_r < R)[None, :])


_DNS_STEP_B_Q = _COUNTS + ('H', 'R', 'sx_t', 'sx_h', 'sa_l', 'sa_r', 'sy_t', 'sy_h',
                           'C', 'sx_r', 'sa_c', 'sy_c')


@_two_families(_DNS_STEP_B_Q)
def step_b_q_kernel(x_ptr, a_ptr, base_ptr, seg_indptr, weight_indices, lora_ranks, scalings, perm,
                    n_launch, tiles_per_seg, num_rows, search_steps, n_cblocks, H, C, R,
                    sx_t, sx_h, sx_r, sa_l, sa_r, sa_c, sy_t, sy_h, sy_c,
                    TOKEN_MAJOR: tl.constexpr, HAS_PERM: tl.constexpr, SEG_TILE: tl.constexpr, SORTED: tl.constexpr,
                    FLAT: tl.constexpr, NSLOT: tl.constexpr,
                    BT: tl.constexpr, BH: tl.constexpr,
                    BLOCK_C: tl.constexpr, BLOCK_R: tl.constexpr, UPCAST: tl.constexpr,
                    DOT_PREC: tl.constexpr, FIX_BF16: tl.constexpr,
                    ALIGN: tl.constexpr):
    """base[t,h,:] += round_x(s * (x[t,h,:r] @ A[w,:r,:])); grid (row tiles, H/BH, C/BLOCK_C).

    A is shared by all heads, so a tile holds BT tokens x BH heads."""
    # strides and sizes arrive divided by ALIGN; ALIGN > 1 also promises unit innermost strides
    sx_t = sx_t * ALIGN
    sx_h = sx_h * ALIGN
    sa_l = sa_l * ALIGN
    sa_r = sa_r * ALIGN
    sy_t = sy_t * ALIGN
    sy_h = sy_h * ALIGN
    C = C * ALIGN
    if ALIGN > 1:  # (see Note [Specialization])
        sx_r = 1
        sa_c = 1
        sy_c = 1
    pid = tl.program_id(0)
    cb = tl.program_id(2) % n_cblocks  # grid axis 2: slot (token-major, not FLAT) x output block
    w_prog = tl.program_id(2) // n_cblocks
    lane = tl.arange(0, BT * BH)
    hh = tl.program_id(1) * BH + lane % BH
    sel, w, phys, has_rows = _route(pid, lane // BH, w_prog, seg_indptr, weight_indices, perm, n_launch, tiles_per_seg,
                                    num_rows, search_steps, TOKEN_MAJOR, HAS_PERM, BT, SEG_TILE, SORTED,
                                    FLAT, NSLOT)
    sel = sel & (hh < H)
    offs_r = tl.arange(0, BLOCK_R)
    offs_c = cb * BLOCK_C + tl.arange(0, BLOCK_C)
    x_rows = x_ptr + phys * sx_t + hh * sx_h
    y_rows = base_ptr + phys * sy_t + hh * sy_h
    rank = tl.minimum(tl.load(lora_ranks + w), R)
    if (rank > 0) & has_rows:
        s = tl.load(scalings + w)
        xt = _ld(x_rows[:, None] + offs_r[None, :] * sx_r, sel[:, None] & (offs_r < rank)[None, :], UPCAST, FIX_BF16, DOT_PREC)
        at = _ld(a_ptr + w.to(tl.int64) * sa_l + offs_r[:, None] * sa_r + offs_c[None, :] * sa_c,
                 (offs_r < rank)[:, None] & (offs_c < C)[None, :], UPCAST, FIX_BF16, DOT_PREC)
        acc = tl.dot(xt, at, input_precision=DOT_PREC)
        d = rounded_f32(acc * s, x_ptr.dtype.element_ty, FIX_BF16)  # split: rounded to the activations' dtype
        y_ptrs, m = _out_block(y_rows, offs_c, sy_c, sel, C)
        _store_sum(d, tl.load(y_ptrs, mask=m, other=0.0), y_ptrs, m, base_ptr, FIX_BF16)


_DNS_STEP_A_V = _COUNTS + ('H', 'R', 'sx_t', 'sx_h', 'sa_l', 'sa_r', 'so_t', 'so_h',
                           'C', 'sx_c', 'sa_c', 'so_r')


@_two_families(_DNS_STEP_A_V)
def step_a_v_kernel(x_ptr, a_ptr, out_ptr, seg_indptr, weight_indices, lora_ranks, perm,
                    n_launch, tiles_per_seg, num_rows, search_steps, n_cblocks, H, C, R,
                    sx_t, sx_h, sx_c, sa_l, sa_r, sa_c, so_t, so_h, so_r,
                    TOKEN_MAJOR: tl.constexpr, HAS_PERM: tl.constexpr, SEG_TILE: tl.constexpr, SORTED: tl.constexpr,
                    FLAT: tl.constexpr, NSLOT: tl.constexpr,
                    BT: tl.constexpr, BH: tl.constexpr,
                    BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr, UPCAST: tl.constexpr,
                    DOT_PREC: tl.constexpr, FIX_BF16: tl.constexpr,
                    ALIGN: tl.constexpr):
    """out[t,h,:r] = x[t,h,:C] @ A[w,:r,:].T; grid (row tiles, H/BH); a tile is BT tokens x BH heads."""
    # strides and sizes arrive divided by ALIGN; ALIGN > 1 also promises unit innermost strides
    sx_t = sx_t * ALIGN
    sx_h = sx_h * ALIGN
    sa_l = sa_l * ALIGN
    sa_r = sa_r * ALIGN
    so_t = so_t * ALIGN
    so_h = so_h * ALIGN
    C = C * ALIGN
    if ALIGN > 1:  # (see Note [Specialization])
        sx_c = 1
        sa_c = 1
        so_r = 1
    pid = tl.program_id(0)
    cb = tl.program_id(2) % n_cblocks  # grid axis 2: slot (token-major, not FLAT) x output block
    w_prog = tl.program_id(2) // n_cblocks
    lane = tl.arange(0, BT * BH)
    hh = tl.program_id(1) * BH + lane % BH
    sel, w, phys, has_rows = _route(pid, lane // BH, w_prog, seg_indptr, weight_indices, perm, n_launch, tiles_per_seg,
                                    num_rows, search_steps, TOKEN_MAJOR, HAS_PERM, BT, SEG_TILE, SORTED,
                                    FLAT, NSLOT)
    sel = sel & (hh < H)
    offs_k = tl.arange(0, BLOCK_K)
    offs_r = tl.arange(0, BLOCK_R)
    x_rows = x_ptr + phys * sx_t + hh * sx_h
    o_rows = out_ptr + phys * so_t + hh * so_h
    rank = tl.minimum(tl.load(lora_ranks + w), R)
    if (rank > 0) & has_rows:
        w_base = a_ptr + w.to(tl.int64) * sa_l
        acc = tl.zeros((BT * BH, BLOCK_R), dtype=tl.float32)
        for k0 in range(0, C, BLOCK_K):
            kk = k0 + offs_k
            xt = _ld(x_rows[:, None] + kk[None, :] * sx_c, sel[:, None] & (kk < C)[None, :], UPCAST, FIX_BF16, DOT_PREC)
            wt = _ld(w_base + kk[:, None] * sa_c + offs_r[None, :] * sa_r,
                     (kk < C)[:, None] & (offs_r < rank)[None, :], UPCAST, FIX_BF16, DOT_PREC)
            acc = tl.dot(xt, wt, acc, input_precision=DOT_PREC)
        tl.store(o_rows[:, None] + offs_r[None, :] * so_r,
                 cast_rounded(acc, out_ptr.dtype.element_ty, FIX_BF16),
                 mask=sel[:, None] & (offs_r < R)[None, :])


_DNS_STEP_B_V = _COUNTS + ('FULL_K', 'R', 'sx_t', 'sx_h', 'sb_l', 'sb_row', 'sy_t', 'sy_h',
                           'QK', 'VD', 'sx_r', 'sb_r', 'sy_v')


@_two_families(_DNS_STEP_B_V)
def step_b_v_kernel(x_ptr, b_ptr, base_ptr, seg_indptr, weight_indices, lora_ranks, scalings, perm,
                    n_launch, tiles_per_seg, num_rows, search_steps, n_cblocks, QK, VD, FULL_K, R,
                    sx_t, sx_h, sx_r, sb_l, sb_row, sb_r, sy_t, sy_h, sy_v,
                    TOKEN_MAJOR: tl.constexpr, HAS_PERM: tl.constexpr, SEG_TILE: tl.constexpr, SORTED: tl.constexpr,
                    FLAT: tl.constexpr, NSLOT: tl.constexpr,
                    BT: tl.constexpr,
                    BLOCK_V: tl.constexpr, BLOCK_R: tl.constexpr, UPCAST: tl.constexpr,
                    DOT_PREC: tl.constexpr, FIX_BF16: tl.constexpr,
                    ALIGN: tl.constexpr):
    """base[t,h,:] += round_x(s * (x[t,h,:r] @ B[w, h*FULL_K+QK : (h+1)*FULL_K, :r].T));
    grid (row tiles, H, VD/BLOCK_V)."""
    # strides and sizes arrive divided by ALIGN; ALIGN > 1 also promises unit innermost strides
    sx_t = sx_t * ALIGN
    sx_h = sx_h * ALIGN
    sb_l = sb_l * ALIGN
    sb_row = sb_row * ALIGN
    sy_t = sy_t * ALIGN
    sy_h = sy_h * ALIGN
    QK = QK * ALIGN
    VD = VD * ALIGN
    if ALIGN > 1:  # (see Note [Specialization])
        sx_r = 1
        sb_r = 1
        sy_v = 1
    pid = tl.program_id(0)
    cb = tl.program_id(2) % n_cblocks  # grid axis 2: slot (token-major, not FLAT) x output block
    w_prog = tl.program_id(2) // n_cblocks
    h = tl.program_id(1)
    lane = tl.arange(0, BT)
    sel, w, phys, has_rows = _route(pid, lane, w_prog, seg_indptr, weight_indices, perm, n_launch, tiles_per_seg,
                                    num_rows, search_steps, TOKEN_MAJOR, HAS_PERM, BT, SEG_TILE, SORTED,
                                    FLAT, NSLOT)
    offs_r = tl.arange(0, BLOCK_R)
    offs_v = cb * BLOCK_V + tl.arange(0, BLOCK_V)
    x_rows = x_ptr + phys * sx_t + h * sx_h
    y_rows = base_ptr + phys * sy_t + h * sy_h
    rank = tl.minimum(tl.load(lora_ranks + w), R)
    if (rank > 0) & has_rows:
        s = tl.load(scalings + w)
        xt = _ld(x_rows[:, None] + offs_r[None, :] * sx_r, sel[:, None] & (offs_r < rank)[None, :], UPCAST, FIX_BF16, DOT_PREC)
        w_base = b_ptr + w.to(tl.int64) * sb_l + (h * FULL_K + QK).to(tl.int64) * sb_row
        wt = _ld(w_base + offs_v[None, :] * sb_row + offs_r[:, None] * sb_r,
                 (offs_r < rank)[:, None] & (offs_v < VD)[None, :], UPCAST, FIX_BF16, DOT_PREC)
        acc = tl.dot(xt, wt, input_precision=DOT_PREC)
        d = rounded_f32(acc * s, x_ptr.dtype.element_ty, FIX_BF16)  # split: rounded to the activations' dtype
        y_ptrs, m = _out_block(y_rows, offs_v, sy_v, sel, VD)
        _store_sum(d, tl.load(y_ptrs, mask=m, other=0.0), y_ptrs, m, base_ptr, FIX_BF16)


@triton.jit
def _a_block(wa_base, offs_r, cc, sa_r, sa_c, rank, hi, UPCAST: tl.constexpr, FIX_BF16: tl.constexpr,
             DOT_PREC: tl.constexpr):
    """Columns ``cc`` (below ``hi``) of a slot's q-side ``A`` (BLOCK_R, BLOCK_C), rows past ``rank`` zero."""
    return _ld(wa_base + offs_r[:, None] * sa_r + cc[None, :] * sa_c, (offs_r < rank)[:, None] & (cc < hi)[None, :],
               UPCAST, FIX_BF16, DOT_PREC)


@triton.jit
def _qb_block(wb_base, kk, offs_r, sb_row, sb_r, QK, R, UPCAST: tl.constexpr, FIX_BF16: tl.constexpr,
              DOT_PREC: tl.constexpr):
    """Rows ``kk`` (below ``QK``) of a slot's q-side step-A weight (BLOCK_K, BLOCK_R) for one head.  Note
    [Rank-wide loads]: every column below the buffer rank ``R``, so that the rows load in 16-byte vectors."""
    return _ld(wb_base + kk[:, None] * sb_row + offs_r[None, :] * sb_r, (kk < QK)[:, None] & (offs_r < R)[None, :],
               UPCAST, FIX_BF16, DOT_PREC)


@triton.jit
def _vb_block(wb_base, offs_r, vv, sb_row, sb_r, rank, hi, UPCAST: tl.constexpr, FIX_BF16: tl.constexpr,
              DOT_PREC: tl.constexpr):
    """Columns ``vv`` (below ``hi``) of a slot's v-side ``B`` read transposed (BLOCK_R, BLOCK_V), rows past
    ``rank`` zero."""
    return _ld(wb_base + vv[None, :] * sb_row + offs_r[:, None] * sb_r, (offs_r < rank)[:, None] & (vv < hi)[None, :],
               UPCAST, FIX_BF16, DOT_PREC)


@triton.jit
def _add_delta(mid, at, y_raw, base_ptr, y_rows, cc, sy_c, sel, hi, s, DOT_PREC: tl.constexpr,
               FIX_BF16: tl.constexpr):
    """The fused q side's output block: :func:`_delta` then :func:`_store_sum` at columns ``cc``."""
    d = _delta(mid, at, s, base_ptr, DOT_PREC, FIX_BF16)
    y_ptrs, m = _out_block(y_rows, cc, sy_c, sel, hi)
    _store_sum(d, y_raw, y_ptrs, m, base_ptr, FIX_BF16)


@triton.jit
def _tile_and_head(HEADS_FIRST: tl.constexpr):
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


# ---- fused sides ---------------------------------------------------------------------------------

_DNS_Q_SIDE_FUSED = _COUNTS + ('FULL_K', 'R', 'C_BLOCKS', 'sx_t', 'sx_h', 'sb_l', 'sb_row', 'sa_l', 'sa_r',
                               'sy_t', 'sy_h',
                               'QK', 'C', 'sx_d', 'sb_r', 'sa_c', 'sy_c')


@_two_families(_DNS_Q_SIDE_FUSED)
def q_side_fused_kernel(x_ptr, b_ptr, a_ptr, base_ptr, seg_indptr, weight_indices, lora_ranks, scalings, perm,
                        n_launch, tiles_per_seg, num_rows, search_steps, n_cblocks, QK, FULL_K, C, R,
                        C_BLOCKS,
                        sx_t, sx_h, sx_d, sb_l, sb_row, sb_r, sa_l, sa_r, sa_c, sy_t, sy_h, sy_c,
                        TOKEN_MAJOR: tl.constexpr, HAS_PERM: tl.constexpr, SEG_TILE: tl.constexpr, SORTED: tl.constexpr,
                        FLAT: tl.constexpr, NSLOT: tl.constexpr,
                        BT: tl.constexpr,
                        BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_R: tl.constexpr,
                        UPCAST: tl.constexpr, DOT_PREC: tl.constexpr, FIX_BF16: tl.constexpr,
                        ALIGN: tl.constexpr, PREFETCH: tl.constexpr = False, HEADS_FIRST: tl.constexpr = False,
                        PREFETCH_ALL: tl.constexpr = False, META_FIRST: tl.constexpr = False,
                        PDL: tl.constexpr = False, EARLY: tl.constexpr = False):
    """Step A_q then B_q without the intermediate in memory; grid (row tiles, H)."""
    if PDL:  # Note [Programmatic dependent launch]; under EARLY the wait comes later (Note [Early reads])
        gdc_launch_dependents()
        if not EARLY:
            gdc_wait()
    # strides and sizes arrive divided by ALIGN; ALIGN > 1 also promises unit innermost strides
    sx_t = sx_t * ALIGN
    sx_h = sx_h * ALIGN
    sb_l = sb_l * ALIGN
    sb_row = sb_row * ALIGN
    sa_l = sa_l * ALIGN
    sa_r = sa_r * ALIGN
    sy_t = sy_t * ALIGN
    sy_h = sy_h * ALIGN
    QK = QK * ALIGN
    C = C * ALIGN
    R = R * ALIGN
    if ALIGN > 1:  # (see Note [Specialization])
        sx_d = 1
        sb_r = 1
        sa_c = 1
        sy_c = 1
    pid, h = _tile_and_head(HEADS_FIRST)
    cb = tl.program_id(2) % n_cblocks  # grid axis 2: slot (token-major, not FLAT) x output block
    w_prog = tl.program_id(2) // n_cblocks
    lane = tl.arange(0, BT)
    if META_FIRST and TOKEN_MAJOR:  # Note [Slot metadata first]
        ranks_w, scales_w = _slot_meta(lora_ranks, scalings, w_prog, search_steps, FLAT, NSLOT)
    sel, w, phys, has_rows = _route(pid, lane, w_prog, seg_indptr, weight_indices, perm, n_launch, tiles_per_seg,
                                    num_rows, search_steps, TOKEN_MAJOR, HAS_PERM, BT, SEG_TILE, SORTED,
                                    FLAT, NSLOT)
    offs_k = tl.arange(0, BLOCK_K)
    offs_r = tl.arange(0, BLOCK_R)
    offs_c0 = tl.arange(0, BLOCK_C)
    x_rows = x_ptr + phys * sx_t + h * sx_h
    y_rows = base_ptr + phys * sy_t + h * sy_h
    if META_FIRST and TOKEN_MAJOR:
        rank, s = _pick_slot(ranks_w, scales_w, w, FLAT, NSLOT)
        rank = tl.minimum(rank, R)
    else:
        rank = tl.minimum(tl.load(lora_ranks + w), R)
    if PDL and EARLY and not PREFETCH_ALL:  # Note [Early reads]: the route and the slot's metadata only
        gdc_wait()
    if (rank > 0) & has_rows:
        if not (META_FIRST and TOKEN_MAJOR):
            s = tl.load(scalings + w)
        c_lo = cb * C_BLOCKS * BLOCK_C
        c_hi = tl.minimum(C, (cb + 1) * C_BLOCKS * BLOCK_C)
        wa_base = a_ptr + w.to(tl.int64) * sa_l
        if PREFETCH and not PREFETCH_ALL:  # the first A and base blocks in flight during step A (decode: latency, not bytes)
            y_next = _base_block(y_rows, c_lo + offs_c0, sy_c, sel, c_hi)
            at_next = _ld(wa_base + offs_r[:, None] * sa_r + (c_lo + offs_c0)[None, :] * sa_c,
                          (offs_r < rank)[:, None] & ((c_lo + offs_c0) < c_hi)[None, :], UPCAST, FIX_BF16, DOT_PREC)
        # Note [Whole-row prefetch]: the first four blocks' base and A before step A
        if PREFETCH_ALL and not (PDL and EARLY):
            y0, y1, y2, y3 = _base_blocks4(y_rows, c_lo, offs_c0, BLOCK_C, sy_c, sel, c_hi)
        if PREFETCH_ALL:
            a0 = _a_block(wa_base, offs_r, c_lo + offs_c0, sa_r, sa_c, rank, c_hi, UPCAST, FIX_BF16, DOT_PREC)
            a1 = _a_block(wa_base, offs_r, c_lo + BLOCK_C + offs_c0, sa_r, sa_c, rank, c_hi, UPCAST, FIX_BF16,
                          DOT_PREC)
            a2 = _a_block(wa_base, offs_r, c_lo + 2 * BLOCK_C + offs_c0, sa_r, sa_c, rank, c_hi, UPCAST,
                          FIX_BF16, DOT_PREC)
            a3 = _a_block(wa_base, offs_r, c_lo + 3 * BLOCK_C + offs_c0, sa_r, sa_c, rank, c_hi, UPCAST,
                          FIX_BF16, DOT_PREC)
        wb_base = b_ptr + w.to(tl.int64) * sb_l + (h * FULL_K).to(tl.int64) * sb_row
        acc = tl.zeros((BT, BLOCK_R), dtype=tl.float32)
        k_start = 0
        if PREFETCH_ALL and PDL and EARLY:  # Note [Early reads]: step A's first weight block, then the wait
            wt = _qb_block(wb_base, offs_k, offs_r, sb_row, sb_r, QK, R, UPCAST, FIX_BF16, DOT_PREC)
            gdc_wait()
            y0, y1, y2, y3 = _base_blocks4(y_rows, c_lo, offs_c0, BLOCK_C, sy_c, sel, c_hi)
            xt = _ld(x_rows[:, None] + offs_k[None, :] * sx_d, sel[:, None] & (offs_k < QK)[None, :], UPCAST,
                     FIX_BF16, DOT_PREC)
            acc = tl.dot(xt, wt, acc, input_precision=DOT_PREC)
            k_start = BLOCK_K
        for k0 in range(k_start, QK, BLOCK_K):
            kk = k0 + offs_k
            xt = _ld(x_rows[:, None] + kk[None, :] * sx_d, sel[:, None] & (kk < QK)[None, :], UPCAST, FIX_BF16, DOT_PREC)
            wt = _qb_block(wb_base, kk, offs_r, sb_row, sb_r, QK, R, UPCAST, FIX_BF16, DOT_PREC)
            acc = tl.dot(xt, wt, acc, input_precision=DOT_PREC)
        acc = tl.where((offs_r < rank)[None, :], acc, 0.0)  # columns past the slot's rank (their weights unread)
        if UPCAST:  # step A's rounding point
            mid = _operand(rounded_f32(acc, x_ptr.dtype.element_ty, FIX_BF16), DOT_PREC)
        else:
            mid = _operand(acc.to(x_ptr.dtype.element_ty), DOT_PREC)
        c_rest = c_lo
        if PREFETCH_ALL:
            _add_delta(mid, a0, y0, base_ptr, y_rows, c_lo + offs_c0, sy_c, sel, c_hi, s, DOT_PREC, FIX_BF16)
            _add_delta(mid, a1, y1, base_ptr, y_rows, c_lo + BLOCK_C + offs_c0, sy_c, sel, c_hi, s, DOT_PREC, FIX_BF16)
            _add_delta(mid, a2, y2, base_ptr, y_rows, c_lo + 2 * BLOCK_C + offs_c0, sy_c, sel, c_hi, s, DOT_PREC, FIX_BF16)
            _add_delta(mid, a3, y3, base_ptr, y_rows, c_lo + 3 * BLOCK_C + offs_c0, sy_c, sel, c_hi, s, DOT_PREC, FIX_BF16)
            c_rest = c_lo + 4 * BLOCK_C  # kv_lora_rank past four blocks: the plain loop below
        # a program's columns start at a multiple of BLOCK_C (a constexpr): the base tile's loads and stores
        # stay 16-byte aligned (a runtime column count here cost 2x on prefill, docs/BENCHMARKS.md)
        for c0 in range(c_rest, c_hi, BLOCK_C):
            cc = c0 + offs_c0
            if PREFETCH and not PREFETCH_ALL:
                at = at_next
                at_next = _a_block(wa_base, offs_r, cc + BLOCK_C, sa_r, sa_c, rank, c_hi, UPCAST, FIX_BF16, DOT_PREC)
            else:
                at = _a_block(wa_base, offs_r, cc, sa_r, sa_c, rank, C, UPCAST, FIX_BF16, DOT_PREC)
            d = _delta(mid, at, s, base_ptr, DOT_PREC, FIX_BF16)
            y_ptrs, m = _out_block(y_rows, cc, sy_c, sel, C)
            if PREFETCH and not PREFETCH_ALL:
                y_raw = y_next
                y_next = _base_block(y_rows, cc + BLOCK_C, sy_c, sel, c_hi)
            else:
                y_raw = _base_block(y_rows, cc, sy_c, sel, C)
            _store_sum(d, y_raw, y_ptrs, m, base_ptr, FIX_BF16)
    else:
        if PDL and EARLY and PREFETCH_ALL:  # every program waits (Note [Early reads])
            gdc_wait()


_DNS_V_SIDE_FUSED = _COUNTS + ('FULL_K', 'R', 'sx_t', 'sx_h', 'sa_l', 'sa_r', 'sb_l', 'sb_row', 'sy_t', 'sy_h',
                               'QK', 'VD', 'C', 'sx_c', 'sa_c', 'sb_r', 'sy_v')


@_two_families(_DNS_V_SIDE_FUSED)
def v_side_fused_kernel(x_ptr, a_ptr, b_ptr, base_ptr, seg_indptr, weight_indices, lora_ranks, scalings, perm,
                        n_launch, tiles_per_seg, num_rows, search_steps, n_cblocks, QK, VD, FULL_K, C, R,
                        sx_t, sx_h, sx_c, sa_l, sa_r, sa_c, sb_l, sb_row, sb_r, sy_t, sy_h, sy_v,
                        TOKEN_MAJOR: tl.constexpr, HAS_PERM: tl.constexpr, SEG_TILE: tl.constexpr, SORTED: tl.constexpr,
                        FLAT: tl.constexpr, NSLOT: tl.constexpr,
                        BT: tl.constexpr,
                        BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_R: tl.constexpr,
                        UPCAST: tl.constexpr, DOT_PREC: tl.constexpr, FIX_BF16: tl.constexpr,
                        ALIGN: tl.constexpr, PREFETCH: tl.constexpr = False, HEADS_FIRST: tl.constexpr = False,
                        META_FIRST: tl.constexpr = False, PDL: tl.constexpr = False, EARLY: tl.constexpr = False):
    """Step A_v then B_v without the intermediate in memory; grid (row tiles, H)."""
    if PDL:  # Note [Programmatic dependent launch]; under EARLY the wait comes later (Note [Early reads])
        gdc_launch_dependents()
        if not EARLY:
            gdc_wait()
    # strides and sizes arrive divided by ALIGN; ALIGN > 1 also promises unit innermost strides
    sx_t = sx_t * ALIGN
    sx_h = sx_h * ALIGN
    sa_l = sa_l * ALIGN
    sa_r = sa_r * ALIGN
    sb_l = sb_l * ALIGN
    sb_row = sb_row * ALIGN
    sy_t = sy_t * ALIGN
    sy_h = sy_h * ALIGN
    QK = QK * ALIGN
    VD = VD * ALIGN
    C = C * ALIGN
    if ALIGN > 1:  # (see Note [Specialization])
        sx_c = 1
        sa_c = 1
        sb_r = 1
        sy_v = 1
    pid, h = _tile_and_head(HEADS_FIRST)
    cb = tl.program_id(2) % n_cblocks  # grid axis 2: slot (token-major, not FLAT) x output block
    w_prog = tl.program_id(2) // n_cblocks
    lane = tl.arange(0, BT)
    if META_FIRST and TOKEN_MAJOR:  # Note [Slot metadata first]
        ranks_w, scales_w = _slot_meta(lora_ranks, scalings, w_prog, search_steps, FLAT, NSLOT)
    sel, w, phys, has_rows = _route(pid, lane, w_prog, seg_indptr, weight_indices, perm, n_launch, tiles_per_seg,
                                    num_rows, search_steps, TOKEN_MAJOR, HAS_PERM, BT, SEG_TILE, SORTED,
                                    FLAT, NSLOT)
    offs_k = tl.arange(0, BLOCK_K)
    offs_r = tl.arange(0, BLOCK_R)
    offs_v0 = tl.arange(0, BLOCK_V)
    x_rows = x_ptr + phys * sx_t + h * sx_h
    y_rows = base_ptr + phys * sy_t + h * sy_h
    if META_FIRST and TOKEN_MAJOR:
        rank, s = _pick_slot(ranks_w, scales_w, w, FLAT, NSLOT)
        rank = tl.minimum(rank, R)
    else:
        rank = tl.minimum(tl.load(lora_ranks + w), R)
    if PDL and EARLY and not PREFETCH:  # Note [Early reads]: the route and the slot's metadata only
        gdc_wait()
    if (rank > 0) & has_rows:
        if not (META_FIRST and TOKEN_MAJOR):
            s = tl.load(scalings + w)
        wb_base = b_ptr + w.to(tl.int64) * sb_l + (h * FULL_K + QK).to(tl.int64) * sb_row
        if PREFETCH and PDL and EARLY:  # Note [Early reads]: step B's first weight block, then the wait
            bt_next = _vb_block(wb_base, offs_r, offs_v0, sb_row, sb_r, rank, VD, UPCAST, FIX_BF16, DOT_PREC)
            gdc_wait()
            y_next = _base_block(y_rows, offs_v0, sy_v, sel, VD)
        elif PREFETCH:  # the first B and base blocks in flight during step A (decode: latency, not bytes)
            y_next = _base_block(y_rows, offs_v0, sy_v, sel, VD)
            bt_next = _vb_block(wb_base, offs_r, offs_v0, sb_row, sb_r, rank, VD, UPCAST, FIX_BF16, DOT_PREC)
        wa_base = a_ptr + w.to(tl.int64) * sa_l
        acc = tl.zeros((BT, BLOCK_R), dtype=tl.float32)
        for k0 in range(0, C, BLOCK_K):
            kk = k0 + offs_k
            xt = _ld(x_rows[:, None] + kk[None, :] * sx_c, sel[:, None] & (kk < C)[None, :], UPCAST, FIX_BF16, DOT_PREC)
            wt = _ld(wa_base + kk[:, None] * sa_c + offs_r[None, :] * sa_r,
                     (kk < C)[:, None] & (offs_r < rank)[None, :], UPCAST, FIX_BF16, DOT_PREC)
            acc = tl.dot(xt, wt, acc, input_precision=DOT_PREC)
        if UPCAST:  # step A's rounding point
            mid = _operand(rounded_f32(acc, x_ptr.dtype.element_ty, FIX_BF16), DOT_PREC)
        else:
            mid = _operand(acc.to(x_ptr.dtype.element_ty), DOT_PREC)
        for v0 in range(0, VD, BLOCK_V):
            vv = v0 + offs_v0
            if PREFETCH:
                bt = bt_next
                bt_next = _vb_block(wb_base, offs_r, vv + BLOCK_V, sb_row, sb_r, rank, VD, UPCAST, FIX_BF16, DOT_PREC)
            else:
                bt = _vb_block(wb_base, offs_r, vv, sb_row, sb_r, rank, VD, UPCAST, FIX_BF16, DOT_PREC)
            d = _delta(mid, bt, s, base_ptr, DOT_PREC, FIX_BF16)
            y_ptrs, m = _out_block(y_rows, vv, sy_v, sel, VD)
            if PREFETCH:
                y_raw = y_next
                y_next = _base_block(y_rows, vv + BLOCK_V, sy_v, sel, VD)
            else:
                y_raw = _base_block(y_rows, vv, sy_v, sel, VD)
            _store_sum(d, y_raw, y_ptrs, m, base_ptr, FIX_BF16)
    else:
        if PDL and EARLY and PREFETCH:  # every program waits (Note [Early reads])
            gdc_wait()
