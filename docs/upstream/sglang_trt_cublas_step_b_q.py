"""Reproducer of docs/upstream/sglang_trt_cublas_step_b_q.md: the TRT-LLM-style cuBLAS fast paths
(``SGLANG_EXPERIMENTAL_LORA_OPTI=1`` with ``SGLANG_OPT_LORA_CUBLAS=1``) against the contract.

    python docs/upstream/sglang_trt_cublas_step_b_q.py --wheel sglang-0.5.23-...whl     (CPU or GPU)
    python docs/upstream/sglang_trt_cublas_step_b_q.py --wheel ... --check max_len

Needs torch and triton.  The release's ``trtllm_lora_temp/kv_b_lora_absorbed.py`` and its ``kernel_utils.py``
files are read from the wheel and executed as they are; the three other names they import from SGLang
are given here: ``lora_envs`` (the two cuBLAS switches, on or off as the check says, the master switch on),
``LoRABatchInfo`` (a type annotation only) and ``is_arch_support_pdl`` (False).  Without a GPU the Triton
path runs under the interpreter (``TRITON_INTERPRET=1``, set before triton is imported).

The script runs the Triton path (switches off) and the cuBLAS path (switches on) on the same inputs, one
resident slot.  Checks (``--check``, default all):

* ``rows``: one slot of rank 8 in buffers of rank 16, three segments (3, 0 and 5 rows), two rows after
  them that no segment routes.  ``step_b_q_fwd(x, A, batch_info, base)`` must add
  ``scaling * x[t, h, :8] @ A[0, :8]`` to the routed rows and leave the other rows of ``base`` as they
  were; reproduced when the cuBLAS path changes unrouted rows or differs on routed rows;
* ``max_len``: each of the four entry points with a batch info that has neither ``max_len`` nor
  ``seg_lens``, which must raise ``ValueError('LoRA batch_info must provide max_len or seg_lens.')``
  before any work (the Triton path's ``_max_segment_len``); reproduced when the cuBLAS path of an entry
  point returns instead (``step_b_v_fwd`` has no cuBLAS path: both raise).

Exit 1 when a check reproduces, 0 when none does, 2 when the file cannot be loaded.
"""

from __future__ import annotations

import argparse
import ast
import atexit
import importlib.util
import os
import shutil
import sys
import tempfile
import types
import zipfile
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported

ROWS, H, R, RANK, C = 10, 2, 16, 8, 32
SEGMENTS = (3, 0, 5)  # rows 0-7 routed, rows 8-9 not
QK, VD = 16, 16  # the per-head halves of B_buf's rows (step_a_q, step_b_v)
NO_MAX_LEN = "LoRA batch_info must provide max_len or seg_lens."


class _Switch:
    def __init__(self, value: bool) -> None:
        self.value = value

    def get(self) -> bool:
        return self.value


class _Envs:
    """``lora_envs`` with the master switch on: the two cuBLAS switches as given, the others at False."""

    def __init__(self, cublas: bool) -> None:
        self.cublas = cublas

    def __getattr__(self, name: str) -> _Switch:
        return _Switch(self.cublas and name in ("SGLANG_OPT_LORA_CUBLAS", "SGLANG_OPT_LORA_CUBLAS_KV_B"))


def _imports(source: str) -> list:
    return [(n.module, [a.name for a in n.names]) for n in ast.parse(source).body
            if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("sglang")]


def load(wheel: str, cublas: bool, variant: str = "trt") -> types.ModuleType:
    """The release's TRT-LLM-style kv_b file (``variant="default"``: the default one, which reads no
    switch), executed as it is: each ``from sglang.X import ...`` finds ``sglang.X`` in ``sys.modules``
    first, a ``kernel_utils.py`` of the wheel (itself executed the same way) or a module holding the names
    given here.  Each file is written to a temporary folder and imported from there: compiled for a GPU,
    Triton's ``@jit`` reads a kernel's source from its file.  A wheel without that file raises ``LookupError``."""
    zf = zipfile.ZipFile(wheel)
    names = set(zf.namelist())
    files = [n for n in sorted(names) if n.endswith("/kv_b_lora_absorbed.py")
             and ("trtllm_lora_temp/" in n) == (variant == "trt")]
    if not files:
        raise LookupError(f"{wheel} has no {variant} kv_b_lora_absorbed.py (the TRT-LLM-style file exists from "
                          "0.5.13, the default one from 0.5.12)")
    path = files[0]
    given = {"lora_envs": _Envs(cublas), "LoRABatchInfo": types.SimpleNamespace, "is_arch_support_pdl": lambda: False}

    root = Path(tempfile.mkdtemp(prefix="sglang-kv-b-"))
    atexit.register(shutil.rmtree, root, True)

    def execute(file: str, name: str) -> types.ModuleType:
        source = zf.read(file).decode()
        for imported, items in _imports(source):
            helper = imported.replace(".", "/") + ".py"
            if helper in names and helper.endswith("/kernel_utils.py"):
                sys.modules[imported] = execute(helper, imported)
            else:
                sys.modules[imported] = types.ModuleType(imported)
                for item in items:
                    setattr(sys.modules[imported], item, given[item])
        path = root / file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # triton looks a kernel's module up by name
        spec.loader.exec_module(mod)  # the release's own file, as it is
        return mod

    return execute(path, f"{variant}_kv_b_cublas_{'on' if cublas else 'off'}")


