"""Compile the vision kernel and the LoRA kernels for the H200 (sm_90) on any machine, GPU or not.

python tools/compile_hopper.py      (not under TRITON_INTERPRET: it compiles)

The interpreter never compiles, so a kernel edit can pass the whole CPU suite and still not build on
the GPU: an fp64 branch whose two ``return`` statements had different types did exactly that
(``Inconsistent return types``, on the H200).  This compiles each arithmetic
variant (fp32 at every ``EXACT`` level, TF32, bf16, fp16) for ``GPUTarget("cuda", 90, 32)`` with
Triton's bundled ptxas and prints one line per variant; exit 1 when any fails.  The six LoRA kernels
follow (:data:`LORA_VARIANTS`: every dtype, both paths, both families, with and without a
permutation, the flat and per-slot token-major grids), since they too run only under the interpreter
on a CPU machine.

It checks that each variant builds; the code is not the launched one (every runtime argument is a plain
``i32`` here, while a launch specializes unit strides and aligned pointers): for the SASS a launch
runs, see ``tools/hopper_sass.py``.
"""

from __future__ import annotations

import sys

# (dtype, precision, EXACT, head dim[, split head dim[, folded scale[, descriptor loads[, GQA group[, window[,
# sinks]]]]]]): the variants a kernel change must keep compiling (the folded scale, Note [Folded scale], wherever
# EXACT is 0 unless said).  Four read keys and values through descriptors (Note [Descriptor loads]): the first
# three are the H200's defaults (128 x 128 blocks for d128; d80 and d72 split, 128 x 64 blocks), the fourth a
# float32 split head dim in float64 logits, which reads through descriptors only when a config asks.  The last
# three take grouped key/value heads, a window and sinks (Note [GQA, window and sinks]) on a split descriptor
# path, the float64 softmax and pointer loads.
VARIANTS = (("float32", "ieee", 0, 80), ("float32", "ieee", 1, 80), ("float32", "ieee", 2, 80),
            ("float32", "tf32", 0, 128), ("bfloat16", None, 0, 80), ("float16", None, 0, 64),
            ("bfloat16", None, 0, 80, True), ("bfloat16", None, 0, 72, True, False),
            ("float16", None, 0, 128, False, False),
            ("bfloat16", None, 0, 128, False, None, True), ("bfloat16", None, 0, 80, True, None, True),
            ("float16", None, 0, 72, True, None, True), ("float32", "ieee", 2, 80, True, None, True),
            ("bfloat16", None, 0, 80, True, None, True, 2, True, True),
            ("float32", "ieee", 2, 64, False, None, False, 4, True, True),
            ("float16", None, 0, 64, False, None, False, 1, True, True))
