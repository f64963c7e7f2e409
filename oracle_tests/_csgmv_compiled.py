"""What Triton's compiler allocates for SGLang's csgmv shrink, compiled for a CUDA target on any machine.

    python -m oracle_tests._csgmv_compiled VERSION CASES_JSON        (from the repository root)

Run in a process of its own without ``TRITON_INTERPRET``: under the interpreter Triton's own library
functions are interpreted and nothing compiles for a target.  Each case is ``[[major, minor], dtype, chunk,
K, overrides]``: the release's shrink is called on a qkv batch of ``chunk``-row segments with its kernels
recorded (no launch), the overrides replace keyword arguments of the recorded launch, and the launch is
compiled for ``sm_<major><minor>``.  Prints one JSON list: per case ``{"tiles": [BLOCK_M, BLOCK_N, BLOCK_K,
K, num_stages or null, element size], "shared": bytes}``.
"""

from __future__ import annotations

import json
import sys

import torch
import triton

from kernel_oracle.fuzz.targets.sglang_csgmv import CsgmvConfiguration, load_csgmv
from kernel_oracle.fuzz.targets.sglang_csgmv_smem import recorded_launches
from kernel_oracle.fuzz.targets.sglang_wheel import find_wheel, wheel_release

from oracle_tests._csgmv_cases import random_case

POINTERS = {torch.float32: "*fp32", torch.bfloat16: "*bf16", torch.float16: "*fp16", torch.int32: "*i32"}


def compiled_shared_memory(kernel, kwargs: dict, capability) -> int:
    """Bytes of shared memory ``kernel`` compiled for ``capability`` with the launch's keyword arguments asks
    for; its pointers are marked 16-byte aligned, as a launch of torch tensors specializes them."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    const = {kernel.arg_names[i] for i in kernel.constexprs}
    args = {n: kwargs[n] for n in kernel.arg_names}
    signature = {n: "constexpr" if n in const else POINTERS[v.dtype] if isinstance(v, torch.Tensor) else "i32"
                 for n, v in args.items()}
    aligned = {(i,): [["tt.divisibility", 16]] for i, v in enumerate(args.values()) if isinstance(v, torch.Tensor)}
    src = ASTSource(kernel, signature, constexprs={n: v for n, v in args.items() if n in const}, attrs=aligned)
    options = {k: kwargs[k] for k in ("num_warps", "num_stages") if k in kwargs}
    target = GPUTarget("cuda", capability[0] * 10 + capability[1], 32)
    return triton.compile(src, target=target, options=options).metadata.shared


def main(argv: list[str]) -> int:
    version, cases = argv[0], json.loads(argv[1])
    k = load_csgmv(wheel_release(find_wheel(version)), CsgmvConfiguration(device_name="NVIDIA H100 80GB HBM3"))
    out = []
    for capability, dtype, chunk, k_in, overrides in cases:
        c = random_case(1, 3, tokens=70, chunk=chunk, dtype=getattr(torch, dtype), k_in=k_in, r_max=32,
                        offsets=(0, 4096, 5120, 6144))
        with recorded_launches(k.shrink.__globals__) as seen:
            k.shrink(c.x, c.a, c.batch_info, c.num_slices)
        (name, kwargs), = seen
        kwargs = {**kwargs, **overrides}
        tiles = [kwargs["BLOCK_M"], kwargs["BLOCK_N"], kwargs["BLOCK_K"], kwargs["K"], kwargs.get("num_stages"),
                 kwargs["x"].element_size()]
        out.append({"tiles": tiles, "shared": compiled_shared_memory(k.shrink.__globals__[name], kwargs, capability)})
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
