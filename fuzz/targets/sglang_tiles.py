"""The blocks of an SGLang release's kernels, read from the release itself (Note [Tile models] in
:mod:`kernel_oracle.harness.tiles`).

Note [Reading a release's blocks]
---------------------------------
Nothing here is hard-coded per release: each reader takes the blocks from the code the target runs.

* kv_b files (both variants): each ``step_*_fwd`` launches its kernel as ``_step_*_kernel[grid](...,
  BLOCK_S=..., BLOCK_N=..., BLOCK_K=...)``; :func:`kv_b_model` reads those keywords from the file's syntax tree,
  resolving a name through the function's own constants, then the module's (``_STEP_A_BLOCK_K = 64``).  A block
  computed at run time (the TRT-LLM-style step A's ``triton.next_power_of_2(rank)``) is one block sized to its
  extent (0).  What each keyword tiles is the table at the top of the files (step A: K the head dim or
  ``kv_lora_rank``, N the rank; step B: K the rank, N ``kv_lora_rank`` or ``v_head_dim``; ``BLOCK_S`` a segment's
  rows).  The fused sides of the two-stream correction run step A then step B: both steps' blocks.  Where the
  cuBLAS switches send a one-slot batch to ``torch.bmm`` the Triton blocks do not apply; the model does not
  follow that path.
* the ``triton_v2`` path: the release's own ``_mla_plan(phase)`` (``mla_correction.py``) for decode and prefill:
  its ``block_size`` (rows of one slot and head), ``a_tiles`` (the shrink: ``BLOCK_SIZE_N`` over the rank,
  ``BLOCK_SIZE_K`` over the input, ``SPLIT_K``) and ``b_tiles`` (the expand: ``BLOCK_SIZE_N`` over the output,
  ``BLOCK_SIZE_K`` over the rank).
* csgmv: the fixed blocks of 0.5.10's launch code, else the ``DEFAULT_SHRINK_CONFIG`` / ``DEFAULT_EXPAND_CONFIG``
  of the release's ``lora_tuning_config.py`` and every tuned table under its ``csgmv_configs/`` (names parsed as
  the release writes them: ``lora_{kernel},K={K},R={R},S={S},device={device}.json``), with the device name the
  release's ``get_device_name`` answers and whether its shrink has the split-K kernel
  (Note [csgmv tile model] in :mod:`kernel_oracle.harness.tiles_csgmv`).
"""

from __future__ import annotations

import ast
import json
import re
from typing import Optional

from kernel_oracle.harness.tiles import unknown_model

__all__ = ["CSGMV_TUNED_NAME", "csgmv_model", "kv_b_model", "v2_model"]

# op -> launch keyword -> the dimension it tiles (the K / N table of SGLang's kv_b files)
_KV_B_ROLES = {
    "step_a_q": {"BLOCK_S": "rows", "BLOCK_K": "K=qk", "BLOCK_N": "N=R"},
    "step_b_q": {"BLOCK_S": "rows", "BLOCK_K": "K=R", "BLOCK_N": "N=C"},
    "step_a_v": {"BLOCK_S": "rows", "BLOCK_K": "K=C", "BLOCK_N": "N=R"},
    "step_b_v": {"BLOCK_S": "rows", "BLOCK_K": "K=R", "BLOCK_N": "N=vd"},
}
_FUSED = {"q_side_fused": ("step_a_q", "step_b_q"), "v_side_fused": ("step_a_v", "step_b_v")}
CSGMV_TUNED_NAME = re.compile(r"lora_(shrink|expand),K=(\d+),R=(\d+),S=(\d+),device=(.+)\.json")


def _int_constants(statements) -> dict:
    out = {}
    for node in statements:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and type(node.value.value) is int:
            out.update({t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)})
    return out


