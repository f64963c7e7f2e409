"""Target ``triton``: our Triton kernels (:mod:`kernel_oracle.kernels.lora`, ``.vision``).

The same builder serves the mutants (:mod:`.mutants`): a patched copy of the kernels package is an
ordinary kernels package under another name.

Note [Precision of our kernels]
-------------------------------
Declared per entry point (``Target.precision_for``), from what the kernels do on each device:

* LoRA (``kernels/lora/_launch.py`` ``_flags``): on a CUDA GPU, fp32 activations with fp32 weights
  run ``tl.dot(..., input_precision="tf32")`` on operands the kernel first rounds to TF32 to
  nearest (``kernels.interpreter.round_tf32``), so the tensor cores' truncation leaves them as they
  are: TF32 with round-to-nearest operands and fp32 accumulation.  Declared ``"tf32"`` (the
  baseline takes the worse of round-to-nearest and truncation; ``"tf32-rne"`` would be the exact
  model).  fp32 activations with weights of another dtype upcast every tile and run exact fp32
  products ("ieee"), which the TF32 baseline also admits.  Under the interpreter every tile is
  upcast and ``tl.dot`` is exact fp32: ``"ieee"``.
* vision: exact fp32 products (``fp32_precision="ieee"``, the kernel's default) unless the target
  is built with ``kernels_target(..., vision_fp32="tf32")`` (then the entry point passes
  ``fp32_precision="tf32"`` and the target declares ``"tf32"``; the interpreter stays exact).

The poison hook (fresh vision outputs allocated full of NaN) applies
``LaunchOptions.poison_outputs`` through the options module of the kernels package the target
loaded: a mutant's copy of the package has its own ``options`` module, whose context variable its
kernels read.

fp16/bf16 cases ignore the precision (the oracle's baseline is the activation dtype).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from typing import Optional

from kernel_oracle.harness.device import interpreting
from kernel_oracle.harness.family import FAMILY_OPS
from kernel_oracle.harness.targets import Target, TargetSources, TargetSpec, unavailable

from .adapter import entries_from, import_module
from .registry import register_target

KERNELS_PACKAGE = "kernel_oracle.kernels"
# fp32 precisions of the vision entry point (kernels.vision.FP32_PRECISIONS)
VISION_FP32 = ("ieee", "tf32")


def kernels_precision(device, vision: str = "ieee") -> dict:
    """op -> fp32 precision of our kernels on ``device`` (Note [Precision of our kernels])."""
    compiled_gpu = str(device).startswith("cuda") and not interpreting()
    prec = {op: ("tf32" if compiled_gpu else "ieee") for op in FAMILY_OPS["lora"]}
    prec.update({op: (vision if compiled_gpu else "ieee") for op in FAMILY_OPS["vision"]})
    return prec


def kernels_target(device, package: str = KERNELS_PACKAGE, name: str = "triton",
                   precision: Optional[str | dict] = None, vision_fp32: str = "ieee") -> Target:
    """The target of the kernels package ``package`` (ours, or a mutant's copy); ``precision``
    overrides the declared one (a mutant that emulates the tensor cores' TF32 on the interpreter);
    ``vision_fp32``: the vision entry point's ``fp32_precision`` (Note [Precision of our kernels])."""
    if vision_fp32 not in VISION_FP32:
        raise ValueError(f"vision_fp32={vision_fp32!r} is invalid; the only valid values are "
                         + ", ".join(repr(v) for v in VISION_FP32))
    notes: dict = {}
    entries: dict = {}
    poison = None
    lora, why_l = import_module(f"{package}.lora")
    if lora is not None:
        entries.update(entries_from(lora, FAMILY_OPS["lora"], notes))
    else:
        notes.update({op: why_l for op in FAMILY_OPS["lora"]})
    vision, why_v = import_module(f"{package}.vision")
    if vision is not None:
        entries.update(entries_from(vision, FAMILY_OPS["vision"], notes))
        if vision_fp32 != "ieee":
            for op in FAMILY_OPS["vision"]:
                if op in entries:
                    entries[op] = functools.partial(entries[op], fp32_precision=vision_fp32)
        launch_options, _ = import_module(f"{package}.options")  # the package's own (a mutant's copy has one)
        if launch_options is not None:
            poison = (lambda family: launch_options.options(poison_outputs=True) if family == "vision"
                      else contextlib.nullcontext())
    else:
        notes["vision"] = why_v
    if not entries:
        return unavailable(name, "; ".join(sorted(set(notes.values()))), notes=notes)
    if precision is None:
        precision = kernels_precision(device, vision_fp32)
    return Target(name, entries, precision=precision, strict=True, poison=poison, notes=notes,
                  tiles=kernels_tiles(device))


def kernels_tiles(device) -> dict:
    """family -> the tile model of our kernels on ``device`` (Note [Tile models] in harness.tiles)."""
    import torch

    compiled_gpu = str(device).startswith("cuda") and not interpreting()
    tma = compiled_gpu and torch.cuda.get_device_capability(torch.device(device))[0] >= 9
    from kernel_oracle.harness.tiles_lora import ours_lora_model  # here: they import our kernels (and torch)
    from kernel_oracle.harness.tiles_vision import ours_vision_model

    return {"lora": ours_lora_model(), "vision": ours_vision_model(interpreted=not compiled_gpu, tma=tma)}


# the configuration ``triton@vision_fp32=ieee|tf32,lora_early_reads=on|off,vision_kernel=triton|gluon`` (Note
# [Precision of our kernels]; Note [Early reads] in kernels.lora._kernels; Note [Gluon Hopper kernel] in
# kernels.vision._gluon: the Hopper kernel where it runs, the Triton kernel elsewhere)
VISION_FP32 = ("ieee", "tf32")
ON_OFF = ("on", "off")
VISION_KERNELS = ("triton", "gluon")


def _with_options(fn, package: str, changes: dict):
    """``fn`` run inside ``options(**changes)`` of ``package``'s own options module (a mutant's copy has its
    own); ``launch_options`` names what it applies, for records and tests."""
    options = importlib.import_module(f"{package}.options").options

    @functools.wraps(fn)
    def call(*args, **kwargs):
        with options(**changes):
            return fn(*args, **kwargs)

    call.launch_options = changes
    return call


def triton_target(spec: TargetSpec, device: str, sources: TargetSources) -> Target:
    """``triton[@vision_fp32=ieee|tf32,lora_early_reads=on|off,vision_kernel=triton|gluon]``: our kernels, as
    configured."""
    vision_fp32 = spec.option("vision_fp32")
    t = kernels_target(device, name=str(spec), **({} if vision_fp32 is None else {"vision_fp32": vision_fp32}))
    for family, changes in (("lora", {"lora": {"early_reads": True}} if spec.option("lora_early_reads") == "on"
                             else None),
                            ("vision", {"vision": {"kernel": spec.option("vision_kernel")}}
                             if spec.option("vision_kernel") not in (None, "triton") else None)):
        if changes:
            t.entries = {op: (_with_options(fn, KERNELS_PACKAGE, changes) if op in FAMILY_OPS[family] else fn)
                         for op, fn in t.entries.items()}
    if spec.option("lora_early_reads") == "on":  # the early-read blocks (Note [Tile models] in harness.tiles)
        t.tiles["lora"] = {"model": "ours", "early_reads": True}
    if spec.option("vision_kernel") not in (None, "triton"):
        from kernel_oracle.harness.tiles import unknown_model

        t.tiles["vision"] = unknown_model("the Gluon Hopper kernel's blocks are not modelled (its 128-row query "
                                          "blocks where it runs, the Triton kernel's elsewhere)")
    return t


register_target("triton", triton_target, configuration={"vision_fp32": VISION_FP32, "lora_early_reads": ON_OFF,
                                                        "vision_kernel": VISION_KERNELS})
