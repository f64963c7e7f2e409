"""Triton kernels of the kv_b LoRA steps (docs/semantics.md#kv_b-lora-steps): their design, and the six kernels by name.

The kernels live by role: :mod:`._route` (which rows and slot a tile holds), :mod:`._tiles` (loads, dot operands,
step B's output block), :mod:`._families` (the two compiled families of each kernel), :mod:`._split` (the four
split steps) and :mod:`._fused` (the two fused sides, one body).  :mod:`kernels.lora._launch` launches them by the names
here, so that a tool which stands in for the kernels (``fuzz.precompile.compile_only``) replaces them in one
place.  The figures behind each choice below are ``python -m kernel_oracle.benchmarks.bench_lora --decode-ab``
(``--prefill-ab``, ``--decode-floor``) on the H200, in ``docs/BENCHMARKS.md``.

Note [Tiles, paths and slots]
-----------------------------
Every kernel works on a tile of ``M`` (token, head) rows and serves ONE slot.  Which rows a tile
holds is decided by :func:`._route.route`, in one of two ways chosen per call by the wrapper (a constexpr,
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
fp32 activations, as upstream; ``"ieee"`` for upcast tiles).  Rounding points as docs/semantics.md#math-and-rounding-points: step-A
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
binary search of it per row (Note [Row search]).  The grid is unchanged (``ceil(S/BT)`` tiles per slot,
an upper bound: programs past their slot's rows skip the prefix sum and the compare, and store nothing;
Note [Flat slot grid] launches fewer).  With well-formed metadata every row still belongs to one program,
so in-place updates do not race.  It is the default (``LoRAOptions.slot_sorted``) because decode batches
of interleaved slots ran faster in it, most at decode-bs256.
``PREFETCH`` (fused kernels) loads the first base and weight blocks of the second product before
step A and each next block one iteration ahead: decode is a chain of dependent loads, not bytes.

Note [Flat slot grid]
---------------------
The slot-sorted grid above is ``ceil(S/BT)`` tiles for EACH of the ``L`` slots (grid axis 2 = slots x
output blocks), but slot ``w`` fills only ``ceil(n_w/BT)`` of its tiles: at decode-bs256 with 4 slots,
three quarters of the programs route and exit.  ``FLAT`` (with ``SORTED``) launches only what the real
(slot, tile) pairs can need: grid axis 2 is the output blocks alone, and axis 0 is
``ceil(S/BT) + L - 1``, an upper bound of ``sum_w ceil(n_w/BT)``: each
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
and it launches the flat grid only where that halves the programs (``LoRAOptions.flat_slots_min_saving``,
2: each flat program also counts every slot's rows, which costs more than it saves when few programs go).
The slot count ``n_slots`` travels in ``search_steps``, which only the binary search (``SEG_TILE == 0``,
never flat) reads: a kernel parameter of its own, unused by every other launch, costs the segment-major
fused q kernel 12 registers with ptxas of triton 3.6 (one block per SM fewer, and a slower prefill).

Note [Row search]
-----------------
A slot-sorted tile's lane ``k`` (its ``k``-th row of slot ``w``) lies in the first segment whose
inclusive prefix sum of ``w``'s lengths passes ``k``.  A (BT x SEG_TILE) compare and sum would find it
with 16384 elements at decode-bs256 (BT=64, SEG_TILE=256), 128 per thread, the largest part of a
program's routing.  :func:`._route._first_above` finds it instead by a branch-free binary search over the
prefix sums held in registers, ``log2(SEG_TILE)`` steps of one ``tl.gather`` each (8 at 256), then one
more gather of the segment's start.  The lengths are clamped to >= 0, so the prefix sums are sorted
and the search finds the same segment as the compare would; lanes past the slot's rows are not valid
either way.  Whether a program has any row to serve is read from its first row (``has_rows``, a
scalar) where the route knows it (slot-sorted, flat and segment-major tiles) instead of a reduction
over the tile.

Note [Whole-row prefetch]
-------------------------
``PREFETCH`` keeps one block of the fused q side's second product in flight.  On a 32-row decode tile
the output block loop is four short iterations, each waiting for the loads issued one iteration
before.  ``PREFETCH_ALL`` (q side) issues the first four base blocks and A blocks before step A
(the base blocks alone were slower), unrolled by hand (a Triton loop cannot carry a list of tiles);
columns past four blocks take the plain loop after them.  With one pipelining stage (no cp.async
copies set up for step A's single block) it is the token-major choice for 32-row tiles; 64-row tiles
hold twice the registers per block and keep ``PREFETCH`` (``WIDE`` in :data:`kernels.lora.BLOCKS`).
What remains of a decode program's time is its instruction chain (Nsight Compute): the route, step A,
and per output block a shared-memory round trip for A and another for the product's layout change,
with barriers; not waiting for DRAM.

Note [Rank-wide loads]
----------------------
The rank axis of ``B_buf`` (L, H*FULL_K, R) is its innermost one, so a row of the fused q side's
step-A weight tile is ``R`` contiguous elements.  Masked to the slot's runtime ``rank``, it loads one
element at a time (``LDG.E.U16`` and a byte permute each), on the chain before step A's product.  The
fused q kernel loads it masked to the buffer rank ``R`` instead, which the aligned family receives
divided by ``ALIGN`` (so the compiler knows whole 16-byte vectors), and zeroes step A's result columns
past ``rank`` after the product: each column depends on its own weight column only, and A's rows past
``rank`` load as 0, so values past a slot's rank still never contribute, and the loads stay inside the
buffer.  The same on the v side (its step-B tile's rows zeroed after the load, since a NaN there times a
zero of the intermediate is still NaN) was slower at decode, so the v side keeps the rank mask.

Note [Slot metadata first]
--------------------------
A program needs its slot's rank (whether to work at all) and scaling.  Loaded after the route, they
are one more dependent load round on each program's chain.  ``META_FIRST`` (fused kernels,
token-major) loads them before the route: on a per-slot grid the slot is the grid coordinate; a flat
grid, which learns its slot from the route, loads every slot's (``NSLOT``, those at or past the slot
count read as rank 0) in the route's first load round and selects one after it
(:func:`._route.slot_meta`, :func:`._route.pick_slot`).

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
graph and requires the bits of eight eager calls without PDL.

Note [Early reads]
------------------
Under PDL the wait sits at the top, so each program's route (one load round of metadata), its slot's rank
and scaling, and its first weight blocks all start only when the previous kernel has finished.  None of them
depends on that kernel in a decode step as SGLang runs it: metadata and LoRA weights are written before a
CUDA graph's replay, and the kernels in flight write only activations.  ``EARLY`` (fused kernels,
token-major, with PDL; ``LoRAOptions.early_reads``, off by default) issues them before the
wait and waits just before the first read of an input that a kernel may produce: q / attention rows and the
base output.  The q side loads the four A blocks (``PREFETCH_ALL``) and step A's first weight block early;
the v side step B's first weight block (``PREFETCH``); a kernel without those prefetches waits right after the
route.  Every program waits, also one with no rows, so that our completion still implies the previous
kernel's (a kernel after us may read what that one wrote).  It is an opt-in because it is wrong when the
kernel just before writes the metadata or the weights (``seg_indptr`` from a ``cumsum`` launched just before,
say): the early reads may see them half written, and nothing detects that.  The 16-row q tiles of
``EARLY_BLOCKS`` go with it: on the flat grid their route, the costliest (every slot's rows counted), is
then off the chain (``bench_lora --decode-floor --routes auto --early-reads`` times it).

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
flag.  Pointers do not multiply it: each kernel exists in two families (:func:`._families.two_families`), an
aligned one launched only when ``ALIGN > 1`` and every data pointer is 16-byte aligned, and a generic
one that specializes no pointer on alignment (a misaligned view would otherwise double the variants);
metadata pointers, read one element at a time, never specialize on it.
A few hundred variants in all, which a persistent Triton cache keeps between runs (``--triton-cache``,
:mod:`harness.warmup`).
"""

from __future__ import annotations

from ._fused import q_side_fused_kernel, v_side_fused_kernel
from ._split import step_a_q_kernel, step_a_v_kernel, step_b_q_kernel, step_b_v_kernel

__all__ = ["q_side_fused_kernel", "step_a_q_kernel", "step_a_v_kernel", "step_b_q_kernel", "step_b_v_kernel",
           "v_side_fused_kernel"]
