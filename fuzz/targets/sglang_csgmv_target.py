"""Target ``sglang-csgmv``: an SGLang release's chunked SGMV LoRA kernels (``csgmv_shrink``, ``csgmv_expand``).

Note [csgmv targets]
--------------------
``sglang-csgmv==X.Y.Z`` loads release X.Y.Z's two csgmv files standalone from its wheel (``--sglang-wheel``,
the cache, then ``pip download``: :func:`~.sglang_wheel.find_wheel`, as ``sglang==X.Y.Z``) with
:func:`~.sglang_csgmv.load_csgmv`; plain ``sglang-csgmv`` loads the installed release's files the same way.
Configuration: ``@split_k=on`` / ``@deterministic=on`` set the release's ``SGLANG_ENABLE_LORA_CSGMV_SPLIT_K``
/ ``SGLANG_ENABLE_DETERMINISTIC_INFERENCE`` (:class:`~.sglang_csgmv.CsgmvConfiguration`).

It is third-party Triton code (:func:`~.adapter.third_party`: no bf16 under the interpreter, TF32 fp32 on
a GPU, no strict validation).  It declines (``Target.declines``, :data:`kernel_oracle.fuzz.strategies_csgmv.
CSGMV_FEATURES`) the keywords its entry points do not take (``split_k``, ``slice_offsets_cpu``: read from
their signatures) and the two known per-release differences (docs/csgmv.md, each asserted exactly by
``oracle_tests/fuzz/test_sglang_csgmv.py``), so a campaign does not report them again as new findings:
before 0.5.14 CUDA-graph replay with stale host ints (SGLang PR #28371), and 0.5.10's expand, which
indexes ``base_output`` as a contiguous block.  Every release declines ``csgmv.unchecked_bounds``: malformed
metadata that makes its kernels address memory outside a tensor (a permutation row at or past
``x.shape[0]`` is written to: heap corruption) is an unchecked precondition, not a defect, and is never sent.
"""

from __future__ import annotations

import inspect

from kernel_oracle.harness.targets import Target, TargetSources, TargetSpec, unavailable

from .adapter import third_party
from .registry import register_target
from .sglang_csgmv import CsgmvConfiguration, load_csgmv
from .sglang_wheel import LoaderError, find_wheel, installed_release, wheel_release

__all__ = ["CONFIGURATION", "csgmv_declines", "csgmv_target", "csgmv_tile_model"]

CONFIGURATION = {"split_k": ("on", "off"), "deterministic": ("on", "off")}
GRAPH_FIX, STRIDE_FIX = "0.5.14", "0.5.11"  # the first releases without each known difference


def _before(version: str, fix: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version) < Version(fix)
    except InvalidVersion:
        return False


def csgmv_declines(version: str, shrink, expand) -> dict:
    """feature -> why, for what ``version``'s entry points ``shrink`` / ``expand`` are given no case of."""
    from kernel_oracle.harness.mutations_csgmv import UNCHECKED_BOUNDS_FEATURE  # torch: not when the mutants are listed

    out = {UNCHECKED_BOUNDS_FEATURE: "an unchecked precondition, not a defect: the kernels read and write the rows "
                                     "the batch info names without bounds checks, so a permutation row at or past "
                                     "x.shape[0] (or a slot, segment bound or count past its tensor) addresses memory "
                                     "outside the tensors (heap corruption); never sent"}
    if "split_k" not in inspect.signature(shrink).parameters:
        out["csgmv.split_k"] = f"sglang {version}'s shrink takes no split_k (0.5.22+)"
    if "slice_offsets_cpu" not in inspect.signature(expand).parameters:
        out["csgmv.slice_offsets_cpu"] = f"sglang {version}'s expand takes no slice_offsets_cpu (0.5.22+)"
    if _before(version, GRAPH_FIX):
        out["csgmv.stale_host_ints"] = (f"known: sglang {version} launches min(bs, num_segments) segments from the "
                                        f"capture-time host ints, so a replayed batch with more segments is partly "
                                        f"undone (fixed in 0.5.14 by SGLang PR #28371; docs/csgmv.md)")
    if _before(version, STRIDE_FIX):
        out["csgmv.output_view"] = (f"known: sglang {version}'s expand indexes base_output as a contiguous "
                                    f"(S, OUTPUT_DIM) block (its strides are constants; docs/csgmv.md)")
    return out


def csgmv_target(spec: TargetSpec, device: str, sources: TargetSources) -> Target:
    """The release's csgmv kernels (Note [csgmv targets]); unavailable with the loader's one-line reason."""
    name = str(spec)
    # off CUDA the release's get_device_name answers "cpu" even on a host with a GPU, so a CPU verdict (and
    # the tuned block config it picks) is the same on every machine, and the tile model's
    config = CsgmvConfiguration(split_k=spec.option("split_k") == "on",
                                deterministic=spec.option("deterministic") == "on",
                                device_name=None if str(device).startswith("cuda") else "cpu")
    try:
        release = (installed_release() if spec.release is None
                   else wheel_release(find_wheel(spec.release, sources.sglang_wheel)))
        kernels = load_csgmv(release, config)
    except LoaderError as exc:
        return unavailable(name, str(exc))
    target = third_party(name, {"csgmv_shrink": kernels.shrink, "csgmv_expand": kernels.expand}, {},
                         triton_code=True, strict=False, precision=None, device=device)
    target.release = kernels.version
    target.declines = csgmv_declines(kernels.version, kernels.shrink, kernels.expand)
    target.tiles = {"csgmv": csgmv_tile_model(release, kernels.paths, device, target.declines, config)}
    return target


def csgmv_tile_model(release, paths: dict, device: str, declines: dict,
                     config: CsgmvConfiguration = CsgmvConfiguration()) -> dict:
    """The tile model of ``release``'s csgmv files on ``device`` (Note [Reading a release's blocks]): the device
    name the release's ``get_device_name`` stand-in answers there (the CUDA device's, else ``"cpu"``) picks the
    tuned tables; the switches are ``config``'s."""
    import torch

    from .sglang_tiles import csgmv_model  # here: the tile models import our kernels, which the mutant table must not

    name = torch.cuda.get_device_name(torch.device(device)) if str(device).startswith("cuda") else "cpu"
    return csgmv_model(release, paths, device_name=config.device_name or name, split_switch=config.split_k,
                       deterministic=config.deterministic, split_kernel="csgmv.split_k" not in declines)


register_target("sglang-csgmv", csgmv_target, configuration=CONFIGURATION)
