"""The SASS of the benchmarks' LoRA (and vision) launches for the H200 (sm_90), built on any machine.

python tools/hopper_sass.py [--shapes decode-bs64 ...] [--sides q v] [--calls fused split]
                                               [--vision] [--ab decode|prefill|vision] [--vision-shapes NAME ...]
                                               [--lines N] [--out DIR] [--against DIR]

Why: a kernel edit that should not change the code the GPU runs (a refactor, a fold of repeated
code) can be proven so without a GPU, and a candidate's registers, occupancy and barriers can be read
before device time is spent on it (though not its speed: fewer instructions per program were not
faster at decode-bs64, docs/kernels_lora.md).  Each fused (and split) call of ``bench_lora``'s shapes
runs through the real wrappers (``kernels.lora._launch``: path, blocks, layout, shared-memory fit
with the H200's 227 KB), but on ``meta`` tensors, with a driver that only names the target
(``GPUTarget("cuda", 90, 32)``), and ``JITFunction.warmup`` in place of the launch
(``fuzz.precompile.CompileOnly``): Triton specializes and compiles exactly as a launch on the GPU
would, and launches nothing.  ``--vision`` adds the vision kernel as ``plan_attention`` would launch
it on ``bench_vision``'s four shapes (bf16; ``--vision-shapes`` picks some).

``--ab decode`` (``prefill``) compiles each configuration of ``bench_lora``'s ``DECODE_AB`` (``PREFILL_AB``)
table instead, as its A/B would launch it; ``--ab vision`` each of ``bench_vision``'s ``SWEEP``.

Per compiled kernel it prints the registers (``cuobjdump -res-usage``), the shared memory, the
programs that fit on one SM and the waves of the grid (:func:`programs_per_sm`), the SASS instruction
count and the counts of the instruction classes that make decode's chain (barriers, shared-memory and
global accesses, tensor-core products, shuffles), and a digest of the SASS text as Triton prints it.
``--lines N`` lists each kernel's N source lines with the most instructions (``nvdisasm -g``; an
inlined helper's line counts, not its caller's).  ``--out DIR`` keeps each kernel's SASS; ``--against
DIR`` (another tree's ``--out``) says per kernel whether it is identical.  The SASS is that of the
Triton installed (the H200's is 3.6: ``pip install triton==3.6.0`` in a separate venv gives the code
it runs).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import math
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from unittest import mock

import torch

# shared memory a block may opt in to on the H200 (cudaDevAttrMaxSharedMemoryPerBlockOptin), bytes
H200_SMEM_OPTIN = 232448
# what bounds the programs resident on one H200 SM (CUDA's occupancy rules for compute capability 9.0):
# 65,536 registers allocated per warp in units of 256, 228 KB of shared memory with 1 KB reserved per
# block, 64 warps, 32 blocks; 132 SMs
SM_REGISTERS, REGISTER_UNIT, SM_SMEM, BLOCK_SMEM_RESERVED, SM_WARPS, SM_BLOCKS, H200_SMS = \
    65536, 256, 233472, 1024, 64, 32, 132
# SASS opcode classes of a decode program's chain (by opcode prefix)
CLASSES = {"bar": ("BAR",), "lds/sts": ("LDS", "STS", "LDSM", "STSM"), "ldg": ("LDG", "LDGSTS"), "stg": ("STG",),
           "mma": ("HMMA", "HGMMA"), "shfl": ("SHFL",), "cvt": ("F2F", "F2FP", "I2F", "F2I")}


class HopperTarget:
    """The smallest Triton driver a warm-up compile needs: device 0, stream 0, target sm_90."""

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)


@contextlib.contextmanager
def hopper_compiles(seen: list):
    """Within: the LoRA wrappers compile for sm_90 and record (grid, warps, stages, kernel) in ``seen``."""
    from triton.runtime.driver import driver

    from kernel_oracle.fuzz.precompile import CompileOnly
    from kernel_oracle.kernels.lora import _launch as LL

    family = LL._family
    driver.set_active(HopperTarget())
    try:
        with mock.patch.object(LL, "smem_limit", lambda device: H200_SMEM_OPTIN), \
                mock.patch.object(LL, "_pdl_options", lambda requested, device, early=False:  # as on sm_90
                                  (LL.PDL_EARLY_OPTIONS if early else LL.PDL_OPTIONS) if requested else {}), \
                mock.patch.object(LL, "_family", lambda kernel, lay: CompileOnly(family(kernel, lay), seen)):
            LL._FITTED.clear()
            yield
    finally:
        LL._FITTED.clear()
        driver._active = None


def _cuobjdump() -> str:
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


def registers(cubin: bytes) -> int:
    """Registers per thread of a cubin (``cuobjdump -res-usage``)."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([_cuobjdump(), "-res-usage", f.name], capture_output=True, text=True,
                             check=True).stdout
    return int(re.search(r"REG:(\d+)", out).group(1))


