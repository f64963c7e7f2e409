"""tools/hopper_sass.py: the SASS of a benchmark launch for sm_90, built here without a GPU.

The compile runs in a child process without ``TRITON_INTERPRET`` (the suite's interpreter never
compiles); the parsing helpers are plain Python and run in-process on a made-up listing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import triton

from .._scripts import ROOT, load_script

HS = load_script("tools/hopper_sass.py")


BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
LISTING = """Function:k
--:-:0:-:1\tLDC R1, c[0x0][0x28];
.L_x_1:
--:-:1:-:7\t@!P0 LDG.E R8, desc[UR12][R2.64];
02:-:-:Y:4\tBAR.SYNC.DEFER_BLOCKING 0x0;
--:-:-:-:1\tHMMA.16816.F32.BF16 R128, R112, R132, RZ;
--:-:-:-:1\tSTSM.16.M88.4 [R163], R100;
--:-:-:-:1\tLDS.128 R104, [R19+UR4];
--:-:-:-:1\tNOP;
"""


def test_listing_counts_by_class():
    lines = HS.instructions(LISTING)
    assert lines[0] == "--:-:0:-:1\tLDC R1, c[0x0][0x28]" and ".L_x_1:" in lines and len(lines) == 8
    assert [HS.opcode(x) for x in lines] == ["LDC", "", "LDG.E", "BAR.SYNC.DEFER_BLOCKING", "HMMA.16816.F32.BF16",
                                             "STSM.16.M88.4", "LDS.128", "NOP"]
    s = HS.summary(lines)
    assert (s["total"], s["bar"], s["ldg"], s["mma"], s["lds/sts"]) == (6, 1, 1, 1, 2)  # NOP and labels: none
    assert HS.summary(lines[:-2])["digest"] != s["digest"]


def _table(stdout: str) -> list[dict]:
    """The printed table's rows, by its header's names."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(head, (c.strip() for c in ln.strip("|").split("|")))) for ln in lines[1:]]


