"""Reproducer of docs/upstream/sglang_kv_b_empty_batch.md: the kv_b LoRA entry points on an empty batch
whose batch info has ``seg_lens`` but ``max_len=None``.

    python docs/upstream/sglang_kv_b_empty_batch.py --wheel sglang-0.5.23-...whl                  (CPU or GPU)
    python docs/upstream/sglang_kv_b_empty_batch.py --wheel sglang-0.5.23-...whl --variant trt

Needs torch and triton, not SGLang.  The release's ``kv_b_lora_absorbed.py`` (``--variant default``, 0.5.12+;
``--variant trt``: the TRT-LLM-style ``trtllm_lora_temp/kv_b_lora_absorbed.py``, 0.5.13+, with every
``lora_envs`` switch off, as SGLang ships it) is read from the wheel and executed as it is, by the loader of
``sglang_trt_cublas_step_b_q.py`` beside this file (``load`` there).  Without a GPU the kernels run under
the Triton interpreter (``TRITON_INTERPRET=1``, set before triton is imported).

The batch: no segments (``bs = num_segments = 0``, ``seg_indptr = [0]``, ``weight_indices = []``,
``seg_lens = []``), no tokens, one slot of rank 16.  Each of the four entry points is called twice, with
``max_len=None`` (the longest segment then comes from ``seg_lens``) and with ``max_len=0``; both must
return without launching anything (the outputs of an empty batch are empty, ``base_output`` untouched).
One line per entry point says what each call did.

Exit 1 when a ``max_len=None`` call raises (reproduced), 0 when every call returns, 2 when the file cannot
be loaded.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import types
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported
sys.path.insert(0, str(Path(__file__).resolve().parent))
from sglang_trt_cublas_step_b_q import load  # noqa: E402 - the sibling reproducer's loader

H, QK, VD, R, C = 1, 16, 16, 16, 32  # heads, qk_nope, v_head_dim, buffer rank, kv_lora_rank


def empty_batch(device, max_len):
    """A batch info of no segments, with SGLang's field names; ``seg_lens`` given."""
    i32 = {"dtype": torch.int32, "device": device}
    return types.SimpleNamespace(use_cuda_graph=False, bs=0, num_segments=0, seg_indptr=torch.zeros(1, **i32),
                                 weight_indices=torch.zeros(0, **i32), lora_ranks=torch.tensor([R], **i32),
                                 scalings=torch.ones(1, device=device), max_len=max_len,
                                 seg_lens=torch.zeros(0, **i32), permutation=None)


def calls(device):
    """Each entry point on the empty batch: ``{op: call(module, batch_info)}``; tensors of no tokens."""
    def empty(*shape):
        return torch.zeros(0, H, *shape, device=device)

    B = torch.zeros(1, H * (QK + VD), R, device=device)  # B_buf (L, H*(qk+vd), R)
    A = torch.zeros(1, R, C, device=device)  # A_buf (L, R, C)
    return {"step_a_q": lambda m, bi: m.step_a_q_fwd(empty(QK), B, bi, QK + VD),
            "step_b_q": lambda m, bi: m.step_b_q_fwd(empty(R), A, bi, empty(C)),
            "step_a_v": lambda m, bi: m.step_a_v_fwd(empty(C), A, bi),
            "step_b_v": lambda m, bi: m.step_b_v_fwd(empty(R), B, bi, empty(VD), QK, VD)}


def outcome(call) -> tuple[bool, str]:
    """``(raised, what happened)``: ``raises RuntimeError('...')`` or ``returns (shape)``."""
    try:
        out = call()
        if out.is_cuda:
            torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - the entry point's error is the result
        return True, f"raises {type(exc).__name__}({str(exc)!r})"
    return False, f"returns {tuple(out.shape)}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheel", required=True, help="an sglang wheel with the kv_b kernels (0.5.12+)")
    ap.add_argument("--variant", default="default", choices=("default", "trt"),
                    help="the default kv_b file, or the TRT-LLM-style one (0.5.13+) with its switches off")
    args = ap.parse_args(argv)
    try:
        mod = load(args.wheel, False, args.variant)
    except Exception as exc:  # noqa: BLE001 - reported, exit 2
        print(f"cannot load the kernel file: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    device = "cuda" if torch.cuda.is_available() else "cpu"
    release = re.match(r"sglang-([^-]+)-", Path(args.wheel).name)
    print(f"sglang {release[1] if release else '?'}: {mod.__file__.removeprefix(args.wheel + '/')} on {device}"
          f"{' (Triton interpreter)' if os.environ.get('TRITON_INTERPRET') == '1' else ''}; empty batch "
          "(no segments, no tokens), seg_lens=[]:")
    hits = []
    for op, call in calls(device).items():
        raised, none = outcome(lambda: call(mod, empty_batch(device, None)))
        _, zero = outcome(lambda: call(mod, empty_batch(device, 0)))
        print(f"  {op}: max_len=None {none}; max_len=0 {zero}")
        if raised:
            hits.append(op)
    print("reproduced: " + (", ".join(hits) if hits else "none"))
    return 1 if hits else 0


if __name__ == "__main__":
    sys.exit(main())