def instructions(sass: str) -> list[str]:
    """The SASS instructions as Triton prints them (``asm["sass"]``: scheduling controls, a tab, the
    instruction), labels kept, the ``Function:`` header and the final semicolons dropped."""
    return [line.rstrip().rstrip(";") for line in sass.splitlines()
            if line.strip() and not line.startswith("Function:")]


def opcode(line: str) -> str:
    """The opcode of one :func:`instructions` line, predicate and controls skipped ('' for a label)."""
    if "\t" not in line:
        return ""
    words = line.split("\t", 1)[1].split()
    return words[1] if words[0].startswith("@") and len(words) > 1 else words[0]


def summary(lines: list[str]) -> dict:
    """Counts by :data:`CLASSES` (opcode before the first dot), the total, and a digest of the text."""
    ops = Counter(opcode(i).split(".")[0] for i in lines)
    ops.pop("", None)
    ops.pop("NOP", None)
    counts = {name: sum(n for op, n in ops.items() if op in prefixes) for name, prefixes in CLASSES.items()}
    return dict(total=sum(ops.values()), **counts,
                digest=hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12])


def by_line(cubin: bytes) -> list[dict]:
    """Instructions of a cubin per source line (``nvdisasm -g``: the innermost line of an inlined call),
    most instructions first: file, line, total and the :data:`CLASSES` counts."""
    nvdisasm = os.path.join(os.path.dirname(_cuobjdump()), "nvdisasm")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([nvdisasm, "-g", "-c", f.name], capture_output=True, text=True, check=True).stdout
    where, lines = ("?", 0), {}
    for line in text.splitlines():
        m = re.search(r'//## File "(.*?)", line (\d+)', line)
        if m:
            where = (m.group(1), int(m.group(2)))
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m and m.group(1) != "NOP":
            op = m.group(1).split(".")[0]
            row = lines.setdefault(where, Counter())
            row["total"] += 1
            for name, prefixes in CLASSES.items():
                row[name] += op in prefixes
    return [dict(file=f, line=n, **{k: c[k] for k in ("total", *CLASSES)})
            for (f, n), c in sorted(lines.items(), key=lambda kv: -kv[1]["total"])]


def _source(path: str, line: int) -> str:
    try:
        return Path(path).read_text().splitlines()[line - 1].strip()
    except (OSError, IndexError):
        return ""


