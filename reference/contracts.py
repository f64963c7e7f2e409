"""The error-contract table: every error the suite's APIs raise, in one place.

Note [Contracts]
----------------
Kernel engineers compare error *text*, so a message must never be written twice: code raises
through :func:`raise_contract` and tests assert through :func:`expected_message`, both reading the
same :data:`CONTRACTS` entry.  Each entry says

* ``origin``: ``"upstream"`` (SGLang's exact text and type; never edited) or ``"strict"`` (our own
  validation, only for inputs that upstream would silently accept: see docs/semantics.md#strict-validation);
* ``api``: which entry points raise it (``"lora"`` = every kv_b LoRA step, ``"vision"`` = the
  ``flashinfer_cudnn`` forward, ``"csgmv"`` = the chunked SGMV shrink and expand, whose rows live in
  :mod:`reference.contracts_csgmv` and join the table here);
* ``order``: for upstream vision contracts, the position in SGLang's resolution order.

Strict messages name the field, the offending index and value, and suggest the fix (Hypothesis /
pytest-benchmark style: "pass X rather than Y").
"""

from __future__ import annotations

from typing import Mapping

from kernel_oracle.reference.contract_row import Contract, ContractError
from kernel_oracle.reference.contracts_csgmv import CSGMV_ROWS

__all__ = [
    "Contract",
    "CONTRACTS",
    "ContractError",
    "contract",
    "expected_message",
    "raise_contract",
    "upstream_contracts",
    "strict_contracts",
]


def _table(*rows: Contract) -> Mapping[str, Contract]:
    table: dict[str, Contract] = {}
    for row in rows:
        if row.id in table:
            raise ContractError(f"duplicate contract id {row.id!r}")
        table[row.id] = row
    return table


_U, _S = "upstream", "strict"

CONTRACTS: Mapping[str, Contract] = _table(
    # ---- upstream: SGLang kv_b LoRA steps (every step, before any launch) ----
    Contract("lora.missing_max_len", ValueError,
             "LoRA batch_info must provide max_len or seg_lens.", "lora", _U),
    # ---- upstream: SGLang VisionFlashInferAttention.forward, in resolution order ----
    Contract("vision.missing_sequence_lengths", RuntimeError,
             "sequence_lengths should be prepared for vision flashinfer_cudnn attention backend",
             "vision", _U, order=2),
    Contract("vision.missing_max_seqlen", RuntimeError,
             "max_seqlen should be prepared for vision flashinfer_cudnn attention backend",
             "vision", _U, order=3),
    Contract("vision.indptrs_not_tensor", RuntimeError,
             "flashinfer_cudnn expects packed indptrs as a torch.Tensor", "vision", _U, order=5),
    Contract("vision.sequence_lengths_not_tensor", RuntimeError,
             "sequence_lengths must be a torch.Tensor", "vision", _U, order=6),
    Contract("vision.indptr_numel_mismatch", RuntimeError,
             "packed indptr numel mismatch: got {got}, expected {expected} (= 3*(B+1))",
             "vision", _U, order=7),
    Contract("vision.offset_out_of_bounds", RuntimeError,
             "offset + len out of bounds; packed indptr is wrong", "vision", _U, order=8),
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
    # (data arguments: "LoRA argument" keeps these texts apart from the vision rows below)
    Contract("lora.strict.shape_mismatch", ValueError,
             "LoRA argument {field} has shape {got}, expected {expected}; {why}", "lora", _S),
    Contract("lora.strict.tensor_attr", ValueError,
             "LoRA argument {field} must be {expected}, got {got}; {fix}", "lora", _S),
    # ---- strict: vision metadata ----
    Contract("vision.strict.metadata_tensor", ValueError,
             "{field} must be {expected}, got {got}; {fix}", "vision", _S),
    Contract("vision.strict.negative_length", ValueError,
             "sequence_lengths[{index}]={value} is negative; lengths are 0 (padding) or more",
             "vision", _S),
    Contract("vision.strict.max_seqlen_too_small", ValueError,
             "max_seqlen={value} is smaller than the longest sequence (sequence {index} has {longest} "
             "tokens); tokens past max_seqlen would be silently dropped; pass max_seqlen >= {longest}",
             "vision", _S),
    Contract("vision.strict.misaligned_offset", ValueError,
             "{field}[{index}]={value} is not a multiple of {tensor}'s token stride {stride}; "
             "element offsets are token offsets times the token stride", "vision", _S),
    Contract("vision.strict.offset_range", ValueError,
             "{field}[{index}]={value}: sequence {index} ({length} tokens from token {start}) runs past "
             "the {tokens} tokens of {tensor}", "vision", _S),
    Contract("vision.strict.output_overlap", ValueError,
             "o_indptr: output of sequence {index} (tokens {start}..{end}) overlaps sequence {other} "
             "(tokens {other_start}..{other_end}); outputs of distinct sequences must not overlap",
             "vision", _S),
    Contract("vision.strict.shape_mismatch", ValueError,
             "{field} has shape {got}, expected {expected}; {why}", "vision", _S),
    Contract("vision.strict.operand_layout", ValueError,
             "{field} is a {got}: {why}; pass {field}.contiguous()", "vision", _S),
    # grouped-query attention (docs/semantics.md#vision-attention): H_kv key/value heads, H % H_kv == 0
    Contract("vision.strict.kv_heads", ValueError,
             "k has {got} heads, which do not divide q's {heads}; grouped-query attention needs H % H_kv == 0 "
             "(query head h attends key/value head h // (H // H_kv)): pass k and v with a divisor of {heads} heads",
             "vision", _S),
    Contract("vision.strict.kv_heads_match", ValueError,
             "v has {got} heads but k has {kv}; keys and values share their heads (key/value head j is k[:, j] "
             "with v[:, j]): pass v with {kv} heads", "vision", _S),
    # the arguments of SGLang's VisionAttention.forward beyond the flashinfer_cudnn metadata
    Contract("vision.strict.window_size", ValueError,
             "window_size={got} is invalid: {why}; pass (left, right), two ints, -1 for no limit on that side "
             "(FlashAttention's convention), e.g. (-1, -1) for full attention", "vision", _S),
    Contract("vision.strict.unsupported_argument", ValueError,
             "{field}={got} is not supported: {why}", "vision", _S),
    # ---- csgmv: upstream and strict rows (reference/contracts_csgmv.py) ----
    *CSGMV_ROWS,
)


def contract(contract_id: str) -> Contract:
    try:
        return CONTRACTS[contract_id]
    except KeyError:
        raise ContractError(
            f"unknown contract id {contract_id!r}; the only valid ids are {sorted(CONTRACTS)}"
        ) from None


def expected_message(contract_id: str, **fields: object) -> str:
    """The exact text that :func:`raise_contract` produces for these fields."""
    return contract(contract_id).message(**fields)


def raise_contract(contract_id: str, **fields: object) -> None:
    """Raise the contract's exception type with its exact message. Never returns."""
    row = contract(contract_id)
    err = row.exc_type(row.message(**fields))
    err.contract_id = contract_id  # type: ignore[attr-defined]
    raise err


def upstream_contracts(api: str | None = None) -> list[Contract]:
    return [c for c in CONTRACTS.values() if c.origin == "upstream" and (api is None or c.api == api)]


def strict_contracts(api: str | None = None) -> list[Contract]:
    return [c for c in CONTRACTS.values() if c.origin == "strict" and (api is None or c.api == api)]