def inputs(device):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(ROWS, H, R, generator=gen).to(device)
    A = torch.randn(1, R, C, generator=gen).to(device) / 4
    base = torch.randn(ROWS, H, C, generator=gen).to(device)
    indptr = torch.tensor([0, 3, 3, 8], dtype=torch.int32, device=device)
    bi = types.SimpleNamespace(use_cuda_graph=False, bs=3, num_segments=3, seg_indptr=indptr,
                               weight_indices=torch.zeros(3, dtype=torch.int32, device=device),
                               lora_ranks=torch.tensor([RANK], dtype=torch.int32, device=device),
                               scalings=torch.tensor([0.5], device=device), max_len=5,
                               seg_lens=torch.tensor(SEGMENTS, dtype=torch.int32, device=device), permutation=None)
    return x, A, base, bi


def both_paths(argv, description: str, checks=()):
    """``--wheel W`` (and ``--check``, one of ``checks`` or all, when ``checks`` are given) of ``argv``:
    ``({False: Triton path module, True: cuBLAS path module}, device, check)``, or None (said on stderr)
    when the file cannot be loaded."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--wheel", required=True, help="an sglang wheel with the TRT-LLM-style kv_b file (0.5.13+)")
    if checks:
        ap.add_argument("--check", default="all", choices=("all", *checks))
    args = ap.parse_args(argv)
    try:
        paths = {cublas: load(args.wheel, cublas) for cublas in (False, True)}
    except Exception as exc:  # noqa: BLE001 - reported, exit 2
        print(f"cannot load the kernel file: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None
    return paths, "cuda" if torch.cuda.is_available() else "cpu", getattr(args, "check", "all")


def check_rows(paths, device) -> bool:
    """``step_b_q_fwd`` on routed and unrouted rows, with and without columns past the rank."""
    x, A, base, bi = inputs(device)
    want = base.double().clone()
    want[:8] += 0.5 * (x[:8, :, :RANK].double() @ A[0, :RANK].double())
    bad = False
    print("rows: one slot of rank 8 in buffers of rank 16, segments of 3, 0 and 5 rows, two unrouted rows:")
    for zeroed in (False, True):
        if zeroed:  # as SGLang's LoRA pool keeps its buffers: nothing past the adapter's rank
            print("columns past the rank zeroed in A and x (SGLang's pool zeroes them in A and B):")
            x[..., RANK:], A[..., RANK:, :] = 0, 0
        for cublas, mod in paths.items():
            got = mod.step_b_q_fwd(x.clone(), A, bi, base.clone()).double()
            routed = float((got[:8] - want[:8]).abs().max())
            unrouted = float((got[8:] - want[8:]).abs().max())
            print(f"  {'cuBLAS' if cublas else 'Triton'} path: routed rows max error {routed:.2e}, "
                  f"unrouted rows changed by up to {unrouted:.3f}")
            bad |= cublas and (routed > 1e-3 or unrouted > 0)
    return bad


def _outcome(call) -> str:
    """What ``call()`` did: ``raises ValueError('...')`` or ``returns (shape)``."""
    try:
        out = call()
    except Exception as exc:  # noqa: BLE001 - the entry point's error is the result
        return f"raises {type(exc).__name__}({str(exc)!r})"
    return f"returns {tuple(out.shape)}"


def check_max_len(paths, device) -> bool:
    """The four entry points with a batch info that has neither ``max_len`` nor ``seg_lens``."""
    x, A, base, bi = inputs(device)
    bi.max_len, bi.seg_lens = None, None
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(ROWS, H, QK, generator=gen).to(device)  # q_nope (S, H, qk)
    B = torch.randn(1, H * (QK + VD), R, generator=gen).to(device) / 4  # B_buf (L, H*(qk+vd), R)
    attn = torch.randn(ROWS, H, C, generator=gen).to(device)  # attn_output (S, H, C), contiguous
    base_v = torch.randn(ROWS, H, VD, generator=gen).to(device)  # base_output of step B_v (S, H, vd)
    calls = {"step_a_q": lambda m: m.step_a_q_fwd(q.clone(), B, bi, QK + VD),
             "step_b_q": lambda m: m.step_b_q_fwd(x.clone(), A, bi, base.clone()),
             "step_a_v": lambda m: m.step_a_v_fwd(attn.clone(), A, bi),
             "step_b_v": lambda m: m.step_b_v_fwd(x.clone(), B, bi, base_v.clone(), QK, VD)}
    wanted = f"raises ValueError({NO_MAX_LEN!r})"
    bad = False
    print("max_len: one slot, a batch info without max_len and seg_lens (must raise before any work):")
    for op, call in calls.items():
        got = {cublas: _outcome(lambda: call(mod)) for cublas, mod in paths.items()}
        print(f"  {op}: Triton path {got[False]}; cuBLAS path {got[True]}")
        bad |= got[False] == wanted and got[True] != wanted
    return bad


CHECKS = {"rows": check_rows, "max_len": check_max_len}


def main(argv=None) -> int:
    loaded = both_paths(argv, __doc__.splitlines()[0], CHECKS)
    if loaded is None:
        return 2
    paths, device, which = loaded
    hits = [name for name, fn in CHECKS.items() if which in ("all", name) and fn(paths, device)]
    print("reproduced: " + (", ".join(hits) if hits else "none"))
    return 1 if hits else 0


if __name__ == "__main__":
    sys.exit(main())
