"""Triage of flashinfer-cudnn findings: one layout property changed at a time, each variant in its
own process (an illegal memory access ends the CUDA context of the process that hit it).

``python tools/triage_flashinfer_cudnn.py [--json PATH] [--only NAME,...]`` on a GPU machine with the
wheels installed (scripts/flashinfer_wheels.sh).  Each variant prints err / allowed against the
float64 oracle under the tolerance rule, or the exception.  The variants isolate the properties the
differential tests found the engine to get wrong (docs/flashinfer_cudnn.md has the verdicts).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from typing import Optional

# name -> (lens, H, D, Dv, v layout, o layout, final-entry rule)
#   v layout: "same" (v packed like q/k), "reversed" (own buffer, sequences in reverse order),
#             "strided" (a view into an interleaved (T,3,H,Dv) buffer, same order), "strided_reversed"
#   o layout: "same" or "reversed"
#   final: "last" (indptr[B] = end of the last sequence, as SGLang's builder writes) or "max"
#          (indptr[B] = the largest end: the extent of the packed tensor)


@dataclass(frozen=True)
class Variant:
    name: str
    lens: tuple
    H: int = 2
    D: int = 64
    Dv: Optional[int] = None
    v: str = "same"
    o: str = "same"
    final: str = "last"


VARIANTS = (
    Variant("contiguous", (12, 21)),
    Variant("v offsets differ (own buffer, reversed order)", (12, 21), v="reversed"),
    Variant("v strided (qkv view), same order", (12, 21), v="strided"),
    Variant("v strided and reversed (the edge case)", (12, 21), v="strided_reversed"),
    Variant("o reversed, small", (5, 18, 11), o="reversed"),
    Variant("o reversed, at size (the slow case)", (3000, 777, 1500), H=8, D=96, o="reversed"),
    Variant("o reversed, at size, final = extent", (3000, 777, 1500), H=8, D=96, o="reversed", final="max"),
    Variant("o reversed, 2 heads, D=64", (3000, 777, 1500), o="reversed"),
    Variant("o reversed, two sequences", (1500, 3000), H=8, D=96, o="reversed"),
    Variant("Dv=48, D=64", (12, 21), Dv=48),
    Variant("Dv=32, D=64", (12, 21), Dv=32),
    Variant("Dv=128, D=64", (12, 21), Dv=128),
    Variant("Dv=64, D=128", (12, 21), D=128, Dv=64),
    Variant("Dv=48, D=64, one sequence", (21,), Dv=48),
    Variant("v strided at size", (3000, 777, 1500), H=8, D=96, v="strided"),
)


# fuzz problems (harness.problem_vision.VisionProblem fields): campaign findings and one-change variants
F0003 = dict(lengths=(387, 724, 687, 692, 1), H=16, D=128, dtype="float16", extra_tokens=3, four_d=True,
             max_seqlen_kind="device_tensor", sequence_lengths_4d=True, v_shift=3, seed=3715)
PROBLEMS = {
    "campaign F0003 as found": F0003,
    "F0003 without v_shift": {**F0003, "v_shift": 0},
    "F0003 without the 1-token sequence": {**F0003, "lengths": (387, 724, 687, 692)},
    "F0003 3-D and int max_seqlen": {**F0003, "four_d": False, "max_seqlen_kind": "int", "sequence_lengths_4d": False},
    "F0003 without extra tokens": {**F0003, "extra_tokens": 0},
    "one 1-token sequence after a long one": dict(lengths=(300, 1), H=2, D=64, dtype="bfloat16"),
    "1-token sequences only": dict(lengths=(1, 1, 1), H=2, D=64, dtype="bfloat16"),
    "v_shift 3 alone": dict(lengths=(300, 200), H=2, D=64, dtype="bfloat16", v_shift=3),
    "empty batch (no tokens)": dict(lengths=(), H=1, D=80, dtype="float16"),
    "all-zero lengths with tokens present": dict(lengths=(0, 0), H=1, D=80, dtype="float16", extra_tokens=4),
}
# one process, in order: does an earlier call change a later one (the engine's graph cache)?
SEQUENCES = {
    "o reversed at size after v strided at size": ("v strided at size", "o reversed, at size (the slow case)"),
}


def _build(var: Variant, device="cuda"):
    import torch

    from kernel_oracle.reference.vision_metadata import VisionAttentionMetadata, bucket_batch_size, bucket_max_seqlen

    gen = torch.Generator().manual_seed(0)
    lens, H, D = list(var.lens), var.H, var.D
    Dv = var.Dv or D
    T = sum(lens)

    def rnd(*shape):
        return torch.randn(*shape, generator=gen).to(device, torch.bfloat16)

    q, k = rnd(T, H, D), rnd(T, H, D)
    fwd = [sum(lens[:b]) for b in range(len(lens))]
    rev, t = [0] * len(lens), 0
    for b in reversed(range(len(lens))):
        rev[b], t = t, t + lens[b]
    if var.v.startswith("strided"):
        v = rnd(T, 3, H, Dv)[:, 2]
    else:
        v = rnd(T, H, Dv)
    v_tok = rev if var.v.endswith("reversed") else fwd
    o_tok = rev if var.o == "reversed" else fwd
    B = len(lens)
    B_pad = bucket_batch_size(B)
    rows = []
    for toks, stride in ((fwd, q.stride(0)), (v_tok, v.stride(0)), (o_tok, H * Dv)):
        last = toks[-1] + lens[-1]
        end = max(s + n for s, n in zip(toks, lens)) if var.final == "max" else last
        rows += [s * stride for s in toks] + [end * stride] * (B_pad - B) + [end * stride]
    md = VisionAttentionMetadata(packed_indptrs=torch.tensor(rows, dtype=torch.int32, device=device),
                                 sequence_lengths=torch.tensor(lens + [0] * (B_pad - B), dtype=torch.int32,
                                                               device=device),
                                 flashinfer_max_seqlen=bucket_max_seqlen(max(lens)))
    return (q, k, v, None, None, None), {"forward_metadata": md}


def run_one(name: str) -> dict:
    if name in SEQUENCES:
        *before, last = SEQUENCES[name]
        for n in before:
            run_one(n)
        return {**run_one(last), "variant": name}
    if name in PROBLEMS:
        return _run_problem(name)
    import torch

    from kernel_oracle.fuzz.targets import resolve_target
    from kernel_oracle.reference.tolerance import compare
    from kernel_oracle.reference.vision import flashinfer_cudnn_oracle

    var = next(v for v in VARIANTS if v.name == name)
    target = resolve_target("flashinfer-cudnn", "cuda")
    if not target.available:
        return {"variant": name, "error": f"unavailable: {target.reason}"}
    args, kwargs = _build(var)
    try:
        with target.poison("vision"):
            out = target.entry("vision")(*args, **kwargs)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - the verdict
        return {"variant": name, "error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"}
    ref = flashinfer_cudnn_oracle(*args, **kwargs)
    base = flashinfer_cudnn_oracle(*args, **kwargs, faithful=True)
    res = compare(out, ref.value, ref.defined.to(out.device), family="vision", baseline=base.baselines)
    outside = int((~torch.isnan(out.float()) & ~ref.defined.to(out.device)).sum())
    return {"variant": name, "ok": res.ok, "err": res.err, "allowed": res.allowed,
            "mismatched": res.mismatched, "total": res.total, "written_outside": outside}


def _run_problem(name: str) -> dict:
    from kernel_oracle.harness.check import Case, check_case
    from kernel_oracle.harness.problem_vision import VisionProblem
    from kernel_oracle.fuzz.targets import resolve_target

    target = resolve_target("flashinfer-cudnn", "cuda")
    verdict = check_case(target, Case(VisionProblem(**PROBLEMS[name])), "cuda")
    if verdict.ok:
        return {"variant": name, "ok": True, "verdict": "ok: passes fuzz.check (tolerance rule, poison, contract)"}
    return {"variant": name, "error": f"{verdict.kind}: {verdict.message.splitlines()[0][:240]} "
                                      f"{' '.join(verdict.message.splitlines()[1:4])[:240]}"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--only", default=None, help="semicolon-separated variant names")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # the child process
    args = ap.parse_args(argv)
    if args.one is not None:
        print(json.dumps(run_one(args.one)))
        return 0
    names = ([v.name for v in VARIANTS] + list(PROBLEMS) + list(SEQUENCES)) if args.only is None \
        else args.only.split(";")
    results = []
    for name in names:
        try:
            p = subprocess.run([sys.executable, __file__, "--one", name],
                               capture_output=True, text=True, timeout=120)
            lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
            r = json.loads(lines[-1]) if lines else {"variant": name, "error": f"exit {p.returncode}: "
                                                                                 f"{p.stderr.strip()[-300:]}"}
        except subprocess.TimeoutExpired:
            r = {"variant": name, "error": "timed out after 120 s"}
        results.append(r)
        verdict = r.get("error") or r.get("verdict") or (
            f"{'ok' if r['ok'] else 'WRONG'}: err {r['err']:.3g} (allowed {r['allowed']:.3g}), "
            f"{r['mismatched']}/{r['total']} mismatched, {r['written_outside']} written outside")
        print(f"{name:55s} {verdict}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
