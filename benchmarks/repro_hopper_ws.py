"""A minimal attention forward, warp-specialized by triton's Hopper pass or not, against float64.

python -m kernel_oracle.benchmarks.repro_hopper_ws      (a Hopper GPU)
python benchmarks/repro_hopper_ws.py                    (the same file alone: torch and triton only)
python -m kernel_oracle.benchmarks.repro_hopper_ws --ours   (our vision kernel so configured, 2x16384 d128)
python -m kernel_oracle.benchmarks.repro_hopper_ws --hunt JOBS ROUNDS [--toy] [--noise]
    (--ours, or with --toy this file's kernel, once per process, each compiling afresh into an empty Triton
    cache, JOBS processes sharing the GPU at a time, ROUNDS times: which compiled binaries gave wrong
    outputs; with --noise one process at a time checks while JOBS-1 others only run matrix products)

Triton 3.6 warp-specializes a loop marked ``tl.range(..., warp_specialize=True)`` on sm_90 only when
the kernel asks for 4 warps and every tile the loop loads comes through a tensor descriptor
(``tl.make_tensor_descriptor``); it then runs 12 warps: a producer warpgroup (the loads) and two
consumer warpgroups (64 rows each).  Compiled offline for sm_90, our vision kernel so built was
specialized (``ttg.warp_specialize`` in its TTGIR), and on the H200 its output was wrong (session 17,
docs/benchmarks/vision.md).  This file keeps only a one-head attention with descriptor loads of q, k
and v: the key loop with or without the flag (``WS``), on sequences of whole key blocks and with a
ragged last one (``MASK``: keys past ``n`` get -inf logits).  Each variant prints its max error
against a float64 softmax-attention and its speed (``triton.testing.do_bench``, median); a variant
whose error passes 0.05 (bf16 outputs of unit-scale data are right to ~0.01) counts as wrong, and the
exit status is 1 when a warp-specialized variant is wrong while its plain twin is right.
"""

from __future__ import annotations

