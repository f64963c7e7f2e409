"""The csgmv mutants: realistic bugs planted in a patched copy of a release's own csgmv files.

Note [csgmv mutants]
--------------------
We have no csgmv kernels of our own, so a csgmv mutant patches what a csgmv target runs: the two files of
release :data:`MUTANT_RELEASE` (the newest the anchors are written for), read from its wheel (as
``sglang-csgmv==X.Y.Z`` finds it: ``--sglang-wheel``, the cache, ``pip download``).  The patches apply
to the text (:func:`~.mutant_data.apply_patches`; ``Patch.path`` is the file's name,
``chunked_sgmv_shrink.py`` or ``chunked_sgmv_expand.py``), the patched files are written to a temporary
folder, and the release is loaded standalone exactly as its target loads it
(:func:`~.sglang_csgmv.load_csgmv`), with these two files read from that folder: the wheel and its
extracted copy are never touched, and nothing of SGLang is kept in the repository.  The copy is then
an ordinary third-party target (``mutant:<name>``) that declines what the release's own target declines.

Each mutant breaks one op and is searched only in it (``ops``).  The bugs are the kinds a chunked SGMV
kernel has: a segment bound off by one, the permutation ignored, the segment grid sized from the
capture-time host ints again (SGLang PR #28371 undone), the scaling not applied, a slice read at the
wrong offset, the rank mask off, the base overwritten instead of accumulated.  A missing anchor raises
:class:`~.mutant_data.MutantError` naming the mutant, the file and the anchor.
"""

from __future__ import annotations

import atexit
import dataclasses
import posixpath
import shutil
import tempfile
from pathlib import Path

from kernel_oracle.harness.targets import Target, TargetSources, TargetSpec, unavailable

from .adapter import third_party
from .mutant_data import Mutant, MutantError, Patch, apply_patches
from .sglang_csgmv import load_csgmv, locate_csgmv
from .sglang_csgmv_target import csgmv_declines, csgmv_tile_model
from .sglang_wheel import LoaderError, ReleaseFiles, find_wheel, wheel_release

__all__ = ["CSGMV_MUTANTS", "MUTANT_RELEASE", "csgmv_mutant_target", "patched_release"]

MUTANT_RELEASE = "0.5.23"
_S, _E = "chunked_sgmv_shrink.py", "chunked_sgmv_expand.py"
_SHRINK, _EXPAND = ("csgmv_shrink",), ("csgmv_expand",)


def _csgmv(name: str, description: str, patches: tuple, ops: tuple) -> Mutant:
    return Mutant(name, "csgmv", description, patches, ops=ops, source="sglang-csgmv")


# the shrink's first kernel is the one every call without split_k runs (count=1: the split-K kernel after
# it has the same lines)
CSGMV_MUTANTS: tuple[Mutant, ...] = (
    _csgmv("csgmv_shrink_drops_segment_end", "the shrink ends each segment one row early (seg_indptr[b+1] - 1)",
           (Patch(_S, "seg_end = tl.load(seg_indptr + pid_s + 1)", "seg_end = tl.load(seg_indptr + pid_s + 1) - 1",
                  count=1),), _SHRINK),
    _csgmv("csgmv_shrink_ignores_permutation", "the shrink reads and writes rows at their logical index",
           (Patch(_S, "mask=s_offset_logical < seg_end, other=0\n    )",
                  "mask=s_offset_logical < seg_end, other=0\n    ) * 0 + s_offset_logical", count=1),), _SHRINK),
    _csgmv("csgmv_shrink_graph_grid_from_host_ints", "under CUDA graph the shrink launches min(bs, num_segments) "
           "segments from the capture-time host ints (SGLang PR #28371 undone)",
           (Patch(_S, "batch_info.weight_indices.shape[0]\n        if batch_info.use_cuda_graph",
                  "min(batch_info.bs, num_segments)\n        if batch_info.use_cuda_graph"),), _SHRINK),
    _csgmv("csgmv_expand_scaling_missing", "the expand adds the delta without the slot's scaling",
           (Patch(_E, "    partial_sum *= scaling\n", ""),), _EXPAND),
    _csgmv("csgmv_expand_slice_at_max_rank", "the expand reads slice i of the shrink output at i * R, not at "
           "i * rank (the packed layout of a rank-r adapter)",
           (Patch(_E, "+ slice_id * cur_rank * x_stride_1", "+ slice_id * MAX_RANK * x_stride_1"),), _EXPAND),
    _csgmv("csgmv_expand_ignores_rank", "the expand sums over the buffer rank R instead of min(R, lora_ranks[w])",
           (Patch(_E, "cur_rank = tl.minimum(MAX_RANK, cur_rank)", "cur_rank = MAX_RANK + 0 * cur_rank"),), _EXPAND),
    _csgmv("csgmv_expand_overwrites_base", "the expand stores the delta instead of base + delta",
           (Patch(_E, "    partial_sum += tl.load(output_ptr, mask=output_mask, other=0.0)\n", ""),), _EXPAND),
)

