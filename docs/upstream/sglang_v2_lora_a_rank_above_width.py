"""Reproducer of docs/upstream/sglang_v2_lora_a_rank_above_width.md: SGLang 0.5.23's ``grouped_lora_a``
(``sglang/kernels/ops/lora/common/lora_a.py``, the shrink of the ``triton_v2`` backend) with a slot whose
``lora_ranks`` entry is larger than the weight's ``N`` (its rank dimension) writes columns past ``N`` of
every output row of that slot, and reads weight rows past ``N``.

    python docs/upstream/sglang_v2_lora_a_rank_above_width.py --wheel sglang-0.5.23-...whl     (CPU or GPU)

Needs torch and triton, not SGLang.  ``routing.py`` and ``lora_a.py`` are read from the wheel and executed
as they are, from real files (Triton compiles from source files); their two imports that pull in the rest
of SGLang (``route_view``, which needs msgspec, and ``moe.virtual_experts``) get empty placeholder modules:
``grouped_lora_a`` reads only the route's tensors, which this script builds by hand.  Without a GPU the
kernel runs under the Triton interpreter (``TRITON_INTERPRET=1``, set before triton is imported).

The call: 4 (token, head) pairs, all of slot 0 (one aligned block of 16), weight ``(1, N=16, K=32)``,
``lora_ranks = [N + 8]``.  The output is a ``(4, N)`` view into a NaN-filled ``(4, N + 16)`` buffer, so the
8 columns past the view show what the kernel stores there.  The correct outcome is the view filled with
``x @ W[0].T`` and the buffer's other columns untouched (NaN).  With a contiguous ``(pairs, N)`` bridge, as
``mla_correction._prepare`` allocates it, those columns are the next pair's first 8 columns.

Exit 1 when a column past the view is written (reproduced), 0 when none is, 2 when the files cannot be loaded.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import types
import zipfile
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported

COMMON = "sglang/kernels/ops/lora/common/"
PLACEHOLDERS = {  # imports of routing.py / lora_a.py that grouped_lora_a never uses
    "sglang.kernels.ops.lora.common.route_view": ("RouteView", "RouteViewKind"),
    "sglang.kernels.ops.lora.moe.virtual_experts": ("_align_block_size_jit",),
}
N, K, PAIRS, BLOCK, EXTRA = 16, 32, 4, 16, 8


def load(wheel: str) -> types.ModuleType:
    """``lora_a`` of ``wheel``, executed from real files under a temporary directory."""
    root = Path(tempfile.mkdtemp(prefix="sglang-v2-"))
    with zipfile.ZipFile(wheel) as zf:
        for name in ("routing.py", "lora_a.py"):
            (root / name).write_bytes(zf.read(COMMON + name))
    for mod, names in PLACEHOLDERS.items():
        parts = mod.split(".")
        for i in range(1, len(parts) + 1):
            sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
        for n in names:  # routing.py names RouteViewKind.ALIGNED as a default argument
            setattr(sys.modules[mod], n, types.SimpleNamespace(ALIGNED="aligned", RAW="raw"))
    out = None
    for name in ("routing", "lora_a"):
        full = "sglang.kernels.ops.lora.common." + name
        spec = importlib.util.spec_from_file_location(full, root / f"{name}.py")
        out = importlib.util.module_from_spec(spec)
        sys.modules[full] = out
        spec.loader.exec_module(out)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheel", required=True, help="an sglang wheel with the triton_v2 files (0.5.23+)")
    args = ap.parse_args(argv)
    try:
        lora_a = load(args.wheel)
    except (OSError, KeyError, zipfile.BadZipFile, ImportError, SyntaxError) as exc:
        print(f"cannot load lora_a.py from {args.wheel}: {type(exc).__name__}: {exc}")
        return 2
    device = "cuda" if torch.cuda.is_available() else "cpu"
    i32 = {"dtype": torch.int32, "device": device}
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(PAIRS, K, generator=gen, device=device)
    weight = torch.randn(2, N, K, generator=gen, device=device)[:1]  # plane 0; the row after it is plane 1
    # one aligned block of slot 0: pairs 0..3, then padding (num_pairs marks an empty place)
    route = types.SimpleNamespace(
        num_rows=PAIRS, width=1, groups_per_slot=1, block_size=BLOCK,
        sorted_pair_ids=torch.tensor(list(range(PAIRS)) + [PAIRS] * (BLOCK - PAIRS), **i32),
        block_bucket_ids=torch.tensor([0], **i32), num_pairs_post_padded=torch.tensor([BLOCK], **i32))
    buffer = torch.full((PAIRS, N + 16), float("nan"), device=device)
    out = buffer[:, :N]
    lora_a.grouped_lora_a(x, weight, out, route, config={"BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8,
                                                          "num_warps": 4, "num_stages": 2},
                          pair_input=True, lora_ranks=torch.tensor([N + EXTRA], **i32))
    if device == "cuda":
        torch.cuda.synchronize()
    expected = x.double() @ weight[0].double().T
    view_ok = torch.allclose(out.double(), expected, rtol=2e-2, atol=2e-2)  # TF32 on a GPU
    past = buffer[:, N:]
    written = (~torch.isnan(past)).sum(dim=1).tolist()
    print(f"device {device}; weight (1, N={N}, K={K}); lora_ranks[0] = {N + EXTRA}; output a ({PAIRS}, {N}) view "
          f"of a ({PAIRS}, {N + 16}) NaN buffer")
    print(f"  the view holds x @ W[0].T: {view_ok}")
    print(f"  columns past N written per row: {written} (expected [0, 0, 0, 0])")
    if any(written):
        print(f"  e.g. row 0, columns {N}..{N + EXTRA - 1}: {[round(v, 4) for v in past[0, :EXTRA].tolist()]} "
              f"(weight rows past N: plane 1 of the buffer)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
