"""The vision warm call's own Python, piece by piece: where its host microseconds go.

python tools/vision_host_micro.py [--n N] [--rounds R] [--json PATH]

The warm call of ``flashinfer_cudnn_attention`` has a bar of 10 us of host time.  About 4.4 of those
are Triton's C launcher and the CUDA driver (``tools/launch_overhead.py``); this probe times
everything else, with the C launch replaced by a no-op (``"".format``, a C function that takes any
arguments and does nothing), so it runs on any machine: CUDA tensors where there is a GPU, else CPU
tensors (the launch is then planned under the Triton interpreter, set here before the kernel module is
imported; nothing timed goes through it).

Rows, us per call (``timeit``, ``n`` calls per round, the fastest of ``rounds``):

* the code as checked out: the warm call through the entry point (both metadata forms: a
  ``forward_metadata`` object, and ``cu_seqlens`` with the ``sequence_lengths`` / ``max_seqlen``
  keywords), the direct launcher alone, the output allocation.  To compare two versions of the
  vision code, swap it under this script (which runs on either): ``git checkout REV -- kernels/vision``,
  run, then ``git checkout HEAD -- kernels/vision``, run (``bench_vision --host`` likewise);
* single operations and alternative formulations of the same check (fixed statements, the same at
  every commit): what each tensor attribute read, the ambient strict read, the counters, the
  launcher call's argument building cost.

Compare rows within one run: the device machines' hosts differ by up to 1.5x.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import timeit

import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:  # CPU tensors launch only under the interpreter (read when the kernel module is imported)
    os.environ.setdefault("TRITON_INTERPRET", "1")

LENS, H, D = (64, 64, 64, 64), 2, 64  # bench_vision --host's tiny batch, bf16


def _noop_direct(launch, q, k, v, out):
    """``bench_vision.noop_direct_launch``: the direct launch's Python with a C launch that does nothing."""
    from kernel_oracle.benchmarks.bench_vision import noop_direct_launch

    return noop_direct_launch(launch, q, k, v, out)


def _setup():
    from kernel_oracle.kernels.vision import attention
    from kernel_oracle.reference.vision_metadata import prepare_flashinfer_cudnn_metadata

    device = "cuda" if HAS_CUDA else "cpu"
    T = sum(LENS)
    q, k, v = (torch.randn(T, H, D, dtype=torch.bfloat16, device=device) for _ in range(3))
    cu = torch.tensor((0,) + LENS).cumsum(0)
    md = prepare_flashinfer_cudnn_metadata(cu, device, elem_per_token=H * D)
    return attention, q, k, v, md


def _warm(attention, call):
    """Make ``call`` a warm repeat with a no-op direct launcher: a miss (a real launch, once), then
    repeats (the keyed hit that remembers, then the shortcut)."""
    attention.clear_launch_cache()
    out = call()
    (entry,) = attention._LAUNCH_CACHE.values()
    launch = entry.launch
    q, k, v = call.qkv
    launch._direct[0] = _noop_direct(launch, q, k, v, out)
    call()
    call()
    if attention._REPEAT is None:
        raise RuntimeError("the call was not remembered (Note [Repeated call]): nothing to time")
    return launch._direct[0], out


def code_rows(n: int, rounds: int) -> list[dict]:
    """The checked-out code: the warm call (both metadata forms), DirectLaunch alone, the allocation."""
    attention, q, k, v, md = _setup()
    f = attention.flashinfer_cudnn_attention

    def by_metadata():
        return f(q, k, v, None, None, None, forward_metadata=md)

    def by_keywords():
        return f(q, k, v, md.packed_indptrs, None, None, sequence_lengths=md.sequence_lengths,
                 max_seqlen=md.flashinfer_max_seqlen)

    by_metadata.qkv = by_keywords.qkv = (q, k, v)
    rows = []
    try:
        direct, out = _warm(attention, by_metadata)
        rows.append(_row("warm call, forward_metadata (no-op launch)", by_metadata, n, rounds))
        rows.append(_row("the direct launcher alone, as the warm call calls it (no-op launch)",
                         lambda: direct(q, k, v, out), n, rounds))
        _warm(attention, by_keywords)
        rows.append(_row("warm call, cu_seqlens + keywords (no-op launch)", by_keywords, n, rounds))
    finally:
        attention.clear_launch_cache()
    rows.append(_row("output allocation, torch.empty_like(q)", lambda: torch.empty_like(q), n, rounds))
    return rows