_TMP: dict[str, Path] = {}
_BUILT: dict[tuple, object] = {}


def _tmp_root() -> Path:
    if "root" not in _TMP:
        root = Path(tempfile.mkdtemp(prefix="kernel-oracle-csgmv-mutants-"))
        atexit.register(shutil.rmtree, root, True)
        _TMP["root"] = root
    return _TMP["root"]


def patched_release(mutant: Mutant, release: ReleaseFiles) -> ReleaseFiles:
    """``release`` with its two csgmv files replaced by the mutant's patched text (Note [csgmv mutants]):
    a copy whose ``read`` / ``disk`` answer the patched files from a temporary folder and every other
    file as before, under an origin of its own (so its modules load under names of their own)."""
    found = locate_csgmv(release)
    if not found:
        raise MutantError(f"mutant {mutant.name!r}: sglang {release.version} has no csgmv files")
    by_name = {posixpath.basename(p): p for p in found.values()}
    patched = apply_patches(mutant, {name: release.read(path) for name, path in by_name.items()})
    folder = _tmp_root() / mutant.name
    texts, files = {}, {}
    for name, path in by_name.items():
        files[path] = folder / path
        files[path].parent.mkdir(parents=True, exist_ok=True)
        files[path].write_text(patched[name])
        texts[path] = patched[name]

    def read(name: str) -> str:
        return texts[name] if name in texts else release.read(name)

    def disk(name: str) -> Path:
        return files[name] if name in files else release.disk(name)

    return dataclasses.replace(release, origin=f"mutant {mutant.name} of the {release.origin}", read=read,
                               disk=disk, loaded={})


def csgmv_mutant_target(mutant: Mutant, spec: TargetSpec, device: str = "cpu",
                        sources: TargetSources = TargetSources()) -> Target:
    """The target of ``mutant:<name>`` for a csgmv mutant: release :data:`MUTANT_RELEASE`'s csgmv files,
    patched; unavailable with the one-line reason when the wheel or an anchor is missing."""
    name = str(spec)
    key = (mutant.name, sources.sglang_wheel)
    try:
        if key not in _BUILT:
            release = wheel_release(find_wheel(MUTANT_RELEASE, sources.sglang_wheel))
            _BUILT[key] = (load_csgmv(patched_release(mutant, release)), release)
        kernels, release = _BUILT[key]
    except (LoaderError, MutantError) as exc:
        return unavailable(name, str(exc))
    target = third_party(name, {"csgmv_shrink": kernels.shrink, "csgmv_expand": kernels.expand}, {},
                         triton_code=True, strict=False, precision=None, device=device)
    target.release = kernels.version
    target.declines = csgmv_declines(kernels.version, kernels.shrink, kernels.expand)
    target.reason = f"{mutant.description}; {kernels.how}"
    target.tiles = {"csgmv": csgmv_tile_model(release, kernels.paths, device, target.declines)}
    return target
