"""The registered kernel families: the registry of :mod:`.family` with the built-in records loaded.

Import the registry from here (Note [Families registry] in :mod:`.family`): importing this module
registers ``lora`` (:mod:`.family_lora`), ``vision`` (:mod:`.family_vision`) and ``csgmv``
(:mod:`.family_csgmv`), in that order, once.
It loads no torch and no Hypothesis, so the command line can build its ``--op`` choices from it.
"""

from __future__ import annotations

from kernel_oracle.harness.family import (FAMILY_OF, FAMILY_OPS, Family, FamilyError, campaign_ops,
                                          default_family_names, families, family_names, get_family, op_choices,
                                          op_groups, op_text, register_family, unregister_family)
from kernel_oracle.harness.family_csgmv import CSGMV
from kernel_oracle.harness.family_lora import LORA
from kernel_oracle.harness.family_vision import VISION

__all__ = ["FAMILY_OF", "FAMILY_OPS", "Family", "FamilyError", "campaign_ops", "default_family_names", "families",
           "family_names", "get_family", "op_choices", "op_groups", "op_text", "register_family", "unregister_family"]

for _record in (LORA, VISION, CSGMV):
    if _record.name not in family_names():
        register_family(_record)