def _launch(fn: ast.FunctionDef) -> Optional[ast.Call]:
    """The ``kernel[grid](...)`` call of an entry function."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) \
                and isinstance(node.func.value, ast.Name) and node.func.value.id.endswith("_kernel"):
            return node
    return None


def kv_b_model(source: str, fused: bool = False) -> dict:
    """The ``blocks`` model of a kv_b file's source (Note [Reading a release's blocks]); ``fused``: the target
    also runs the two-stream fused sides."""
    tree = ast.parse(source)
    module = _int_constants(tree.body)
    ops: dict = {}
    for fn in tree.body:
        op = fn.name[:-len("_fwd")] if isinstance(fn, ast.FunctionDef) and fn.name.endswith("_fwd") else None
        launch = _launch(fn) if op in _KV_B_ROLES else None
        if launch is None:
            continue
        local = _int_constants(n for n in ast.walk(fn) if isinstance(n, ast.Assign))
        blocks = {}
        for kw in launch.keywords:
            if kw.arg not in _KV_B_ROLES[op]:
                continue
            value = kw.value
            if isinstance(value, ast.Constant) and type(value.value) is int:
                block = value.value
            elif isinstance(value, ast.Name):
                block = local.get(value.id, module.get(value.id, 0))
            else:
                block = 0
            blocks[_KV_B_ROLES[op][kw.arg]] = block
        ops[op] = blocks
    if not ops:
        return unknown_model("no step_*_fwd launch with BLOCK_* keywords found in the kv_b file")
    if fused:
        ops.update({f: {**ops.get(a, {}), **ops.get(b, {})} for f, (a, b) in _FUSED.items()})
    return {"model": "blocks", "rows": "segment", "ops": ops}


def _v2_ops(plan) -> dict:
    a, b = plan.a_tiles, plan.b_tiles
    rows = int(plan.block_size)
    shrink = {"rows": rows, "N=R": int(a["BLOCK_SIZE_N"])}
    split = int(a.get("SPLIT_K", 1))
    ops = {"step_a_q": {**shrink, "K=qk": int(a["BLOCK_SIZE_K"])},
           "step_a_v": {**shrink, "K=C": int(a["BLOCK_SIZE_K"])},
           "step_b_q": {"rows": rows, "N=C": int(b["BLOCK_SIZE_N"]), "K=R": int(b["BLOCK_SIZE_K"])},
           "step_b_v": {"rows": rows, "N=vd": int(b["BLOCK_SIZE_N"]), "K=R": int(b["BLOCK_SIZE_K"])}}
    if split > 1:
        ops["step_a_q"]["split:K=qk"] = ops["step_a_v"]["split:K=C"] = split
    ops.update({f: {**ops[a_op], **ops[b_op]} for f, (a_op, b_op) in _FUSED.items()})
    return ops


def v2_model(module, phase_type) -> dict:
    """The ``blocks`` model of a release's v2 path from its ``_mla_plan`` (``module``: the loaded
    ``mla_correction``; ``phase_type``: its ``Phase``)."""
    try:
        return {"model": "blocks", "rows": "slot",
                "by_phase": {"decode": _v2_ops(module._mla_plan(phase_type.DECODE)),
                             "prefill": _v2_ops(module._mla_plan(phase_type.PREFILL))}}
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        return unknown_model(f"the release's _mla_plan did not give its tiles ({type(exc).__name__}: {exc})")


def _dict_constant(tree, name: str) -> Optional[dict]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            try:
                return dict(ast.literal_eval(node.value))
            except ValueError:
                return None
    return None


def _fixed_blocks(source: str, entry: str) -> Optional[dict]:
    """``{"BLOCK_N": .., "BLOCK_K": ..}`` assigned as constants in the entry function (0.5.10), else None."""
    for fn in ast.parse(source).body:
        if isinstance(fn, ast.FunctionDef) and fn.name == entry:
            local = _int_constants(n for n in ast.walk(fn) if isinstance(n, ast.Assign))
            if "BLOCK_N" in local and "BLOCK_K" in local:
                return {"BLOCK_N": local["BLOCK_N"], "BLOCK_K": local["BLOCK_K"]}
    return None


def _tuned_tables(release, folder: str) -> list:
    out = []
    for name in release.names:
        if not name.startswith(folder) or not name.endswith(".json"):
            continue
        parts = name[len(folder):].split("/")
        match = CSGMV_TUNED_NAME.fullmatch(parts[-1]) if len(parts) == 2 else None
        if match is None:
            continue
        kernel, K, R, S, device = match.groups()
        out.append({"kernel": kernel, "K": int(K), "R": int(R), "S": int(S), "device": device, "folder": parts[0],
                    "configs": {str(k): v for k, v in json.loads(release.read(name)).items()}})
    return out


def csgmv_model(release, paths: dict, *, device_name: str, split_switch: bool, deterministic: bool,
                split_kernel: bool) -> dict:
    """The ``csgmv`` model of ``release`` (``paths``: its shrink and expand files, ``locate_csgmv``)."""
    import triton

    model = {"model": "csgmv", "device_name": device_name, "triton": triton.__version__, "tuned": [],
             "split_kernel": split_kernel, "split_switch": split_switch, "deterministic": deterministic}
    for kernel, entry in (("shrink", "chunked_sgmv_lora_shrink_forward"),
                          ("expand", "chunked_sgmv_lora_expand_forward")):
        fixed = _fixed_blocks(release.read(paths[kernel]), entry)
        if fixed is not None:
            model[kernel] = fixed
    folder = paths["shrink"].rsplit("/", 1)[0] + "/"
    tuning = folder + "lora_tuning_config.py"
    if "shrink" not in model or "expand" not in model:
        tree = ast.parse(release.read(tuning)) if tuning in release.names else None
        for kernel, name in (("shrink", "DEFAULT_SHRINK_CONFIG"), ("expand", "DEFAULT_EXPAND_CONFIG")):
            found = _dict_constant(tree, name) if tree is not None else None
            if kernel not in model and found is None:
                return unknown_model(f"sglang {release.version}: no fixed blocks and no {name} in {tuning}")
            model.setdefault(kernel, found)
        model["tuned"] = _tuned_tables(release, folder + "csgmv_configs/")
    return model
