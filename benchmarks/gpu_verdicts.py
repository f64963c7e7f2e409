"""Are the verdicts right on the GPU?  ``python -m kernel_oracle.benchmarks.gpu_verdicts`` on a CUDA machine.

Note [What is checked]
----------------------
(a) **TF32.**  A plain Triton step kernel (``out = x @ w``, K loop, ``tl.dot`` with its default
    ``input_precision``: TF32 on NVIDIA GPUs, raw fp32 operands, which the tensor cores truncate --
    what SGLang's kv_b kernels do in fp32) on random data at step-like shapes, judged by
    :func:`kernel_oracle.reference.tolerance.compare` against the float64 product with the
    oracle's TF32 baselines.  Counted per shape: false alarms against the worst of the
    round-to-nearest and truncated baselines (the rule; expected 0), against round-to-nearest alone
    (the old rule; expected most draws on a handful of elements), and how often two mutants are
    caught (operands cut to 8 mantissa bits; the last K term dropped; expected every draw).
(b) **Shared memory.**  Every LoRA op of our kernels in bf16, fp16 and fp32, segment- and
    token-major, at the largest sizes (R=128, kv_lora_rank=1536, H=128), through the harness
    (``check_case`` with the ``triton`` target: its declared precision per op): no
    ``OutOfResources``, a passing verdict, and the configuration that launched versus the one the
    estimate chose (``kernels/lora/_smem.py``).
(c) **Specializations.**  Compiled kernels in Triton's in-memory caches of the six LoRA kernels
    before and after 50 random cases at fixed model sizes (batches change: segment counts and
    lengths, permutation, CUDA-graph padding), and after 50 more with random sizes too.

Prints one table per part; exit status 1 if (a)'s rule raised a false alarm or missed a mutant, or
(b) raised or failed.  ``--draws N`` (a), ``--cases N`` (c), ``--json PATH`` writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

import torch
import triton
import triton.language as tl

from kernel_oracle.reference.tolerance import compare, round_to_tf32

# (a): (M, K, N) of the steps at realistic sizes: A_v (tokens*heads, C, R), A_q (.., qk, R), B (.., R, C)
TF32_SHAPES = ((4096, 512, 64), (4096, 1536, 128), (8192, 128, 32), (4096, 64, 512), (2048, 128, 1536))
MODES = {0: "tl.dot default (TF32, raw operands)", 1: "mutant: operands cut to 8 mantissa bits",
         2: "mutant: last K term dropped"}
# (b)
LARGEST = dict(H=128, qk=128, vd=128, C=1536, R=128)


@triton.jit
def step_kernel(x_ptr, w_ptr, o_ptr, M, N, K, sxm, sxk, swk, swn, som, son,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, MODE: tl.constexpr):
    """o (M,N) = x (M,K) @ w (K,N) in fp32 with ``tl.dot``'s default precision; MODE 1/2: the mutants."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    k_end = K - 1 if MODE == 2 else K
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(x_ptr + rm[:, None] * sxm + kk[None, :] * sxk, mask=(rm < M)[:, None] & (kk < k_end)[None, :],
                    other=0.0)
        b = tl.load(w_ptr + kk[:, None] * swk + rn[None, :] * swn, mask=(kk < k_end)[:, None] & (rn < N)[None, :],
                    other=0.0)
        if MODE == 1:
            a = (a.to(tl.int32, bitcast=True) & -32768).to(tl.float32, bitcast=True)
            b = (b.to(tl.int32, bitcast=True) & -32768).to(tl.float32, bitcast=True)
        acc = tl.dot(a, b, acc)
    tl.store(o_ptr + rm[:, None] * som + rn[None, :] * son, acc, mask=(rm < M)[:, None] & (rn < N)[None, :])


def run_step(x: torch.Tensor, w: torch.Tensor, mode: int) -> torch.Tensor:
    M, K = x.shape
    N = w.shape[1]
    out = torch.empty(M, N, dtype=torch.float32, device=x.device)
    grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
    step_kernel[grid](x, w, out, M, N, K, x.stride(0), x.stride(1), w.stride(0), w.stride(1), out.stride(0),
                      out.stride(1), BM=64, BN=64, BK=32, MODE=mode)
    return out


