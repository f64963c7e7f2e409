"""Reproducer of docs/upstream/sglang_csgmv_fp32_shared_memory.md: SGLang's csgmv LoRA shrink
(``chunked_sgmv_lora_shrink_forward``, the default ``--lora-backend csgmv``) in fp32 at 64-row chunks
needs more shared memory than an H100 or H200 gives one block.

    python docs/upstream/sglang_csgmv_fp32_shared_memory.py --wheel sglang-0.5.23-...whl     (CUDA GPU)
    python docs/upstream/sglang_csgmv_fp32_shared_memory.py --wheel ... --compile-only       (any machine)

Needs torch and triton, not SGLang.  The release's ``chunked_sgmv_shrink.py`` (and from 0.5.11 its
``lora_tuning_config.py`` with the ``csgmv_configs/`` beside it) are read from the wheel and executed as
they are, from real files; the other names they import from SGLang are given here: ``LoRABatchInfo`` (a
type annotation only), ``cached_triton_kernel`` (Triton's own cache), ``get_device_name`` (the CUDA
device's name, as SGLang's answers on CUDA; "cpu" without one, which no tuned config matches) and, from
0.5.22, ``envs`` (the split-K and deterministic switches, off as SGLang ships them).

The calls are what the csgmv backend launches for the q/k/v projection of a model with hidden size 4096
(Llama-3-8B) served with ``--dtype float32 --max-lora-chunk-size 64``: one prefill of 256 tokens (the
backend's chunk is 128 from 256 tokens, capped at the maximum: 64) on one adapter of rank 16, four
64-row segments.  Two controls: the same batch in bf16, and fp32 at 255 tokens (32-row chunks).  Each
line says what the launch asked for: ``Required`` and the device's limit from Triton's ``OutOfResources``,
or the compiled kernel's figure when it ran.

The Triton interpreter (``TRITON_INTERPRET=1``) has no shared memory and would run every call, so
without a GPU the script needs ``--compile-only``: it compiles each launch for sm_90 (no launch) and
compares the compiled kernel's figure with an H100's or H200's 232,448 B a block, the check Triton's
launcher makes.

Exit 1 when the fp32 64-row launch is refused for shared memory (reproduced; with ``--compile-only``:
would be), 0 when it is not, 2 for a usage error, no CUDA without ``--compile-only``, or a wheel
without the file.
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

SHRINK_FILES = ("sglang/kernels/ops/lora/dense/chunked_sgmv_shrink.py",  # 0.5.22 - 0.5.23
                "sglang/kernels/ops/gemm/chunked_sgmv_shrink.py",  # 0.5.16 - 0.5.21
                "sglang/srt/lora/triton_ops/chunked_sgmv_shrink.py")  # 0.5.10 - 0.5.15.post1
KERNEL = "_chunked_lora_shrink_kernel"
HOPPER_LIMIT = 232_448  # shared memory per block (opt-in) of compute capability 9.0: H100, H200
K, RANK, SLICES, MAX_CHUNK = 4096, 16, 3, 64  # hidden size, adapter rank, q/k/v, --max-lora-chunk-size
CALLS = ((torch.float32, 256), (torch.bfloat16, 256), (torch.float32, 255))  # the first is the report's


class _Switch:
    def get(self) -> bool:
        return False

    is_set = get


def _given(compile_only: bool) -> dict:
    """The SGLang names the files import that this script provides (the module docstring)."""
    def get_device_name(device_id: int = 0) -> str:
        return "cpu" if compile_only else torch.cuda.get_device_name(device_id)

    return {"LoRABatchInfo": types.SimpleNamespace, "cached_triton_kernel": lambda key_fn=None: (lambda fn: fn),
            "get_device_name": get_device_name,
            "envs": types.SimpleNamespace(SGLANG_ENABLE_LORA_CSGMV_SPLIT_K=_Switch(),
                                          SGLANG_ENABLE_DETERMINISTIC_INFERENCE=_Switch())}


def _imports(source: str):
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sglang."):
            yield node.module, [a.name for a in node.names]


def load(wheel: str, compile_only: bool = False) -> types.ModuleType:
    """The release's ``chunked_sgmv_shrink.py``, executed as it is from a temporary folder (Triton compiles
    a kernel from its source file); its ``lora_tuning_config.py`` likewise, with ``csgmv_configs/`` beside
    it.  A wheel without the file raises ``LookupError``."""
    zf = zipfile.ZipFile(wheel)
    names = set(zf.namelist())
    path = next((f for f in SHRINK_FILES if f in names), None)
    if path is None:
        raise LookupError(f"{wheel} has no chunked_sgmv_shrink.py (SGLang 0.5.10 and later have it)")
    root = Path(tempfile.mkdtemp(prefix="sglang-csgmv-"))
    atexit.register(shutil.rmtree, root, True)
    folder = path.rsplit("/", 1)[0] + "/"
    for name in names:  # the tuned block configs, read beside the tuning-config file
        if name.startswith(folder + "csgmv_configs/") and name.endswith(".json"):
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(zf.read(name))
    given = _given(compile_only)

    def execute(file: str, module: str) -> types.ModuleType:
        source = zf.read(file).decode()
        for imported, items in _imports(source):
            own = imported.replace(".", "/") + ".py"
            if own in names and own.endswith("/lora_tuning_config.py"):
                sys.modules[imported] = execute(own, imported)
            else:
                sys.modules[imported] = types.ModuleType(imported)
                for item in items:
                    setattr(sys.modules[imported], item, given[item])
        (root / file).parent.mkdir(parents=True, exist_ok=True)
        (root / file).write_text(source)
        spec = importlib.util.spec_from_file_location(module, root / file)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[module] = mod  # triton looks a kernel's module up by name
        spec.loader.exec_module(mod)  # the release's own file, as it is
        return mod

    return execute(path, path[:-3].replace("/", "."))


def chunk_size(tokens: int) -> int:
    """The csgmv backend's chunk for a batch of ``tokens`` (``_determine_chunk_size_for_tokens``)."""
    return min(MAX_CHUNK, 128 if tokens >= 256 else 32 if tokens >= 64 else 16)


