"""What an ``sglang-csgmv==X.Y.Z@...`` target runs, as one string: the release matrix's column identity and
the campaign's code hash.

Note [csgmv run identity]
-------------------------
A csgmv target runs a release's two csgmv files, its tuning-config file and the tuned block configs beside
it (:func:`~.sglang_csgmv.csgmv_slim_files`), under a configuration (:class:`~.sglang_csgmv.
CsgmvConfiguration`).  :func:`csgmv_run_identity` is that, as one string: the syntax-tree identity of the
files (:func:`~.sglang_csgmv.csgmv_identity`: a release that only moved them is the same code), a hash of
the block configs' names and bytes, and each switch the files read with the value the configuration gives
it (``SGLANG_ENABLE_LORA_CSGMV_SPLIT_K=1``).  A switch the files do not read is left out, so
``@split_k=on`` on 0.5.10 - 0.5.21, which read none, runs the same code as no configuration (the matrix
tests it once), while on 0.5.22+ each configuration is code of its own: a column, a campaign and a
resume identity (:func:`csgmv_code_hash`) of its own.  :func:`csgmv_configuration_applies` says whether a
configuration sets only switches the release reads: ``kernel-oracle matrix --configurations all`` adds a
configuration column only to the releases where it does.
"""

from __future__ import annotations

import hashlib
import posixpath

from kernel_oracle.harness.targets import TargetSpec

from .sglang_csgmv import SWITCHES, CsgmvConfiguration, csgmv_identity, csgmv_slim_files, locate_csgmv
from .sglang_switches import switches_read
from .sglang_wheel import ReleaseFiles

__all__ = ["csgmv_code_hash", "csgmv_configuration", "csgmv_configuration_applies", "csgmv_run_identity",
           "csgmv_switch_keys"]


def csgmv_configuration(spec: TargetSpec) -> CsgmvConfiguration:
    """The configuration of an ``sglang-csgmv`` spec (``@split_k=on``, ``@deterministic=on``)."""
    return CsgmvConfiguration(split_k=spec.option("split_k") == "on", deterministic=spec.option("deterministic") == "on")


def csgmv_switch_keys(release: ReleaseFiles) -> tuple[str, ...]:
    """The configuration keys whose switches ``release``'s csgmv files read (``("split_k", "deterministic")``
    from 0.5.22, none before), in :data:`~.sglang_csgmv.SWITCHES` order."""
    reads = set().union(*(switches_read(release.read(p)) for p in locate_csgmv(release).values()))
    return tuple(key for key, name in SWITCHES.items() if f"envs.{name}" in reads)


def _configs_hash(release: ReleaseFiles) -> str:
    """The tuned block configs by file name and bytes (the folder aside: a moved folder is the same configs)."""
    h = hashlib.sha256()
    for name in sorted((n for n in csgmv_slim_files(release) if n.endswith(".json")), key=posixpath.basename):
        h.update(posixpath.basename(name).encode() + b"\0" + release.read(name).encode() + b"\0")
    return h.hexdigest()[:16]


def csgmv_run_identity(release: ReleaseFiles, config: CsgmvConfiguration) -> str:
    """The code a csgmv target of ``release`` under ``config`` runs (Note [csgmv run identity]); raises
    :class:`~.sglang_wheel.LoaderError` for a release without the csgmv files."""
    values = ",".join(f"{SWITCHES[k]}={int(getattr(config, k))}" for k in csgmv_switch_keys(release))
    return f"csgmv {csgmv_identity(release)} configs {_configs_hash(release)} {values}".rstrip()


def csgmv_code_hash(release: ReleaseFiles, config: CsgmvConfiguration) -> str:
    """The campaign's code hash of that target (``csgmv:`` and 16 hex digits of :func:`csgmv_run_identity`)."""
    return "csgmv:" + hashlib.sha256(csgmv_run_identity(release, config).encode()).hexdigest()[:16]


def csgmv_configuration_applies(release: ReleaseFiles, spec: TargetSpec) -> bool:
    """Whether every configuration key of ``spec`` sets a switch ``release``'s csgmv files read (True for
    no configuration)."""
    keys = {k for k, _ in spec.configuration}
    return keys <= set(csgmv_switch_keys(release))