# (name, statement, setup names): single operations and equivalent formulations, timed with timeit
PIECES = (
    ("q.shape", "q.shape"),
    ("q.stride()", "q.stride()"),
    ("q.dtype", "q.dtype"),
    ("q.device", "q.device"),
    ("q.get_device()", "q.get_device()"),
    ("q.is_cuda", "q.is_cuda"),
    ("q._version", "q._version"),
    ("q.data_ptr()", "q.data_ptr()"),
    ("q, k, v layouts: 12-field tuple built and compared", "(q.shape, q.stride(), q.dtype, q.device, k.shape, "
     "k.stride(), k.dtype, k.device, v.shape, v.stride(), v.dtype, v.device) != layout"),
    ("q, k, v layouts: TensorGuards.check(q, k, v)", "check(q, k, v)"),
    ("metadata state: 8-field tuple built and compared", "(sl._version, sl.data_ptr(), sl.shape, sl.stride(), "
     "pk._version, pk.data_ptr(), pk.shape, pk.stride()) != meta"),
    ("metadata state: version counters and addresses, 4-field tuple", "(sl._version, sl.data_ptr(), "
     "pk._version, pk.data_ptr()) != meta4"),
    ("q, k, v, sl, pk: one TensorGuards.check", "check5(q, k, v, sl, pk)"),
    ("resolve_strict(None)", "resolve_strict(None)"),
    ("the context variable's get()", "strict_get()"),
    ("dict counter += 1", "stats['hits'] += 1"),
    ("4 x data_ptr() and the alignment bits", "a, b, c, d = q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr()\n"
     "(a | b | c | d) & 15"),
    ("Triton hooks: 2 knob reads, getattr(hook, 'calls', 1)", "e, x = knobs.launch_enter_hook, knobs.launch_exit_hook\n"
     "(e is not None and getattr(e, 'calls', 1)) or (x is not None and getattr(x, 'calls', 1))"),
    ("launcher call, f(*grid, s, *head, *ptrs, *tail)", "f(4, 2, 1, 0, *head, *(a, b, c, d), *tail)"),
    ("launcher call, f(*((gx, gy, gz, s) + head + (a, b, c, d) + tail))",
     "f(*((4, 2, 1, 0) + head + (a, b, c, d) + tail))"),
    ("torch.empty_like(q)", "torch.empty_like(q)"),
    ("torch.empty(shape, dtype=, device=)", "torch.empty(shape, dtype=dtype, device=device)"),
    ("torch.empty_strided(shape, strides, dtype=, device=)",
     "torch.empty_strided(shape, strides, dtype=dtype, device=device)"),
)


def piece_rows(n: int, rounds: int) -> list[dict]:
    from triton import knobs

    from kernel_oracle.reference.strict import resolve_strict
    attention, q, k, v, md = _setup()
    sl, pk, out = md.sequence_lengths, md.packed_indptrs, torch.empty_like(q)
    head, tail = tuple(range(9)), tuple(range(42))  # triton 3.6's raw launch: 9 before the pointers, 42 after
    g = dict(q=q, k=k, v=v, sl=sl, pk=pk, out=out, torch=torch, resolve_strict=resolve_strict,
             strict_get=_strict_get(), stats={"hits": 0}, knobs=knobs.runtime, f="".format, head=head, tail=tail,
             a=4096, b=8192, c=12288, d=16384, shape=q.shape, strides=q.stride(), dtype=q.dtype,
             device=q.device,
             layout=(q.shape, q.stride(), q.dtype, q.device, k.shape, k.stride(), k.dtype, k.device,
                     v.shape, v.stride(), v.dtype, v.device),
             meta=(sl._version, sl.data_ptr(), sl.shape, sl.stride(),
                   pk._version, pk.data_ptr(), pk.shape, pk.stride()),
             meta4=(sl._version, sl.data_ptr(), pk._version, pk.data_ptr()))
    guards = _guards()
    if guards is not None:
        g.update(check=guards(q, k, v).check, check5=guards(q, k, v, sl, pk).check)
    rows = [_row("empty statement (the loop itself)", "pass", n, rounds, g)]
    for name, stmt in PIECES:
        if "check" in stmt and guards is None:
            continue
        rows.append(_row(name, stmt, n, rounds, g))
    return rows


def _strict_get():
    from kernel_oracle.reference import strict
    return strict._STRICT.get  # noqa: SLF001 - timing the read itself


def _guards():
    """torch's tensor check as the repeat shortcut has it (its import-time probe, Note [Repeated call]), or
    None where the shortcut reads the layouts in Python (then nothing of it is timed)."""
    from kernel_oracle.kernels.vision import _repeat

    guards = _repeat._TENSOR_GUARDS  # noqa: SLF001 - timing what the shortcut itself calls
    if guards is None:
        return None
    return lambda *ts: guards(*ts, dynamic_dims_sizes=None, dynamic_dims_strides=None)


def _row(name: str, fn, n: int, rounds: int, space: dict | None = None) -> dict:
    if HAS_CUDA and callable(fn):
        torch.cuda.synchronize()
    best = min(timeit.repeat(fn, number=n, repeat=rounds, globals=space)) / n
    if HAS_CUDA and callable(fn):
        torch.cuda.synchronize()
    return {"call": name, "us": round(best * 1e6, 3)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000, help="calls per round (default 20000)")
    ap.add_argument("--rounds", type=int, default=7, help="rounds; the fastest counts (default 7)")
    ap.add_argument("--json", default=None, help="also write the rows to this path")
    args = ap.parse_args(argv)
    import triton

    from kernel_oracle.harness.schema import git_commit
    torch.manual_seed(0)
    code, pieces = code_rows(args.n, args.rounds), piece_rows(args.n * 5, args.rounds)
    where = torch.cuda.get_device_name() if HAS_CUDA else "CPU tensors (interpreter-planned)"
    print(f"commit {(git_commit() or 'unknown')[:12]}, {where}, torch {torch.__version__}, triton {triton.__version__}")
    print("| the code as checked out (4 x 64 tokens, H=2, D=64, bf16) | us per call |\n|---|---:|")
    for r in code:
        print(f"| {r['call']} | {r['us']:.3f} |")
    print("\n| one operation or formulation | us per call |\n|---|---:|")
    for r in pieces:
        print(f"| {r['call']} | {r['us']:.3f} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"commit": git_commit(), "device": where, "torch": torch.__version__,
                       "triton": triton.__version__, "code": code, "pieces": pieces}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