def _hopper_sass(tmp_path, *args):
    """``python tools/hopper_sass.py ARGS`` in a child without the interpreter."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = env.get("TRITON_DEFAULT_FP_FUSION", "1")
    env["TRITON_CACHE_DIR"] = str(tmp_path / "cache")
    return subprocess.run([sys.executable, str(ROOT / "tools/hopper_sass.py"), *args], env=env,
                          capture_output=True, text=True, timeout=900)


def _run(tmp_path, *args):
    return _hopper_sass(tmp_path, "--shapes", "decode-bs64", "--sides", "v", *args)


@pytest.mark.skipif(not (BIN / "cuobjdump").exists() or not (BIN / "nvdisasm").exists(),
                    reason=f"this Triton build bundles no cuobjdump / nvdisasm ({BIN})")
def test_sass_of_the_decode_launch_and_its_comparison(tmp_path):
    out = tmp_path / "sass"
    done = _run(tmp_path, "--out", str(out), "--lines", "4", "--vision")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    from kernel_oracle.benchmarks.bench_vision import SHAPES as VISION_SHAPES

    table = _table(done.stdout)
    vision = [r for r in table if r["shape"].startswith("vision ")]
    assert len(vision) == len(VISION_SHAPES) and all(r["kernel"] == "_vision_attn_fwd" for r in vision), vision
    assert all(int(r["mma"]) > 0 and int(r["per SM"]) >= 1 for r in vision)  # tensor-core products in every one
    (row,) = [r for r in table if r["shape"] == "decode-bs64"]
    assert row["kernel"] == "v_side_fused" and row["warps"] == "4"  # kernels.lora.BLOCKS["v_side_fused"]["tok"]
    regs, total, bar, mma = int(row["regs"]), int(row["SASS"]), int(row["bar"]), int(row["mma"])
    assert 32 <= regs <= 255 and total > 200 and bar > 0 and mma > 0
    sass = (out / "decode-bs64_v_side_fused.sass").read_text().splitlines()
    assert sum(HS.opcode(x) not in ("", "NOP") for x in sass) == total
    # --lines: the busiest source lines, each a real line of our kernels or of Triton's library
    listed = done.stdout.split("source lines by SASS instructions", 1)[1].splitlines()[1:5]
    assert len(listed) == 4 and all(".py:" in ln for ln in listed), listed
    ours = ("_fused.py:", "_route.py:", "_tiles.py:", "_split.py:")  # kernels/lora's kernel modules
    assert any(name in ln for ln in listed for name in ours), listed

    same = _run(tmp_path, "--against", str(out))  # the LoRA kernel alone: its file is compared
    assert same.returncode == 0 and "| yes |" in same.stdout, same.stdout + same.stderr[-2000:]
    (out / "decode-bs64_v_side_fused.sass").write_text("\n".join(sass[:-1]) + "\n")
    changed = _run(tmp_path, "--against", str(out))
    assert changed.returncode == 1 and "| no |" in changed.stdout, changed.stdout


def test_programs_per_sm_match_nsight_compute_on_the_h200():
    # Nsight Compute on the H200 (docs/kernels_lora.md): a fused q kernel of 160 registers on 4 warps, 3
    # programs per SM; the v kernel of 204 registers and 73,728 B of shared memory, 2 per SM
    assert HS.programs_per_sm(160, 4, 49152) == 3
    assert HS.programs_per_sm(204, 4, 73728) == 2
    assert HS.programs_per_sm(32, 4, 120_000) == 1  # shared memory bounds it
    assert HS.programs_per_sm(16, 1, 0) == 32  # the block limit


@pytest.mark.skipif(not (BIN / "cuobjdump").exists(), reason=f"this Triton build bundles no cuobjdump ({BIN})")
def test_ab_table_rows_are_the_configurations(tmp_path):
    from kernel_oracle.benchmarks.bench_lora import PREFILL_AB

    done = _hopper_sass(tmp_path, "--ab", "prefill")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    rows = _table(done.stdout)
    assert len(rows) == sum(len(v) for v in PREFILL_AB.values())
    by_label = {(r["shape"], r["side"]): r for r in rows}
    # the chosen q blocks run 3 stages, the {'num_stages': 2} row 2: each row is its configuration
    assert by_label[("prefill-8x2048 auto", "q")]["stages"] == "3"
    assert by_label[("prefill-8x2048 auto {'num_stages': 2}", "q")]["stages"] == "2"


@pytest.mark.skipif(not (BIN / "cuobjdump").exists(), reason=f"this Triton build bundles no cuobjdump ({BIN})")
def test_decode_ab_configurations_compile_for_sm90(tmp_path):
    """Every configuration a GPU run's --decode-ab will launch compiles for sm_90, before any device
    time is spent: the interpreter runs the kernels without Triton's code generator, which refuses what
    it lets through (a name reassigned to a tensor of another type inside a runtime ``if`` compiles under
    the interpreter and fails every launch on the H200)."""
    from kernel_oracle.benchmarks.bench_lora import DECODE_AB

    done = _hopper_sass(tmp_path, "--ab", "decode")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    rows = _table(done.stdout)
    assert len(rows) == 2 * sum(len(v) for v in DECODE_AB.values())  # decode-bs64 and decode-bs256
    assert all(int(r["regs"]) > 0 and int(r["mma"]) > 0 for r in rows), rows


VISION_SWEEP_SHAPES = ("8 ragged images", "2x16384")


@pytest.mark.skipif(not (BIN / "cuobjdump").exists(), reason=f"this Triton build bundles no cuobjdump ({BIN})")
def test_vision_sweep_rows_keep_each_configuration(tmp_path):
    from kernel_oracle.benchmarks.bench_vision import SHAPES, SWEEP
    from kernel_oracle.kernels.vision import KernelConfig

    shapes = [s for s in SHAPES if s[0] in VISION_SWEEP_SHAPES]  # a split head dim and d128: half the compiles
    done = _hopper_sass(tmp_path, "--ab", "vision", "--vision-shapes", *VISION_SWEEP_SHAPES)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    rows = _table(done.stdout)
    assert len(shapes) == len(VISION_SWEEP_SHAPES) and len(rows) == len(shapes) * len(SWEEP)
    for (name, _, _, d), config in zip([s for s in shapes for _ in SWEEP], SWEEP * len(shapes)):
        full = tuple(KernelConfig(*config))  # the defaults of the fields a SWEEP entry leaves out
        assert f"vision {name} d{d} {full}" in {r["shape"] for r in rows}
        (row,) = [r for r in rows if r["shape"] == f"vision {name} d{d} {full}"]
        assert (row["warps"], row["stages"]) == (str(config[2]), str(config[3]))