def tf32_verdicts(shape: tuple[int, int, int], draws: int, device="cuda") -> dict:
    """(a) for one shape: per mode, draws failing the rule and the round-to-nearest-only rule."""
    M, K, N = shape
    torch.backends.cuda.matmul.allow_tf32 = False  # the baselines: exact fp32 products of rounded operands
    out = {m: {"rule_fail": 0, "rne_only_fail": 0, "max_ratio": 0.0, "mismatched_rne_only": []} for m in MODES}
    for seed in range(draws):
        g = torch.Generator(device=device).manual_seed(seed)
        x = torch.randn(M, K, generator=g, device=device)
        w = torch.randn(K, N, generator=g, device=device) * K ** -0.5
        ref = x.double() @ w.double()
        defined = torch.ones_like(ref, dtype=torch.bool)
        rne = round_to_tf32(x, "rne") @ round_to_tf32(w, "rne")
        trunc = round_to_tf32(x, "trunc") @ round_to_tf32(w, "trunc")
        for mode in MODES:
            got = run_step(x, w, mode)
            c = compare(got, ref, defined, family="lora", baseline=[rne, trunc])
            old = compare(got, ref, defined, family="lora", baseline=rne)
            o = out[mode]
            o["rule_fail"] += not c.ok
            o["rne_only_fail"] += not old.ok
            o["max_ratio"] = max(o["max_ratio"], c.ratio)
            o["mismatched_rne_only"].append(old.mismatched)
    return out