import itertools
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def _attn(Q, K, V, O, n, scale, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
          WS: tl.constexpr, MASK: tl.constexpr, STORE_DESC: tl.constexpr):
    """(n, D) q, k, v of one head (row-major, contiguous); program ``pid`` writes rows pid*BLOCK_M ..."""
    pid = tl.program_id(0)
    q_desc = tl.make_tensor_descriptor(Q, shape=[n, D], strides=[D, 1], block_shape=[BLOCK_M, D])
    k_desc = tl.make_tensor_descriptor(K, shape=[n, D], strides=[D, 1], block_shape=[BLOCK_N, D])
    v_desc = tl.make_tensor_descriptor(V, shape=[n, D], strides=[D, 1], block_shape=[BLOCK_N, D])
    q = q_desc.load([pid * BLOCK_M, 0])
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    for start in tl.range(0, n, BLOCK_N, warp_specialize=WS):
        k = k_desc.load([start, 0])
        s = tl.dot(q, tl.trans(k)) * scale
        if MASK:
            s = tl.where((start + tl.arange(0, BLOCK_N) < n)[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = v_desc.load([start, 0])
        acc = tl.dot(p.to(V.dtype.element_ty), v, acc)
        m_i = m_new
    out = (acc / l_i[:, None]).to(O.dtype.element_ty)
    if STORE_DESC:  # rows past n are clipped by the tensor memory accelerator
        o_desc = tl.make_tensor_descriptor(O, shape=[n, D], strides=[D, 1], block_shape=[BLOCK_M, D])
        o_desc.store([pid * BLOCK_M, 0], out)
    else:
        rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, D)
        tl.store(O + rows[:, None] * D + cols[None, :], out, mask=(rows < n)[:, None])


def _allocator(size: int, alignment: int, stream):
    """Global scratch for the descriptors (triton.set_allocator)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def run(n: int, d: int, block_n: int, ws: bool, block_m: int = 128, stages: int = 2, store_desc: bool = False):
    """(max abs error against float64, ms per call) of one variant on fresh random bf16 data; raises if
    ``ws`` and the compiled kernel was not warp-specialized."""
    q, k, v = (torch.randn(n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = torch.full_like(q, float("nan"))
    scale = d ** -0.5 * 1.4426950408889634  # log2(e): the kernel exponentiates with exp2
    grid = (triton.cdiv(n, block_m),)

    def call():
        return _attn[grid](q, k, v, out, n, scale, D=d, BLOCK_M=block_m, BLOCK_N=block_n, WS=ws,
                           MASK=n % block_n != 0, STORE_DESC=store_desc, num_warps=4, num_stages=stages)

    kernel = call()
    torch.cuda.synchronize()
    if ws and "ttg.warp_specialize" not in kernel.asm["ttgir"]:
        raise RuntimeError("not warp-specialized by this triton")
    p = torch.softmax((q.double() @ k.double().T) * d ** -0.5, dim=-1)
    err = float((out.double() - p @ v.double()).abs().max())
    ms = triton.testing.do_bench(call, warmup=10, rep=50, return_mode="median")
    return err, ms


def ours(rounds: int = 4) -> int:
    """Our vision kernel with the warp-specialized config on 2x16384 d128 (whole key blocks, 16 heads) against
    its default config on the same fresh data, ``rounds`` times per dtype: non-finite outputs and the max
    difference.  1 when any round differs by more than 0.05 or has a non-finite output, else 0."""
    import os

    from kernel_oracle.kernels.vision import KernelConfig, plan_attention
    from kernel_oracle.kernels.vision.attention import UNSAFE_WS_ENV
    from kernel_oracle.reference.vision_metadata import prepare_flashinfer_cudnn_metadata

    os.environ[UNSAFE_WS_ENV] = "1"  # the config is withdrawn (Note [Warp specialization]); this reproduces why

    print("| dtype | config | round | non-finite | max diff vs the default |\n|---|---|---:|---:|---:|")
    bad = False
    for dtype, whole, rnd in itertools.product((torch.float16, torch.bfloat16), (True, False), range(rounds)):
        q, k, v = (torch.randn(32768, 16, 128, device="cuda", dtype=dtype) for _ in range(3))
        md = prepare_flashinfer_cudnn_metadata(torch.tensor([0, 16384, 32768]), "cuda", elem_per_token=16 * 128)
        ref = plan_attention(q, k, v, None, None, None, forward_metadata=md).run()
        cfg = KernelConfig(128, 128, 4, 2, True, True, whole_blocks=whole)
        out = plan_attention(q, k, v, None, None, None, forward_metadata=md, config=cfg).run()
        torch.cuda.synchronize()
        fin = torch.isfinite(out)
        n_bad = int((~fin).sum())
        diff = float((out.float() - ref.float())[fin].abs().max()) if n_bad < out.numel() else float("nan")
        bad |= n_bad > 0 or not diff < 0.05
        name = "WS, whole blocks" if whole else "WS, masked"
        print(f"| {str(dtype).replace('torch.', '')} | {name} | {rnd} | {n_bad} | {diff:.3g} |", flush=True)
    return 1 if bad else 0


def _ws_digests(cache: str) -> list[str]:
    """sha256 prefixes of the warp-specialized cubins that a process compiled into Triton cache ``cache``."""
    import glob
    import hashlib
    import os

    out = []
    for ttgir in glob.glob(os.path.join(cache, "*", "*.ttgir")):
        if "ttg.warp_specialize" in open(ttgir).read():
            for cubin in glob.glob(os.path.join(os.path.dirname(ttgir), "*.cubin")):
                out.append(hashlib.sha256(open(cubin, "rb").read()).hexdigest()[:12])
    return sorted(out)


def toy_once() -> int:
    """This file's warp-specialized kernel as our config runs it (2 stages, output through a descriptor, 4
    warps), on whole and on ragged key blocks, four fresh draws each: 1 when any output is wrong."""
    triton.set_allocator(_allocator)
    bad = False
    for n, rnd in itertools.product((16384, 16000), range(4)):
        err, ms = run(n, 128, 128, True, store_desc=True)
        print(f"| toy | n={n} | {rnd} | {err:.3g} | {4 * n * n * 128 / ms / 1e9:.0f} TFLOP/s |", flush=True)
        bad |= not err < 0.05
    return 1 if bad else 0


def _noise(seconds: float) -> None:
    """Only bf16 matrix products for ``seconds``: a GPU neighbour that computes nothing warp-specialized."""
    import time

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    end = time.time() + seconds
    while time.time() < end:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()


def hunt(jobs: int, rounds: int, toy: bool = False, noise: bool = False) -> int:
    """``--ours`` (one round; ``--toy``: :func:`toy_once`) in ``jobs`` concurrent processes, ``rounds`` times
    each, every process with an empty Triton cache of its own; with ``noise``, ``rounds`` checking processes
    one after another while ``jobs - 1`` others only run matrix products.  Prints each process's result and
    the digests of its warp-specialized cubins, then a table of digest -> processes, processes with a
    non-finite or wrong output.  1 when any process was wrong."""
    import collections
    import concurrent.futures
    import os
    import subprocess
    import tempfile

    me = [sys.executable, "-m", "kernel_oracle.benchmarks.repro_hopper_ws"]

    def one(i: int):
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "TRITON_CACHE_DIR": cache}
            r = subprocess.run(me + ["--toy-once" if toy else "--ours-once"],
                               env=env, capture_output=True, text=True, timeout=300)
            return i, r.returncode, r.stdout + r.stderr[-400:], _ws_digests(cache)

    seen = collections.defaultdict(lambda: [0, 0])
    bad_runs = 0
    n_runs = rounds if noise else jobs * rounds
    neighbours = [subprocess.Popen(me + ["--noise", "600"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                  for _ in range(jobs - 1 if noise else 0)]
    try:
        with concurrent.futures.ThreadPoolExecutor(1 if noise else jobs) as pool:
            results = list(pool.map(one, range(n_runs)))
    finally:
        for p in neighbours:
            p.kill()
    for i, rc, text, digests in results:
        bad_runs += rc != 0
        print(f"process {i}: exit {rc}, ws cubins {' '.join(digests)}")
        if rc != 0:
            print("\n".join(line for line in text.splitlines() if line.startswith("|") or "Error" in line))
        for dg in set(digests):
            seen[dg][0] += 1
            seen[dg][1] += rc != 0
    print("| ws cubin digest | processes | wrong |\n|---|---:|---:|")
    for dg, (n, b) in sorted(seen.items()):
        print(f"| {dg} | {n} | {b} |")
    print(f"{bad_runs} of {n_runs} processes wrong")
    return 1 if bad_runs else 0


def main() -> int:
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9:
        print("repro_hopper_ws needs a Hopper (sm_90) or newer GPU", file=sys.stderr)
        return 2
    if "--ours" in sys.argv[1:]:
        return ours()
    if "--ours-once" in sys.argv[1:]:
        return ours(rounds=1)
    if "--hunt" in sys.argv[1:]:
        at = sys.argv.index("--hunt")
        return hunt(int(sys.argv[at + 1]), int(sys.argv[at + 2]), toy="--toy" in sys.argv, noise="--noise" in sys.argv)
    if "--toy-once" in sys.argv[1:]:
        return toy_once()
    if "--noise" in sys.argv[1:]:
        _noise(float(sys.argv[sys.argv.index("--noise") + 1]))
        return 0
    triton.set_allocator(_allocator)
    torch.manual_seed(0)
    print(f"triton {triton.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print("| n | d | BLOCK_N | stages | output store | plain: max err, TFLOP/s | warp-specialized: max err, TFLOP/s |\n"
          "|---:|---:|---:|---:|---|---|---|")
    bad = False
    cases = [(shape, store_desc, 2) for shape, store_desc in itertools.product(
        ((4096, 128, 128), (4096, 128, 64), (4000, 128, 64), (4096, 64, 64), (16384, 128, 128)), (False, True))]
    cases += [((4096, 128, 64), True, 3), ((4000, 128, 64), True, 3), ((16384, 128, 64), True, 3),
              ((16384, 128, 64), True, 4)]
    for (n, d, block_n), store_desc, stages in cases:
        cells = []
        errs = []
        for ws in (False, True):
            try:
                err, ms = run(n, d, block_n, ws, store_desc=store_desc, stages=stages)
                errs.append(err)
                cells.append(f"{err:.3g}, {4 * n * n * d / ms / 1e9:.0f}")
            except Exception as exc:  # noqa: BLE001 - a variant that does not build is reported, not fatal
                errs.append(None)
                cells.append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:80]}")
        bad |= errs[0] is not None and errs[0] < 0.05 and (errs[1] is None or not errs[1] < 0.05)
        print(f"| {n} | {d} | {block_n} | {stages} | {'descriptor' if store_desc else 'pointers'} | {cells[0]} | {cells[1]} |")
    print("a warp-specialized variant is wrong where its plain twin is right" if bad else "every variant right")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
