"""Slim SGLang wheels: only the files the suite reads, for carrying to a GPU machine without a registry.

    python -m kernel_oracle.fuzz.targets.sglang_slim DEST_DIR WHEEL [WHEEL...]
"""

from __future__ import annotations

import os
import re
import sys
import zipfile
from pathlib import Path

from .sglang_csgmv import csgmv_slim_files
from .sglang_two_stream import TWO_STREAM_FILE
from .sglang_v2 import v2_slim_files
from .sglang_wheel import HELPER_FILE, SLIM_EXTRAS, LoaderError, locate_kernels, wheel_release

__all__ = ["write_slim_wheel"]


def write_slim_wheel(wheel: str | os.PathLike, dest_dir: str | os.PathLike) -> Path:
    """A copy of ``wheel`` holding only what the suite reads (the kv_b kernel files, their helper files,
    the triton_v2 path's files, the csgmv files, the two-stream MLA correction, :data:`SLIM_EXTRAS` and the
    dist-info metadata), so every target and its run identity are the full wheel's
    (``oracle_tests/fuzz/test_sglang_slim.py``):
    ``sglang-X.Y.Z-kernels.whl``, a few hundred kB instead of 40 MB, for carrying to a GPU machine without
    a registry.  It is read like the full wheel (the loader never installs either)."""
    rel = wheel_release(wheel)
    found = locate_kernels(rel)
    if not found and not set(SLIM_EXTRAS) & set(rel.names):
        raise LoaderError(f"{wheel}: sglang {rel.version} has neither kv_b LoRA kernels nor a vision module to keep")
    keep = set(found.values())
    keep |= {n for n in rel.names if n.endswith("/" + HELPER_FILE) and any(n.rsplit("/", 1)[0] in p for p in keep)}
    keep |= set(v2_slim_files(rel))
    keep |= set(csgmv_slim_files(rel))
    keep |= {TWO_STREAM_FILE} & set(rel.names)  # the fused sides of sglang-trt==X.Y.Z@lora_opti=on
    keep |= {n for n in rel.names if n in SLIM_EXTRAS or re.fullmatch(r"sglang-[^/]+\.dist-info/METADATA", n)}
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / f"sglang-{rel.version}-kernels.whl"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for n in sorted(keep):
            zf.writestr(n, rel.read(n))  # bounded, as every read of a wheel (Note [Wheel members as data])
    return out


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit("usage: python -m kernel_oracle.fuzz.targets.sglang_slim DEST_DIR WHEEL [WHEEL...]")
    for w in sys.argv[2:]:
        print(write_slim_wheel(w, sys.argv[1]))