def _lora_case(op: str, dtype: str, seed: int, *, dims: dict, rng: random.Random, path_rows: str):
    from kernel_oracle.harness.check import Case
    from kernel_oracle.harness.problem_lora import LoRAProblem

    if path_rows == "tok":  # decode-like: many one-token segments
        seg_lens = tuple(rng.choice((1, 1, 1, 0)) for _ in range(rng.randint(8, 96)))
    else:
        seg_lens = tuple(rng.choice((0, 1, 15, 17, 63, 65, 127, 129, 300)) for _ in range(rng.randint(1, 6)))
    L = 4
    R = dims["R"]
    ranks = tuple(rng.choice((R, R // 2, 5, 0, R)) for _ in range(L))
    slots = tuple(rng.randrange(L) for _ in seg_lens)
    pad = rng.choice((None, None, len(seg_lens) + rng.randint(0, 8)))
    return Case(LoRAProblem(op=op, seg_lens=seg_lens, weight_indices=slots, lora_ranks=ranks,
                            scalings=tuple(rng.choice((0.5, 1.0, 2.0)) for _ in range(L)), dtype=dtype, seed=seed,
                            permute=rng.random() < 0.5, cuda_graph_pad_to=pad, **dims))


def largest_sizes(device="cuda") -> list[dict]:
    """(b): every op, dtype and path at the largest sizes through the harness."""
    import kernel_oracle.kernels.lora._launch as launch
    from kernel_oracle.fuzz.targets import resolve_target
    from kernel_oracle.harness.check import Case, check_case
    from kernel_oracle.harness.problem_lora import LoRAProblem
    from kernel_oracle.kernels.lora._smem import fit_config, smem_limit
    from kernel_oracle.kernels.options import options

    target = resolve_target("triton", device)
    rows = []
    rng = random.Random(2026)
    for op in ("step_a_q", "step_b_q", "step_a_v", "step_b_v", "q_side_fused", "v_side_fused"):
        for dtype in ("bfloat16", "float16", "float32"):
            for path in ("seg", "tok"):
                launch.forget_fitted()
                case = Case(LoRAProblem(op=op, seg_lens=(300, 0, 129, 64), weight_indices=(3, 2, 0, 1),
                                        lora_ranks=(128, 64, 5, 128), scalings=(1.0, 0.5, 2.0, 1.5), dtype=dtype,
                                        seed=rng.randrange(10**6), permute=True, **LARGEST))
                t0 = time.monotonic()
                try:
                    with options(lora={"route": path}):
                        verdict = check_case(target, case, device)
                    ok, what = verdict.ok, (verdict.kind or "pass") if not verdict.ok else "pass"
                    msg = "" if verdict.ok else verdict.message.splitlines()[0]
                except Exception as exc:  # noqa: BLE001 - an OutOfResources here is the finding this part looks for
                    ok, what, msg = False, type(exc).__name__, str(exc).splitlines()[0]
                fitted = next(iter(launch.fitted().values()), None)
                default = {k: v for k, v in launch.BLOCKS[op][path].items() if k != "num_warps"}
                torch_dtype = getattr(torch, dtype)
                est = fit_config(op, default, block_r=128, elem_bytes=torch_dtype.itemsize,
                                 transformed=dtype == "float32", limit=smem_limit(device))
                rows.append({"op": op, "dtype": dtype, "path": path, "ok": ok, "verdict": what, "message": msg,
                             "precision": target.precision_for(op),
                             "launched": None if fitted is None else {**fitted[0], "num_stages": fitted[2]},
                             "estimated": {**est[0], "num_stages": est[1]},
                             "seconds": round(time.monotonic() - t0, 2)})
    return rows


def compiled_kernels(fn) -> int:
    """Kernels compiled so far for a JITFunction (Triton's in-memory cache; layouts differ by version)."""
    caches = getattr(fn, "device_caches", None)
    if caches is not None:
        return sum(len(v[0]) if isinstance(v, tuple) else len(v) for v in caches.values())
    return sum(len(v) for v in getattr(fn, "cache", {}).values())


def specializations(n_cases: int, device="cuda", rounds: int = 3) -> list[dict]:
    """(c): compiled kernels before/after ``n_cases`` random LoRA cases, fixed sizes, then ``rounds``
    rounds of random sizes (the new compilations per round show whether the variants saturate)."""
    import kernel_oracle.kernels.lora._kernels as K
    from kernel_oracle.fuzz.targets import resolve_target
    from kernel_oracle.harness.check import check_case

    fns = [f for op in ("step_a_q", "step_b_q", "step_a_v", "step_b_v", "q_side_fused", "v_side_fused")
           for f in (getattr(K, f"{op}_kernel"), getattr(K, f"{op}_kernel").generic)]  # both families
    target = resolve_target("triton", device)
    rng = random.Random(7)
    rows = []
    rows_spec = [("fixed sizes, random batches", lambda: dict(H=16, qk=128, vd=128, C=512, R=64))]
    rows_spec += [(f"random sizes and batches, round {i + 1}", lambda: dict(
        H=rng.choice((1, 3, 16, 17)), qk=rng.choice((16, 47, 128)), vd=rng.choice((16, 65, 128)),
        C=rng.choice((64, 255, 512)), R=rng.choice((16, 32, 64, 128)))) for i in range(rounds)]
    for label, sizes in rows_spec:
        before = sum(compiled_kernels(f) for f in fns)
        failures = 0
        t0 = time.monotonic()
        for i in range(n_cases):
            op = rng.choice(("step_a_q", "step_b_q", "step_a_v", "step_b_v", "q_side_fused", "v_side_fused"))
            case = _lora_case(op, rng.choice(("bfloat16", "float16", "float32")), i, dims=sizes(), rng=rng,
                              path_rows=rng.choice(("seg", "tok")))
            failures += not check_case(target, case, device).ok
        after = sum(compiled_kernels(f) for f in fns)
        rows.append({"cases": label, "n": n_cases, "compiled_before": before, "compiled_after": after,
                     "new_per_case": round((after - before) / n_cases, 2), "failing_cases": failures,
                     "seconds": round(time.monotonic() - t0, 1)})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=20, help="random draws per shape in part (a)")
    ap.add_argument("--cases", type=int, default=50, help="random LoRA cases per row of part (c)")
    ap.add_argument("--json", help="write the numbers to this file")
    ap.add_argument("--parts", default="abc", help="which parts to run (default: abc)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_verdicts needs a CUDA device (it measures what the GPU does)", file=sys.stderr)
        return 2
    bad = False
    print(f"# {torch.cuda.get_device_name()}  torch {torch.__version__}  triton {triton.__version__}\n")
    print("## (a) TF32: a plain tl.dot step kernel (fp32, default precision) against the rule")
    print(f"{'M x K x N':>18} | {'kernel':<40} | rule fails | RNE-only fails | "
          "mismatched (RNE-only, median) | max ratio")
    tf32, big, spec = {}, [], []
    for shape in (TF32_SHAPES if "a" in args.parts else ()):
        res = tf32_verdicts(shape, args.draws)
        tf32["x".join(map(str, shape))] = res
        for mode, r in res.items():
            med = sorted(r["mismatched_rne_only"])[len(r["mismatched_rne_only"]) // 2]
            print(f"{'x'.join(map(str, shape)):>18} | {MODES[mode]:<40} | {r['rule_fail']:>4}/{args.draws:<5} | "
                  f"{r['rne_only_fail']:>6}/{args.draws:<7} | {med:>29} | {r['max_ratio']:.3g}")
            bad |= (r["rule_fail"] != 0) if mode == 0 else (r["rule_fail"] != args.draws)
    print("\n## (b) our LoRA kernels at R=128, kv_lora_rank=1536, H=128 (no OutOfResources, right values)")
    big = largest_sizes() if "b" in args.parts else []
    print(f"{'op':<13} {'dtype':<9} {'path':<4} {'precision':<9} {'verdict':<16} launched (estimate's choice)")
    for r in big:
        same = "" if r["launched"] == r["estimated"] else f"  [estimate chose {r['estimated']}]"
        print(f"{r['op']:<13} {r['dtype']:<9} {r['path']:<4} {r['precision']:<9} {r['verdict']:<16} "
              f"{r['launched']}{same} {r['message']}")
        bad |= not r["ok"]
    print(f"\n## (c) compiled LoRA kernel specializations over {args.cases} random cases")
    spec = specializations(args.cases) if "c" in args.parts else []
    for r in spec:
        print(f"{r['cases']:<30} compiled {r['compiled_before']:>4} -> {r['compiled_after']:>4} "
              f"({r['new_per_case']} per case; {r['failing_cases']} failing cases; {r['seconds']} s)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"tf32": tf32, "largest": big, "specializations": spec}, fh, indent=1, default=str)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
