"""The built-in kernel families' records, registered with the registry of :mod:`kernel_oracle.harness.family`.

A record's parts are imports from every layer (Note [Families registry]), so the records live here, in the
top layer; the package root imports this module, so importing any module of the package registers
``lora`` (:mod:`.lora`), ``vision`` (:mod:`.vision`) and ``csgmv`` (:mod:`.csgmv`), in that order, once.
Read the registry from :mod:`kernel_oracle.harness.family`.  Importing this module loads no torch and no
Hypothesis, so the command line can build its ``--op`` choices from the registry.
"""

from __future__ import annotations

from kernel_oracle.harness.family import family_names, register_family

from .csgmv import CSGMV
from .lora import LORA
from .vision import VISION

__all__ = ["BUILT_IN", "CSGMV", "LORA", "VISION"]

BUILT_IN = (LORA, VISION, CSGMV)

for _record in BUILT_IN:
    if _record.name not in family_names():
        register_family(_record)
