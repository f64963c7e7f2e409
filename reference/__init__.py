"""Pure-torch oracles for SGLang's kv_b LoRA steps and ``flashinfer_cudnn`` vision attention.

* :mod:`reference.lora` - the six LoRA steps (SGLang signatures) and their float64/faithful oracles
* :mod:`reference.vision` - the vision attention forward and its oracle
* :mod:`reference.csgmv` - the chunked SGMV shrink/expand oracle of SGLang's csgmv backend (docs/csgmv.md)
* :mod:`reference.contracts` - the one table of every error the suite raises
* :mod:`reference.batch_info`, :mod:`reference.vision_metadata` - metadata types and builders
* :mod:`reference.lora_routing` - segment routing and strict validation shared with the kernels
* :mod:`reference.strict` - the strict-validation switch
* :mod:`reference.grouped_route`, :mod:`reference.grouped_lora` - the aligned-route contract and float64
  references of SGLang's grouped LoRA primitives (``build_route``, ``grouped_lora_a`` / ``_b``, 0.5.23+)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers and IDEs; at run time __getattr__ below loads them
    from kernel_oracle.reference.batch_info import LoRABatchInfo, make_lora_batch_info
    from kernel_oracle.reference.contracts import CONTRACTS, Contract, expected_message, raise_contract
    from kernel_oracle.reference.lora import LORA_OPS, OracleResult
    from kernel_oracle.reference.strict import is_strict, strict_validation
    from kernel_oracle.reference.vision_metadata import VisionAttentionMetadata, prepare_flashinfer_cudnn_metadata

__all__ = [
    "CONTRACTS",
    "Contract",
    "LORA_OPS",
    "LoRABatchInfo",
    "OracleResult",
    "VisionAttentionMetadata",
    "expected_message",
    "is_strict",
    "make_lora_batch_info",
    "prepare_flashinfer_cudnn_metadata",
    "raise_contract",
    "strict_validation",
]

# name -> its module: loaded on first use (PEP 562), so a module of this package that needs no torch
# (the signature table the command line reads) imports without it
_LAZY = {"LoRABatchInfo": "batch_info", "make_lora_batch_info": "batch_info", "CONTRACTS": "contracts",
         "Contract": "contracts", "expected_message": "contracts", "raise_contract": "contracts", "LORA_OPS": "lora",
         "OracleResult": "lora", "is_strict": "strict", "strict_validation": "strict",
         "VisionAttentionMetadata": "vision_metadata", "prepare_flashinfer_cudnn_metadata": "vision_metadata"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value  # load once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
