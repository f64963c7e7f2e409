"""Where a direct launch's host time goes: Python around it, Triton's C launcher, the driver call.

python tools/launch_overhead.py        (a CUDA device; triton 3.6 for every row)

The vision warm call's bar is 10 us of host time and its direct launch
(Note [Direct launch], kernels/vision/_direct.py) takes 5-7 us of it.  This probe splits that:

* ``DirectLaunch.__call__`` on the vision kernel (46 arguments): pointers read, device and hooks
  checked, the stream fetched, then Triton's C ``launch``;
* the C ``launch`` alone with every argument prepared (the same kernel);
* the C ``launch`` of a one-pointer kernel (what the argument count costs);
* ``cuLaunchKernel`` through ctypes on that one-pointer kernel, its parameter array built once
  (what the driver call itself costs, without Triton's argument parsing).

Each row: ``n`` calls back to back, wall time over ``n`` (the kernels are tiny: the host is the bound).
The one-pointer kernel writes a value, read back after each timed loop, so a launch that did nothing
is seen.
"""

from __future__ import annotations

import ctypes
import json
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def _one_pointer(X):
    tl.store(X + tl.program_id(0), tl.program_id(0).to(tl.float32) + 1.0)


def _ctypes_launcher(kernel, x: torch.Tensor):
    """cuLaunchKernel(function, 1,1,1, 32*warps,1,1, shared, stream, params, NULL) through ctypes with a
    parameter array built once: X, then two null scratch pointers (ignored when the kernel has fewer)."""
    cuda = ctypes.CDLL("libcuda.so.1")
    f = cuda.cuLaunchKernel
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    vals = [ctypes.c_uint64(x.data_ptr()), ctypes.c_uint64(0), ctypes.c_uint64(0)]
    params = (ctypes.c_void_p * 3)(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in vals])
    fn = ctypes.c_void_p(kernel.function)
    threads = 32 * kernel.metadata.num_warps
    shared = kernel.metadata.shared
    get_stream = triton.runtime.driver.active.get_current_stream

    def launch():
        rc = f(fn, 1, 1, 1, threads, 1, 1, shared, get_stream(0), params, None)
        if rc:
            raise RuntimeError(f"cuLaunchKernel returned {rc}")
    return launch, vals


def main() -> int:
    if not torch.cuda.is_available():
        print("needs a CUDA device", file=sys.stderr)
        return 2
    from kernel_oracle.benchmarks.bench_vision import _inputs, host_us as _timed
    from kernel_oracle.kernels.vision import _direct, plan_attention
    from kernel_oracle.kernels.vision._kernel import _vision_attn_fwd, attention_arguments, launch_attention
    from kernel_oracle.reference.vision_metadata import prepare_flashinfer_cudnn_metadata

    n = 3000
    rows = {}
    H, D = 2, 64
    q, k, v, cu = _inputs((64, 64, 64, 64), H, D, torch.bfloat16, "cuda")
    md = prepare_flashinfer_cudnn_metadata(cu, "cuda", elem_per_token=H * D)
    launch = plan_attention(q, k, v, None, None, None, forward_metadata=md)
    out = launch.run()
    if launch._direct[0]:  # direct launches work here: a launcher of the same kernel, its parts at hand
        kernel = launch_attention(q, k, v, out, launch.table, launch.num_blocks, launch.plan.scale, launch.config,
                                  launch.precision)
        grid, args, _ = attention_arguments(q, k, v, out, launch.table, launch.num_blocks, launch.plan.scale,
                                            launch.config, launch.precision)
        direct = _direct.DirectLaunch(kernel, grid, args, _vision_attn_fwd.arg_names, 4)
        rows["DirectLaunch.__call__ (vision kernel)"] = _timed(lambda: direct(q, k, v, out), n)
        rows["DirectLaunch.launch (vision kernel, as the warm call calls it)"] = _timed(
            lambda: direct.launch(q, k, v, out), n)
        gx, gy, gz = direct._grid
        stream = direct._get_stream(direct._device)
        ptrs = [t.data_ptr() for t in (q, k, v, out)]
        call, head, tail = direct._call, direct._head, direct._tail
        rows["C launch alone, arguments prepared (vision kernel, %d arguments)" % (len(ptrs) + len(tail))] = _timed(
            lambda: call(gx, gy, gz, stream, *head, *ptrs, *tail), n)
    x = torch.zeros(4, device="cuda")
    kernel = _one_pointer[(1,)](x)
    run = kernel.run
    stream = triton.runtime.driver.active.get_current_stream(0)
    if getattr(run, "launch", None) is not None and triton.__version__.startswith("3.6."):
        head = (kernel.function, run.launch_cooperative_grid, run.launch_pdl, None, None, kernel.packed_metadata,
                None, None, None)
        xp = x.data_ptr()
        launch1 = run.launch
        rows["C launch alone, arguments prepared (one-pointer kernel)"] = _timed(
            lambda: launch1(1, 1, 1, stream, *head, xp), n)
    x.zero_()
    rows["JIT launch (one-pointer kernel)"] = _timed(lambda: _one_pointer[(1,)](x), n)
    ok_jit = float(x[0]) == 1.0
    x.zero_()
    try:
        fn, _keep = _ctypes_launcher(kernel, x)
        rows["ctypes cuLaunchKernel, parameters built once (one-pointer kernel)"] = _timed(fn, n)
        ok_ctypes = float(x[0]) == 1.0
    except (OSError, AttributeError, RuntimeError) as exc:
        print("ctypes launch unavailable:", exc, file=sys.stderr)
        ok_ctypes = None
    rows["torch.empty_like (the output)"] = _timed(lambda: torch.empty_like(out), n)
    s = torch.cuda.current_stream()
    rows["triton get_current_stream"] = _timed(lambda: triton.runtime.driver.active.get_current_stream(0), n)
    del s
    print(json.dumps({"gpu": torch.cuda.get_device_name(), "triton": triton.__version__, "rows": rows,
                      "jit_wrote": ok_jit, "ctypes_wrote": ok_ctypes}))
    print("| host us per call | |\n|---|---:|")
    for name, us in rows.items():
        print(f"| {name} | {us} |")
    print("the one-pointer kernel's value after the JIT loop:", ok_jit, "after the ctypes loop:", ok_ctypes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
