"""The kv_b LoRA rows of the contract table (Note [Contracts] in :mod:`reference.contracts`), which the
``lora`` family's record registers (Note [Reference tables] in :mod:`reference.registry`)."""

from __future__ import annotations

from kernel_oracle.reference.contract_row import Contract

__all__ = ["LORA_ROWS"]

_U, _S = "upstream", "strict"

LORA_ROWS = (
    # ---- upstream: SGLang kv_b LoRA steps (every step, before any launch) ----
    Contract("lora.missing_max_len", ValueError,
             "LoRA batch_info must provide max_len or seg_lens.", "lora", _U),
    # ---- strict: LoRA batch info (our validation; upstream would accept these silently) ----
    Contract("lora.strict.bad_count", ValueError,
             "batch_info.{field}={value} is invalid: {why}", "lora", _S),
    Contract("lora.strict.metadata_tensor", ValueError,
             "batch_info.{field} must be {expected}, got {got}; {fix}", "lora", _S),
    Contract("lora.strict.seg_indptr_start", ValueError,
             "batch_info.seg_indptr[0]={value} must be 0 or more; segments index rows from 0",
             "lora", _S),
    Contract("lora.strict.seg_indptr_decreasing", ValueError,
             "batch_info.seg_indptr is not non-decreasing: seg_indptr[{index}]={value} < "
             "seg_indptr[{prev_index}]={prev}; segment {prev_index} would have negative length {length}",
             "lora", _S),
    Contract("lora.strict.seg_indptr_range", ValueError,
             "batch_info.seg_indptr[{index}]={value} exceeds the {rows} rows available ({what}); "
             "pass seg_indptr that ends at most at {rows}", "lora", _S),
    Contract("lora.strict.seg_lens_mismatch", ValueError,
             "batch_info.seg_lens[{index}]={value} is shorter than segment {index} "
             "(seg_indptr[{next_index}]-seg_indptr[{index}]={expected}) while max_len is None, so the tile count "
             "max(seg_lens)={longest} would drop its rows; pass max_len, or seg_lens that cover every segment",
             "lora", _S),
    Contract("lora.strict.max_len_too_small", ValueError,
             "batch_info.max_len={value} is smaller than the longest segment (segment {index} has "
             "{longest} rows); rows past max_len would be silently dropped; pass max_len >= {longest}",
             "lora", _S),
    Contract("lora.strict.slot_out_of_range", ValueError,
             "batch_info.weight_indices[{index}]={value} is outside [0, {num_slots}) "
             "(segment {index}); the only valid slots are 0..{last}", "lora", _S),
    Contract("lora.strict.negative_rank", ValueError,
             "batch_info.lora_ranks[{index}]={value} is negative; ranks are 0 (slot off) or more",
             "lora", _S),
    Contract("lora.strict.permutation_range", ValueError,
             "batch_info.permutation[{index}]={value} is outside [0, {rows}); a permutation entry "
             "names a physical row of the input", "lora", _S),
    Contract("lora.strict.permutation_duplicate", ValueError,
             "batch_info.permutation[{index}]={value} repeats row {value} (first at permutation[{first}]); "
             "permutation must be a permutation of the rows", "lora", _S),
    # (data arguments: "LoRA argument" keeps these texts apart from the vision rows)
    Contract("lora.strict.shape_mismatch", ValueError,
             "LoRA argument {field} has shape {got}, expected {expected}; {why}", "lora", _S),
    Contract("lora.strict.tensor_attr", ValueError,
             "LoRA argument {field} must be {expected}, got {got}; {fix}", "lora", _S),
)
