"""Our vision and LoRA kernels compile for the H200 (sm_90) on this machine, GPU or not.

The interpreter never compiles, so the CPU suite alone cannot see a kernel that fails to build; this
runs ``tools/compile_hopper.py`` in a child process without ``TRITON_INTERPRET`` (Triton's own
ptxas does the last step).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import triton

from .._scripts import ROOT, load_script

PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"


@pytest.mark.skipif(not PTXAS.exists(), reason=f"this Triton build has no bundled ptxas ({PTXAS})")
def test_our_kernels_compile_for_sm90():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = env.get("TRITON_DEFAULT_FP_FUSION", "1")  # Triton's default, said aloud
    done = subprocess.run([sys.executable, str(ROOT / "tools/compile_hopper.py")], env=env,
                          capture_output=True, text=True, timeout=600)
    compile_hopper = load_script("tools/compile_hopper.py")
    LORA_VARIANTS, VARIANTS, GLUON = compile_hopper.LORA_VARIANTS, compile_hopper.VARIANTS, compile_hopper.GLUON_VARIANTS

    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(("ok", "FAIL"))]
    assert done.returncode == 0 and len(lines) == len(VARIANTS) + len(LORA_VARIANTS) + len(GLUON), \
        done.stdout + done.stderr[-3000:]