def backend_call(dtype, tokens: int, device: str):
    """The shrink's arguments as the backend builds them: one request on slot 0, cut into chunks."""
    chunk = chunk_size(tokens)
    bounds = list(range(0, tokens, chunk)) + [tokens]
    i32 = {"dtype": torch.int32, "device": device}
    batch_info = types.SimpleNamespace(
        use_cuda_graph=False, bs=1, num_segments=len(bounds) - 1, max_len=chunk, seg_lens=None,
        seg_indptr=torch.tensor(bounds, **i32), weight_indices=torch.zeros(len(bounds) - 1, **i32),
        lora_ranks=torch.tensor([RANK], **i32), scalings=torch.ones(1, device=device),
        permutation=torch.arange(tokens, **i32))
    x = torch.randn(tokens, K, device=device).to(dtype)
    weights = (torch.randn(1, SLICES * RANK, K, device=device) / 64).to(dtype)
    return x, weights, batch_info


class Launches:
    """Stands in for the file's kernel: keeps each launch's keyword arguments and, unless ``compile_only``,
    launches the real kernel and keeps what it returns (the compiled kernel)."""

    def __init__(self, kernel, compile_only: bool) -> None:
        self.kernel, self.compile_only, self.seen = kernel, compile_only, []

    def __getitem__(self, grid):
        def launch(**kwargs):
            compiled = None if self.compile_only else self.kernel[grid](**kwargs)
            self.seen.append((kwargs, compiled))
            return compiled

        return launch


