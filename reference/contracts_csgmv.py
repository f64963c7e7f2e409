"""The csgmv rows of the contract table (Note [Contracts] in :mod:`reference.contracts`, which lists them).

Note [csgmv contracts]
----------------------
SGLang's chunked SGMV entry points (``chunked_sgmv_lora_shrink_forward``,
``chunked_sgmv_lora_expand_forward``, every release 0.5.10 - 0.5.23) check little before they launch:

* ``csgmv.assert``: bare ``assert`` statements on ``x`` and ``weights`` (contiguous, 2-D / 3-D,
  ``x.shape[-1] == K`` for the shrink, ``x.shape[1] == num_slices * R`` for the expand): an
  ``AssertionError`` with no text;
* ``csgmv.split_k`` (0.5.22+): the shrink's ``split_k < 1`` raises ``ValueError("split_k must be positive")``.

Everything else in the batch info is read on the device as given: a slot index, a segment bound or a
permutation row outside its tensor reads (and, for the permutation, writes) foreign memory, a segment
longer than ``max_len`` loses its tail rows.  The strict rows (``csgmv.strict.*``, ours) reject those
inputs with a ``ValueError`` naming the field, the index and the value, and the fix.  Their texts start
with ``csgmv`` so that none repeats a lora row's text.
"""

from __future__ import annotations

from kernel_oracle.reference.contract_row import Contract

__all__ = ["CSGMV_ROWS"]

_U, _S = "upstream", "strict"

CSGMV_ROWS = (
    # ---- upstream: the release's own checks, before any launch ----
    Contract("csgmv.assert", AssertionError, "", "csgmv", _U),
    Contract("csgmv.split_k", ValueError, "split_k must be positive", "csgmv", _U),
    # ---- strict: the batch info's tensors and host ints ----
    Contract("csgmv.strict.metadata_tensor", ValueError,
             "csgmv {field} must be {expected}, got {got}; {fix}", "csgmv", _S),
    Contract("csgmv.strict.bad_count", ValueError,
             "csgmv batch_info.{field}={value} is invalid: {why}", "csgmv", _S),
    # ---- strict: segments ----
    Contract("csgmv.strict.seg_indptr_start", ValueError,
             "csgmv batch_info.seg_indptr[0]={value} is negative; segments index logical rows from 0",
             "csgmv", _S),
    Contract("csgmv.strict.seg_indptr_decreasing", ValueError,
             "csgmv batch_info.seg_indptr[{index}]={value} < seg_indptr[{prev_index}]={prev}: segment {prev_index} "
             "would have negative length {length}; pass non-decreasing bounds", "csgmv", _S),
    Contract("csgmv.strict.max_len_too_small", ValueError,
             "a segment has {longest} rows but max_len (the kernels' row tile, BLOCK_M) is {value}: the rows past it "
             "are never computed; cut segments to at most max_len rows, as SGLang's chunking does", "csgmv", _S),
    Contract("csgmv.strict.slot_out_of_range", ValueError,
             "csgmv batch_info.weight_indices[{index}]={value} is outside [0, {slots}) (segment {index}): the "
             "adapter slots that weights, lora_ranks and scalings all hold", "csgmv", _S),
    Contract("csgmv.strict.negative_rank", ValueError,
             "csgmv batch_info.lora_ranks[{index}]={value} is negative; ranks are 0 (slot off) or more",
             "csgmv", _S),
    # ---- strict: the permutation (logical row -> physical row of x) ----
    Contract("csgmv.strict.permutation_length", ValueError,
             "csgmv batch_info.permutation has {got} entries but the segments cover logical rows 0..{last}; pass "
             "one physical row per logical row", "csgmv", _S),
    Contract("csgmv.strict.permutation_range", ValueError,
             "csgmv batch_info.permutation[{index}]={value} is outside [0, {rows}): x has {rows} rows, and the "
             "kernels would read and write row {value} unchecked", "csgmv", _S),
    # ---- strict: the expand's slices ----
    Contract("csgmv.strict.slice_offsets_decreasing", ValueError,
             "csgmv slice_offsets[{index}]={value} < slice_offsets[{prev_index}]={prev}: slice {prev_index} would "
             "have negative width {width}; pass non-decreasing offsets from 0", "csgmv", _S),
    Contract("csgmv.strict.slice_offsets_range", ValueError,
             "csgmv slice_offsets[{index}]={value} is outside [0, {columns}]: weights has {columns} output columns "
             "(OUTPUT_DIM)", "csgmv", _S),
    Contract("csgmv.strict.max_slice_size", ValueError,
             "a slice is {widest} columns wide but max_slice_size={value}: the grid never reaches its last columns; "
             "pass max_slice_size >= {widest}", "csgmv", _S),
    Contract("csgmv.strict.offsets_cpu", ValueError,
             "slice_offsets_cpu={cpu} disagrees with slice_offsets={offsets}; pass the same offsets (the CPU copy is "
             "the layer's metadata)", "csgmv", _S),
)
