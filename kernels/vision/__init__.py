"""Varlen vision attention with SGLang's ``flashinfer_cudnn`` contract, on our own Triton kernel.

Entry points have the reference's names and signatures (:mod:`reference.vision`); the metadata
type and builder are the reference's own (one shared implementation), and the contract is applied
by the reference's resolver.  How a launch runs (head-dim split, exact fp32 level, folded scale, direct
launches, NaN-filled outputs for tests) is chosen with :mod:`kernel_oracle.kernels.options` (``with
options(vision={...}):``); a benchmark passes its block config as ``config=``.  Design notes:
docs/kernels_vision.md.
"""

from .attention import (
    FP32_PRECISIONS,
    VisionAttentionMetadata,
    VisionLaunch,
    clear_launch_cache,
    flashinfer_cudnn_attention,
    launch_cache_info,
    plan_attention,
    prepare_flashinfer_cudnn_metadata,
)
from ._direct import direct_launch_info
from ._config import INTERPRETER_CONFIG, KernelConfig, default_config, head_dim_split

__all__ = [
    "FP32_PRECISIONS",
    "INTERPRETER_CONFIG",
    "KernelConfig",
    "VisionAttentionMetadata",
    "VisionLaunch",
    "clear_launch_cache",
    "default_config",
    "direct_launch_info",
    "flashinfer_cudnn_attention",
    "head_dim_split",
    "launch_cache_info",
    "plan_attention",
    "prepare_flashinfer_cudnn_metadata",
]
