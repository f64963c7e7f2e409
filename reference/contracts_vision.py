"""The vision attention rows of the contract table (Note [Contracts] in :mod:`reference.contracts`), which the
``vision`` family's record registers (Note [Reference tables] in :mod:`reference.registry`)."""

from __future__ import annotations

from kernel_oracle.reference.contract_row import Contract

__all__ = ["VISION_ROWS"]

_U, _S = "upstream", "strict"

VISION_ROWS = (
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
)
