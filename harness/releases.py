"""The published releases of the upstream packages we test, oldest first: the one table a defect's releases
are read from.

Note [Release table]
--------------------
A defect of the registry names the release it was introduced in and the first release it was fixed in
(Note [Defect registry] in :mod:`kernel_oracle.harness.defects`); the releases it holds in are the table's
from the one up to before the other (:func:`releases_from`), and its known issues match findings on those
releases.  So when SGLang ships a release, its one line here makes every open defect cover it, and a
fixed defect does not.  A release missing from the table is covered by no defect: its findings stay new
until the line is added.

The module imports nothing, so a shell script reads the same table (``scripts/sglang_wheels.sh``
fetches the wheel of every SGLang release listed here).
"""

from __future__ import annotations

__all__ = ["FLASHINFER_RELEASES", "SGLANG_RELEASES", "releases_from"]

# every published SGLang release from 0.5.10 on (the csgmv kernels exist in all of them: docs/csgmv.md)
SGLANG_RELEASES = ("0.5.10", "0.5.11", "0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1", "0.5.14", "0.5.15",
                   "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")
# the FlashInfer releases whose cuDNN prefill the suite has measured (docs/flashinfer_cudnn.md)
FLASHINFER_RELEASES = ("0.6.18",)


def releases_from(table: tuple[str, ...], introduced: str, fixed: str = "") -> tuple[str, ...]:
    """The releases of ``table`` from ``introduced`` up to before ``fixed`` ("" : to the newest).

    Raises ValueError naming the release that is not in the table, or a ``fixed`` not after ``introduced``."""
    for name, release in (("introduced", introduced), ("fixed", fixed)):
        if release and release not in table:
            raise ValueError(f"{name}={release!r} is not in the release table ({', '.join(table)}); "
                             f"add the release to harness/releases.py")
    first, end = table.index(introduced), table.index(fixed) if fixed else len(table)
    if end <= first:
        raise ValueError(f"fixed={fixed!r} must be a release after introduced={introduced!r}")
    return table[first:end]
