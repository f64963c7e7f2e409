"""Vision attention cases shared by every implementation's differential tests.

Layouts (:class:`Case`, :func:`build`), the precision table and the poisoned-output check against
the float64 oracle (:func:`check_against_oracle`).  ``oracle_tests/kernels/test_kernels_vision.py`` runs
them on our Triton kernel, beside the vision OpInfo's own sample and exhaustive inputs
(:func:`opinfo_samples`, ``harness.opinfo``), and ``oracle_tests/fuzz/test_flashinfer_cudnn.py`` on the
real FlashInfer cuDNN engine.  The error contracts are the vision OpInfo's error inputs, run on every
target by ``oracle_tests/reference/test_contracts.py``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Optional

import torch

import kernel_oracle.kernels.vision as kv
import kernel_oracle.reference.vision_metadata as rvm
from kernel_oracle.harness.opinfo import Sample
from kernel_oracle.harness.opinfo_vision import VISION_OPINFO
from kernel_oracle.kernels.options import options
from kernel_oracle.reference.tolerance import compare
from kernel_oracle.reference.vision import flashinfer_cudnn_oracle

# fp32 runs in exact fp32 ("ieee", faithful=True baseline) or TF32 ("tf32", faithful="tf32");
# the interpreter computes fp32 dots exactly in both, which the TF32 allowance also accepts.
PRECISIONS = {
    "fp16": (torch.float16, "ieee", True),
    "bf16": (torch.bfloat16, "ieee", True),
    "fp32": (torch.float32, "ieee", True),
    "fp32-tf32": (torch.float32, "tf32", "tf32"),
}
HEAD_DIMS = (64, 72, 80, 96, 128)  # non-powers of two are split into power-of-two tiles


def _gen(request) -> torch.Generator:
    """A generator seeded from the test id: fresh data per case, reproducible per case."""
    seed = int.from_bytes(hashlib.sha256(request.node.nodeid.encode()).digest()[:4], "little")
    return torch.Generator().manual_seed(seed)


def _rand(shape, dtype, device, gen, scale=1.0):
    x = torch.randn(shape, generator=gen, dtype=torch.float32) * scale
    return x.to(dtype=dtype, device=device)


@dataclass(frozen=True)
class Case:
    """One call layout. ``lens`` may hold zeros; ``pad`` pads the batch to its bucket."""

    name: str
    lens: tuple[int, ...]
    heads: int = 2
    head_dim: int = 64
    v_dim: Optional[int] = None
    layout: str = "contiguous"  # contiguous | qkv_v | o_reversed | gaps | 4d
    path: str = "metadata"  # metadata | kwargs
    max_seqlen: str = "int"  # int | tensor | tensor_device (kwargs path)
    seq4d: bool = False  # sequence_lengths as (B,1,1,1)
    pad: bool = True
    scale: Optional[float] = None
    magnitude: float = 1.0  # multiplies q and k (logits x magnitude**2)
    logit_scale: float = 1.0  # multiplies q only (logits x logit_scale), as the fuzzer's problems do
    marks: tuple = field(default_factory=tuple)

    def __repr__(self) -> str:
        return self.name


# Edge layouts, small enough for the interpreter (a few dozen 16x16 programs each), in two parts.
# Those the vision OpInfo's sample inputs (harness.opinfo.VISION_EDGE_CASES) hold too, in this table's terms:
# the engine tests build every call through build(); our kernel takes them from the OpInfo (opinfo_samples)
#        name                                      lens                   extra
OPINFO_EDGE_CASES = (
    Case("zero-length entries, bucket padding", (7, 0, 19, 0)),
    Case("v inside an interleaved qkv buffer", (12, 21), layout="qkv_v"),
    Case("kwargs path, 0-d CPU tensor max_seqlen", (8, 20), path="kwargs", max_seqlen="tensor"),
    Case("kwargs path, 1-element device tensor max_seqlen", (8, 20), path="kwargs", max_seqlen="tensor_device"),
    Case("softmax_scale 0.37", (19, 9), scale=0.37),
)
# ... and those beyond them
EDGE_CASES_BEYOND_OPINFO = (
    Case("single token", (1,)),
    Case("odd tails around the block size", (15, 16, 17, 33)),
    Case("no padding (B exact)", (9, 4), pad=False),
    Case("outputs in reverse order", (5, 18, 11), layout="o_reversed"),
    Case("gaps between sequences (uncovered tokens)", (6, 13), layout="gaps"),
    Case("4-D (b, s, H, D) input", (10, 7, 15), layout="4d"),
    Case("kwargs path, int max_seqlen", (8, 20), path="kwargs"),
    Case("sequence_lengths (B,1,1,1)", (14, 3), seq4d=True),
    Case("large-magnitude logits (x30)", (24, 10), magnitude=30.0),
    Case("negative softmax_scale -0.37", (19, 9), scale=-0.37, magnitude=3.0),
    Case("Dv != D (64 -> 48)", (13, 6), v_dim=48),
    Case("head dim 80 (64+16 split), 3 heads", (17, 5), heads=3, head_dim=80),
)
EDGE_CASES = OPINFO_EDGE_CASES + EDGE_CASES_BEYOND_OPINFO


def opinfo_samples(exhaustive: bool = False) -> list[tuple[str, Sample]]:
    """(precision name, sample) for every :data:`PRECISIONS` entry and every sample of the vision OpInfo
    in that dtype: its ``sample_inputs``, or its ``exhaustive_inputs`` (realistic shapes)."""
    gen = VISION_OPINFO.exhaustive_inputs if exhaustive else VISION_OPINFO.sample_inputs
    return [(prec, sample) for prec, (dtype, _, _) in PRECISIONS.items() for sample in gen("cpu", dtype)]


# Realistic shapes (GPU or --run-slow): the benchmark shapes, a 20K-token sequence with large
# logits and a non-default scale, and the strided/permuted layouts at size.
SLOW_CASES = (
    Case("8 ragged images, D=80", (1024, 2048, 576, 4096, 1300, 64, 3000, 2200), heads=16, head_dim=80),
    Case("4x4096, D=72", (4096,) * 4, heads=16, head_dim=72),
    Case("64x256, D=64", (256,) * 64, heads=16, head_dim=64),
    Case("2x16384, D=128", (16384,) * 2, heads=16, head_dim=128),
    Case("20K tokens, large logits, scale 0.05", (20000,), heads=4, head_dim=128, magnitude=8.0, scale=0.05),
    Case("qkv-strided v, reversed outputs at size", (3000, 777, 1500), heads=8, head_dim=96, layout="qkv_v"),
    Case("reversed outputs at size", (3000, 777, 1500), heads=8, head_dim=96, layout="o_reversed"),
)


def build(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator):
    """(args, kwargs) for the forward, plus the list of covered output token ranges."""
    H, D = case.heads, case.head_dim
    Dv = case.v_dim or D
    lens = list(case.lens)
    gap = 3 if case.layout == "gaps" else 0
    qk_tok, t = [], gap
    for n in lens:
        qk_tok.append(t)
        t += n + gap
    T = max(t, 1)
    if case.layout == "4d":
        T += T % 2  # (2, T/2, H, D); the odd token left over is uncovered
    q = _rand((T, H, D), dtype, device, gen, case.magnitude * case.logit_scale)
    k = _rand((T, H, D), dtype, device, gen, case.magnitude)
    def reversed_packing(first):
        toks, t = [0] * len(lens), first
        for b in reversed(range(len(lens))):
            toks[b] = t
            t += lens[b]
        return toks

    if case.layout == "qkv_v":
        # v is a view into its own interleaved qkv buffer (token stride 3*H*Dv) that packs the
        # sequences in reverse order after 4 leading tokens: v offsets differ from q/k offsets
        v = _rand((sum(lens) + 4, 3, H, Dv), dtype, device, gen)[:, 2]
        v_tok = reversed_packing(4)
    else:
        v = _rand((T, H, Dv), dtype, device, gen)
        v_tok = list(qk_tok)
    o_tok = reversed_packing(0) if case.layout == "o_reversed" else list(qk_tok)
    B = len(lens)
    B_pad = rvm.bucket_batch_size(B) if case.pad else B
    end = lambda toks: (toks[-1] + lens[-1]) if toks else 0  # noqa: E731
    rows = []
    for toks, stride in ((qk_tok, q.stride(0)), (v_tok, v.stride(0)), (o_tok, H * Dv)):
        starts = toks + [end(toks)] * (B_pad - B) + [end(toks)]
        rows += [s * stride for s in starts]
    packed = torch.tensor(rows, dtype=torch.int32, device=device)
    seq = torch.tensor(lens + [0] * (B_pad - B), dtype=torch.int32, device=device)
    if case.seq4d:
        seq = seq.view(B_pad, 1, 1, 1)
    real_max = max(lens) if lens else 0
    if case.layout == "4d":
        q, k, v = (x.view(2, T // 2, H, x.shape[-1]) for x in (q, k, v))
    kwargs = {}
    if case.scale is not None:
        kwargs["softmax_scale"] = case.scale
    if case.path == "metadata":
        md = kv.VisionAttentionMetadata(packed_indptrs=packed, sequence_lengths=seq,
                                        flashinfer_max_seqlen=rvm.bucket_max_seqlen(real_max))
        return (q, k, v, None, None, None), {**kwargs, "forward_metadata": md}
    mx = {"int": real_max, "tensor": torch.tensor(real_max),
          "tensor_device": torch.tensor([real_max], device=device)}[case.max_seqlen]
    return (q, k, v, packed, None, None), {**kwargs, "sequence_lengths": seq, "max_seqlen": mx}


def head_dim_call(head_dim: int, dtype: torch.dtype, device: str, gen: torch.Generator):
    """(args, kwargs) through the builder path (prepare_flashinfer_cudnn_metadata): 3 ragged
    sequences (5, 17, 33 tokens), 2 heads, the given head dim."""
    lens, H = [5, 17, 33], 2
    q, k, v = (_rand((sum(lens), H, head_dim), dtype, device, gen) for _ in range(3))
    md = kv.prepare_flashinfer_cudnn_metadata([0, 5, 22, 55], device, elem_per_token=H * head_dim)
    return (q, k, v, None, None, None), {"forward_metadata": md}


def check_against_oracle(args, kwargs, *, baseline_mode, precision="ieee", repro="", strict=None, target=None):
    """Run the implementation (poisoned output) and the oracles; assert the rule and untouched padding.

    ``target``: a :class:`fuzz.targets.Target` (its vision entry and poison hook); by default our
    Triton kernel with ``fp32_precision=precision``."""
    extra = {} if strict is None else {"strict": strict}
    if target is None:
        with options(poison_outputs=True):
            out = kv.flashinfer_cudnn_attention(*args, **kwargs, fp32_precision=precision, **extra)
    else:
        with target.poison("vision"):
            out = target.entry("vision")(*args, **kwargs, **extra)
    ref = flashinfer_cudnn_oracle(*args, **kwargs, **extra)
    faithful = flashinfer_cudnn_oracle(*args, **kwargs, faithful=baseline_mode, **extra)
    assert out.dtype == args[0].dtype and out.device == args[0].device
    defined = ref.defined.to(out.device)
    res = compare(out, ref.value, defined, family="vision", baseline=faithful.baselines, out_dtype=args[0].dtype,
                  locate=lambda i: {"token": i[:-2], "head": i[-2], "dim": i[-1]}, repro=repro)
    assert res.ok, res.message
    # tokens of no sequence stay NaN; sequences with unspecified output (strict=False) may write theirs
    plan = rvm.resolve_flashinfer_cudnn(*args[:3], args[3], kwargs.get("softmax_scale"),
                                        kwargs.get("forward_metadata"), strict=False,
                                        **{k: v for k, v in kwargs.items() if k in ("sequence_lengths", "max_seqlen")})
    writable = torch.zeros(plan.q.shape[0], dtype=torch.bool)
    for b in range(plan.num_sequences):
        n, o = int(plan.lengths[b]), int(plan.o_start[b])
        writable[max(o, 0): max(o + n, 0)] = n > 0
    written = ~torch.isnan(out.reshape(plan.q.shape[0], -1).cpu()).all(-1)
    leaked = torch.nonzero(written & ~writable).flatten()
    assert leaked.numel() == 0, f"{leaked.numel()} tokens outside every sequence were written: {leaked[:8].tolist()}"
    return res