def compiled_for_hopper(kernel, kwargs: dict) -> int:
    """Bytes of shared memory ``kernel`` compiled for sm_90 with these launch arguments asks for (no launch)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    const = {kernel.arg_names[i] for i in kernel.constexprs}

    def kind(value) -> str:
        return "*" + {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16",
                      torch.int32: "i32"}[value.dtype] if isinstance(value, torch.Tensor) else "i32"

    args = {n: kwargs[n] for n in kernel.arg_names}
    # as the launcher specializes a call: a 16-byte aligned pointer is marked so (it lets Triton pipeline
    # 2-byte loads with cp.async; unmarked, bf16 would compile to one buffer)
    aligned = {(i,): [["tt.divisibility", 16]] for i, v in enumerate(args.values())
               if isinstance(v, torch.Tensor) and v.data_ptr() % 16 == 0}
    src = ASTSource(kernel, {n: "constexpr" if n in const else kind(v) for n, v in args.items()},
                    constexprs={n: v for n, v in args.items() if n in const}, attrs=aligned)
    options = {k: kwargs[k] for k in ("num_warps", "num_stages") if k in kwargs}
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options).metadata.shared


def run(module, dtype, tokens: int, compile_only: bool) -> tuple[bool, str]:
    """``(refused for shared memory, one line)`` for one call of the release's shrink."""
    import triton

    device = "cpu" if compile_only else "cuda"
    x, weights, batch_info = backend_call(dtype, tokens, device)
    real = module.__dict__[KERNEL]
    launches = Launches(real, compile_only)
    module.__dict__[KERNEL] = launches
    try:
        module.chunked_sgmv_lora_shrink_forward(x, weights, batch_info, SLICES)
        if not compile_only:
            torch.cuda.synchronize()
    except triton.runtime.errors.OutOfResources as exc:
        kw = launches.seen[-1][0] if launches.seen else {}
        return exc.name == "shared memory", (f"{_tiles(kw)}: OutOfResources, {exc.name}: Required {exc.required:,} B, "
                                             f"limit {exc.limit:,} B")
    finally:
        module.__dict__[KERNEL] = real
    kw, compiled = launches.seen[-1]
    if compile_only:
        need = compiled_for_hopper(real, kw)
        verdict = "refused" if need > HOPPER_LIMIT else "fits"
        return need > HOPPER_LIMIT, f"{_tiles(kw)}: compiled for sm_90 asks {need:,} B of {HOPPER_LIMIT:,} B: {verdict}"
    limit = torch.cuda.get_device_properties(0).shared_memory_per_block_optin
    return False, f"{_tiles(kw)}: ran, the kernel asks {compiled.metadata.shared:,} B of {limit:,} B"


def _tiles(kw: dict) -> str:
    if not kw:
        return "no launch"
    return (f"BLOCK_M {kw['BLOCK_M']}, BLOCK_N {kw['BLOCK_N']}, BLOCK_K {kw['BLOCK_K']}, num_stages "
            f"{kw.get('num_stages', 'Triton default')}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheel", required=True, help="an sglang wheel (0.5.10 or later)")
    ap.add_argument("--compile-only", action="store_true",
                    help="compile each launch for sm_90 instead of launching it (no GPU needed)")
    args = ap.parse_args(argv)
    if not args.compile_only and not torch.cuda.is_available():
        print("needs a CUDA device: the Triton interpreter has no shared memory (every call would run); "
              "--compile-only compiles for sm_90 without one", file=sys.stderr)
        return 2
    if args.compile_only:  # compiled for a target, not interpreted (read when the release's file imports triton)
        os.environ.pop("TRITON_INTERPRET", None)
    try:
        module = load(args.wheel, args.compile_only)
    except (OSError, LookupError, zipfile.BadZipFile, ImportError, SyntaxError) as exc:
        print(f"cannot load chunked_sgmv_shrink.py from {args.wheel}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    where = "compiled for sm_90, not launched" if args.compile_only else (
        f"{torch.cuda.get_device_name()}, {torch.cuda.get_device_properties(0).shared_memory_per_block_optin:,} B "
        "of shared memory a block")
    print(f"{Path(args.wheel).name}: the q/k/v shrink (K {K}, rank {RANK}, {SLICES} slices), "
          f"--max-lora-chunk-size {MAX_CHUNK}; {where}; torch {torch.__version__}, "
          f"triton {__import__('triton').__version__}")
    refused = []
    for dtype, tokens in CALLS:
        hit, line = run(module, dtype, tokens, args.compile_only)
        print(f"  {str(dtype)[6:]}, {tokens} tokens ({chunk_size(tokens)}-row chunks): {line}")
        refused.append(hit)
    print("reproduced" if refused[0] else "not reproduced")
    return 1 if refused[0] else 0


if __name__ == "__main__":
    sys.exit(main())