_TRITON_TYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def compile_variant(dtype: str, precision, exact: int, d: int, split: bool = False, fold=None, tma: bool = False,
                    group: int = 1, window: bool = False, sinks: bool = False):
    """The compiled kernel of one variant, with the constexprs and config ``launch_attention`` would
    pick for contiguous q, k, v of head dim ``d`` (raises Triton's CompilationError when it does not build).
    Every constexpr of the kernel is given here: one left out would compile as a runtime i32 argument."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from kernel_oracle.kernels.vision import _config as VC
    from kernel_oracle.kernels.vision import _kernel as VK

    fn = VK._vision_attn_fwd
    (da, db), elem = VC.head_dim_split(d, split), 4 if dtype == "float32" else 2
    cfg = VC.default_config(da + db, da + db, elem, tma, db > 0)
    const = dict(D=d, DA=da, DB=db, DV=d, DVA=da, DVB=db, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                 PREC=precision, INTERP=False, P_ROUND=VK._P_ROUND[dtype], ALIGN=16 // elem,
                 TF32=precision == "tf32", EXACT=exact, FOLD_SCALE=exact == 0 if fold is None else fold, TMA=tma,
                 GQA=group > 1, WINDOW=window, HAS_SINKS=sinks)
    missing = [a for a, p in zip(fn.arg_names, fn.params) if p.is_constexpr and a not in const]
    if missing:
        raise TypeError(f"compile_variant gives no value for the constexpr(s) {missing}")
    sig = {name: "i32" for name in fn.arg_names}
    ptr = f"*{_TRITON_TYPES[dtype]}"
    sig.update({n: ptr for n in ("Q", "K", "V", "O")}, TABLE="*i32", SINKS="*bf16", qk_scale="fp32",
               qk_scale_lo="fp32")
    sig.update({k: "constexpr" for k in const})
    return triton.compile(ASTSource(fn, sig, const), target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages))


# (op, dtype, path, ALIGN, permutation dtype or None[, NSLOT]): LoRA variants a kernel change must keep
# compiling.  Token-major ones run slot-sorted tiles on the flat grid (Note [Flat slot grid]) with NSLOT 8 (up
# to 8 slots) unless the sixth entry says otherwise: 0 is the per-slot grid (LoRAOptions.flat_slots off), 32 the
# cap.
LORA_VARIANTS = (("step_a_q", "bfloat16", "tok", 8, None), ("step_b_q", "float32", "seg", 1, "i64"),
                 ("step_a_v", "float16", "seg", 8, "i64"), ("step_b_v", "bfloat16", "tok", 1, None),
                 ("q_side_fused", "float16", "tok", 8, "i64"), ("v_side_fused", "float32", "seg", 1, None),
                 ("v_side_fused", "bfloat16", "tok", 8, None, 0), ("step_b_q", "bfloat16", "tok", 1, "i64", 32))


def compile_lora(op: str, dtype: str, path: str, align: int, perm, nslot=None):
    """The compiled LoRA kernel of one variant (the default blocks of ``path``, ``kernels.lora.BLOCKS``, under the
    default :class:`~kernel_oracle.kernels.options.LoRAOptions`; rank block 32, the aligned family when
    ``align > 1``); ``perm``: the permutation's pointer type, None for none; ``nslot``: a token-major launch's
    ``NSLOT`` on the flat grid, 0 for the per-slot grid (None: what ``kernels.lora._launch`` launches for 4
    slots)."""
    import inspect

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from kernel_oracle.kernels.lora import _kernels as LK
    from kernel_oracle.kernels.lora import _launch as LL
    from kernel_oracle.kernels.options import LoRAOptions

    defaults = LoRAOptions()
    fn = getattr(LK, f"{op}_kernel")
    fn = fn if align > 1 else fn.generic
    blocks = dict(LL.BLOCKS[op][path])
    warps = blocks.pop("num_warps")
    blocks.pop("C_SPLIT", None)
    params = inspect.signature(fn.fn).parameters
    if nslot is None:
        nslot = LL.slot_block(4) if defaults.flat_slots else 0
    sorted_rows = path == "tok" and defaults.slot_sorted
    const = dict(TOKEN_MAJOR=path == "tok", HAS_PERM=perm is not None, SEG_TILE=64 if path == "tok" else 0,
                 SORTED=sorted_rows, FLAT=sorted_rows and nslot > 0, NSLOT=nslot or LL.FLAT_SLOTS_MIN_BLOCK,
                 BLOCK_R=LL.MIN_BLOCK_R, UPCAST=False, DOT_PREC="tf32" if dtype == "float32" else None,
                 FIX_BF16=False, ALIGN=align, **blocks)
    const = {k: v for k, v in const.items() if k in params}
    sig = {}
    for name, prm in params.items():
        if "constexpr" in str(prm.annotation):
            sig[name] = "constexpr"
        elif name.endswith("_ptr"):
            sig[name] = f"*{_TRITON_TYPES[dtype]}"
        elif name == "perm":
            sig[name] = f"*{perm or 'i32'}"  # without a permutation the launcher passes seg_indptr
        else:
            sig[name] = {"seg_indptr": "*i32", "weight_indices": "*i32", "lora_ranks": "*i32",
                         "scalings": "*fp32"}.get(name, "i32")
    return triton.compile(ASTSource(fn, sig, const), target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=warps, num_stages=2))


# (dtype, head dim, value head dim[, grouped key/value heads[, folded scale]]): the Gluon Hopper kernel's variants
# (Note [Gluon Hopper kernel]): the power-of-two head dims, both split ones (80 = 64 + 16; 72 = 64 + 16 with 8
# columns past the data), GQA and an unfolded (negative) scale.
GLUON_VARIANTS = (("bfloat16", 128, 128), ("float16", 64, 64), ("bfloat16", 80, 80), ("float16", 72, 72),
                  ("bfloat16", 128, 128, True, False), ("bfloat16", 96, 64, False, True))


def compile_gluon(dtype: str, d: int, dv: int, gqa: bool = False, fold: bool = True):
    """The compiled Gluon kernel of one variant, with the constexprs, blocks and launch options
    ``kernels.vision._gluon.gluon_arguments`` gives a contiguous launch."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    from kernel_oracle.kernels.vision import _gluon as G
    from kernel_oracle.kernels.vision._config import head_dim_split

    fn = G._gluon_attn_fwd
    (da, db), (dva, dvb) = head_dim_split(d, True), head_dim_split(dv, True)
    cfg = G.gluon_config(d, dv, 2)
    const = dict(D=d, DV=dv, DA=da, DB=db, DVA=dva, DVB=dvb, BLOCK_N=cfg.block_n, STAGES=cfg.stages, GQA=gqa,
                 FOLD=fold, ALIGN=8)
    missing = [a for a, p in zip(fn.arg_names, fn.params) if p.is_constexpr and a not in const]
    if missing:
        raise TypeError(f"compile_gluon gives no value for the constexpr(s) {missing}")
    sig = {name: "i32" for name in fn.arg_names}
    sig.update({n: f"*{_TRITON_TYPES[dtype]}" for n in ("Q", "K", "V", "O")}, TABLE="*i32", qk_scale="fp32")
    sig.update({k: "constexpr" for k in const})
    return triton.compile(GluonASTSource(fn, sig, const), target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=G.GLUON_WARPS, maxnreg=G.GLUON_MAXNREG))


def main(argv=None) -> int:
    from kernel_oracle.kernels.interpreter import interpreting

    if interpreting():
        print("TRITON_INTERPRET=1: nothing is compiled; run without it")
        return 2
    failed = 0
    for build, variants in ((compile_variant, VARIANTS), (compile_lora, LORA_VARIANTS),
                            (compile_gluon, GLUON_VARIANTS)):
        for variant in variants:
            try:
                k = build(*variant)
                print(f"ok   {variant}: shared memory {k.metadata.shared} B")
            except Exception as exc:  # noqa: BLE001 - report each variant, then fail
                failed += 1
                print(f"FAIL {variant}: {type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