def programs_per_sm(regs: int, warps: int, smem: int) -> int:
    """Programs of ``warps`` warps, ``regs`` registers per thread and ``smem`` bytes that fit on one SM."""
    per_warp = -(-regs * 32 // REGISTER_UNIT) * REGISTER_UNIT
    return min(SM_REGISTERS // per_warp // warps, SM_SMEM // (smem + BLOCK_SMEM_RESERVED), SM_WARPS // warps,
               SM_BLOCKS)


def _row(shape: str, side: str, grid, warps, stages, kernel) -> dict:
    """One compiled kernel's table row (and its cubin and SASS, for --lines and --out).  ``warps``: what the
    launch asked for; the row has what the compiled kernel runs (its metadata's warp count)."""
    warps = getattr(kernel.metadata, "num_warps", warps)
    ins = instructions(kernel.asm["sass"])
    regs, smem = registers(kernel.asm["cubin"]), kernel.metadata.shared
    per_sm = programs_per_sm(regs, warps, smem)
    return dict(shape=shape, side=side, kernel=kernel.name.removesuffix("_kernel"), grid=tuple(grid), warps=warps,
                stages=stages, regs=regs, smem=smem, per_sm=per_sm, waves=math.prod(grid) / (per_sm * H200_SMS) if per_sm else math.inf,  # 0: does not fit an SM
                cubin=kernel.asm["cubin"], sass="\n".join(ins), **summary(ins))


def compile_calls(shapes, sides, variants=("fused",)) -> list[dict]:
    """One row per compiled kernel of each (shape, side, variant) LoRA call (variants: fused, split)."""
    import kernel_oracle.kernels.lora as klora
    from kernel_oracle.benchmarks import bench_lora as B

    rows = []
    for shape in shapes:
        d = B._inputs(B.SHAPES[shape], 0, device="meta")
        for side, variant in itertools.product(sides, variants):
            seen: list = []
            with hopper_compiles(seen):
                B._calls(klora, d, side)[variant]()
            rows += [_row(shape, side, *launch) for launch in seen]
    return rows


def compile_ab(table: dict, shapes, path: str) -> list[dict]:
    """The fused kernels of each configuration of a ``bench_lora`` A/B table (``DECODE_AB`` on the
    token-major path, ``PREFILL_AB`` segment-major) on ``shapes``, as ``--decode-ab`` / ``--prefill-ab``
    would launch them (the same LoRA options): static figures to sort candidates before device time is spent
    on them.  A configuration that does not compile gives a row with its error."""
    import kernel_oracle.kernels.lora as klora
    from kernel_oracle.benchmarks import bench_lora as B
    from kernel_oracle.kernels.options import options

    rows = []
    configs_of = B.ab_configs(table, klora.BLOCKS, path)
    for shape in shapes:
        d = B._inputs(B.SHAPES[shape], 0, device="meta")
        for op, configs in configs_of.items():
            side = "q" if op == "q_side_fused" else "v"
            for (route, cfg), (_, overrides) in zip(configs, table[op]):
                label = f"{shape} {route} {overrides or ''}".strip()
                seen: list = []
                try:
                    with hopper_compiles(seen), options(lora=B.route_options(route, {op: {path: cfg}})):
                        B._calls(klora, d, side)["fused"]()
                except Exception as exc:  # noqa: BLE001 - a configuration that does not build is a result
                    rows.append(dict(shape=label, side=side, error=f"{type(exc).__name__}: {str(exc)[:120]}"))
                    continue
                rows += [_row(label, side, *launch) for launch in seen]
    return rows


def compile_vision(sweep: bool = False, shapes=None) -> list[dict]:
    """One row per ``bench_vision`` shape (bf16; ``shapes``: their names, default all): the kernel
    ``plan_attention`` plans (its default config, block table, alignment), compiled for sm_90 on meta
    tensors; with ``sweep``, one per configuration of ``bench_vision.SWEEP`` (its ``--sweep``) instead."""
    from kernel_oracle.benchmarks import bench_vision as BV
    from kernel_oracle.fuzz.precompile import CompileOnly
    from kernel_oracle.kernels.vision import KernelConfig, plan_attention
    from kernel_oracle.kernels.vision import _kernel as VK
    from kernel_oracle.kernels.vision import attention as VA
    from kernel_oracle.reference.vision_metadata import prepare_flashinfer_cudnn_metadata

    rows = []
    for name, lens, H, D in BV.SHAPES:
        if shapes is not None and name not in shapes:
            continue
        q, k, v, cu = BV._inputs(lens, H, D, torch.bfloat16, "meta")
        md = prepare_flashinfer_cudnn_metadata(cu, "cpu", elem_per_token=H * D)
        for config in [KernelConfig(*c) for c in BV.SWEEP] if sweep else (None,):
            with mock.patch.object(VA, "has_tma", lambda device: True):  # planned as for the H200
                planned = plan_attention(q, k, v, None, None, None, forward_metadata=md, strict=False, config=config)
            label = f"vision {name} d{D}" + (f" {tuple(config)}" if sweep else "")
            seen: list = []
            try:
                with hopper_compiles(seen), \
                        mock.patch.object(VK, "_vision_attn_fwd", CompileOnly(VK._vision_attn_fwd, seen)):
                    VK.launch_attention(q, k, v, torch.empty_like(q), planned.table, planned.num_blocks,
                                        planned.plan.scale, planned.config, planned.precision)
            except Exception as exc:  # noqa: BLE001 - a configuration that does not build is a result
                rows.append(dict(shape=label, side="-", error=f"{type(exc).__name__}: {str(exc)[:120]}"))
                continue
            rows += [_row(label, "-", *launch) for launch in seen]
    return rows


def main(argv=None) -> int:
    from kernel_oracle.benchmarks import bench_lora as B
    from kernel_oracle.benchmarks import bench_vision as BV
    from kernel_oracle.kernels.interpreter import interpreting

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=list(B.SHAPES), choices=list(B.SHAPES))
    ap.add_argument("--sides", nargs="+", default=["q", "v"], choices=["q", "v"])
    ap.add_argument("--calls", nargs="+", default=["fused"], choices=["fused", "split"])
    ap.add_argument("--vision", action="store_true", help="also the vision kernel on bench_vision's four shapes")
    ap.add_argument("--vision-shapes", nargs="+", choices=[shape[0] for shape in BV.SHAPES],
                    help="only these of bench_vision's shapes (with --vision or --ab vision)")
    ap.add_argument("--ab", choices=["decode", "prefill", "vision"],
                    help="instead: each configuration of bench_lora's DECODE_AB or PREFILL_AB table, or of "
                         "bench_vision's SWEEP")
    ap.add_argument("--out", type=Path, help="write each kernel's SASS here")
    ap.add_argument("--against", type=Path, help="a directory another tree's --out wrote: compare")
    ap.add_argument("--lines", type=int, default=0, metavar="N",
                    help="also list each kernel's N source lines with the most instructions")
    args = ap.parse_args(argv)
    if interpreting():
        print("TRITON_INTERPRET=1: nothing is compiled; run without it", file=sys.stderr)
        return 2
    import triton

    with tempfile.TemporaryDirectory() as cache, mock.patch.dict(os.environ, TRITON_CACHE_DIR=cache):
        if args.ab == "vision":
            rows = compile_vision(sweep=True, shapes=args.vision_shapes)
        elif args.ab == "decode":
            rows = compile_ab(B.DECODE_AB, ("decode-bs64", "decode-bs256"), "tok")
        elif args.ab == "prefill":
            rows = compile_ab(B.PREFILL_AB, ("prefill-8x2048",), "seg")
        else:
            rows = compile_calls(args.shapes, args.sides, args.calls)
            rows += compile_vision(shapes=args.vision_shapes) if args.vision else []
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    what = {"vision": "bench_vision's SWEEP", "decode": "bench_lora's DECODE_AB table",
            "prefill": "bench_lora's PREFILL_AB table"}.get(args.ab) or \
        f"{' and '.join(args.calls)} calls of bench_lora's shapes"
    print(f"# triton {triton.__version__}, sm_90 (an H200: {H200_SMS} SMs); {what}")
    print("| shape | side | kernel | grid | warps | stages | regs | smem B | per SM | waves | SASS | bar | lds/sts "
          "| ldg | stg | mma | shfl | cvt | digest |" + (" same as --against |" if args.against else ""))
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|" +
          ("---|" if args.against else ""))
    differ = 0
    for r in rows:
        if "error" in r:  # (with --against: a kernel that no longer builds differs)
            differ += args.against is not None
            print(f"| {r['shape']} | {r['side']} | {r['error']} |")
            continue
        name = re.sub(r"[^A-Za-z0-9_.=-]+", "_", f"{r['shape']}_{r['kernel']}") + ".sass"
        if args.out:
            (args.out / name).write_text(r["sass"] + "\n")
        cells = [r["shape"], r["side"], r["kernel"], "x".join(map(str, r["grid"])), r["warps"], r["stages"], r["regs"],
                 r["smem"], r["per_sm"], f"{r['waves']:.2f}", r["total"], *(r[c] for c in CLASSES), r["digest"]]
        if args.against:
            old = args.against / name
            same = old.exists() and old.read_text() == r["sass"] + "\n"
            differ += not same
            cells.append("yes" if same else ("no" if old.exists() else "missing"))
        print("| " + " | ".join(map(str, cells)) + " |")
    for r in (r for r in rows if "cubin" in r) if args.lines else ():
        print(f"\n{r['shape']} {r['kernel']}: source lines by SASS instructions (bar, lds/sts)")
        for row in by_line(r["cubin"])[:args.lines]:
            where = f"{Path(row['file']).name}:{row['line']}"
            print(f"  {row['total']:5d} {row['bar']:3d} {row['lds/sts']:3d}  {where:<22} "
                  f"{_source(row['file'], row['line'])[:90]}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
