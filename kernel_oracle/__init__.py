"""kernel-oracle: differential testing of SGLang's kv_b LoRA and vision-attention kernels.

The installed packages all live under this one name: :mod:`kernel_oracle.reference` (float64
oracles, contracts, tolerance), :mod:`kernel_oracle.kernels` (our Triton kernels),
:mod:`kernel_oracle.harness` (op descriptions, problems, checking a case), :mod:`kernel_oracle.fuzz`
(targets, strategies, campaigns), :mod:`kernel_oracle.reports` (rendering, comparison) and the
command line in this package.  Importing ``kernel_oracle`` itself is light: nothing heavier than the
standard library runs until a name below is used.
"""

from __future__ import annotations

from ._version import __version__

__all__ = ["__version__"]
