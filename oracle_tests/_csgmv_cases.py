"""Small csgmv batches for the CPU tests: segments as SGLang's csgmv backend cuts them (tokens ordered by
adapter slot through the permutation, each slot's run cut into chunks of at most ``chunk`` rows), plus
what the contract also allows (zero-length segments, unrouted rows, CUDA-graph padding and stale host ints).

Shapes are kept to one or two Triton programs per segment: the interpreter runs ~30 ms a program.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from kernel_oracle.fuzz.strategies_csgmv import chunked
from kernel_oracle.reference.batch_info import LoRABatchInfo

# slice layouts: num_slices -> output offsets (ragged: q wider than k and v; gate and up equal)
SLICE_OFFSETS = {1: (0, 24), 2: (0, 20, 40), 3: (0, 40, 56, 72)}
K_IN, R_MAX, SLOTS = 48, 8, 3
# releases that run the same csgmv code (syntax trees, import paths aside): its first release runs it
CODE_GROUPS = (("0.5.10",), ("0.5.11", "0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1"),
               ("0.5.14", "0.5.15", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21"),
               ("0.5.22", "0.5.23"))


@dataclass
class CsgmvCase:
    """One batch and its tensors.  ``x`` (S, K); ``a`` (L, num_slices * R, K) shrink weights; ``h`` (S,
    num_slices * R) the expand input; ``b`` (L, OUTPUT_DIM, R) expand weights; ``base`` (S, OUTPUT_DIM)."""

    batch_info: LoRABatchInfo
    num_slices: int
    x: torch.Tensor
    a: torch.Tensor
    h: torch.Tensor
    b: torch.Tensor
    base: torch.Tensor
    offsets: torch.Tensor

    @property
    def max_slice_size(self) -> int:
        o = self.offsets.tolist()
        return max(hi - lo for lo, hi in zip(o, o[1:]))


def batch_info(seg_lens: Sequence[int], slots: Sequence[int], ranks: Sequence[int], scalings: Sequence[float],
               permutation: Sequence[int], *, chunk: int = 16, graph_pad_to: Optional[int] = None,
               host_ints: Optional[tuple[int, int]] = None) -> LoRABatchInfo:
    """A csgmv batch info: ``permutation`` maps logical rows (in segment order) to physical rows; under
    ``graph_pad_to`` the device tensors are padded with zero-length segments on slot 0 and ``host_ints``
    ``(bs, num_segments)`` are the capture-time values (default: the real count)."""
    n = len(seg_lens)
    pad = (graph_pad_to or n) - n
    indptr = [0]
    for length in list(seg_lens) + [0] * pad:
        indptr.append(indptr[-1] + length)
    bs, num = host_ints if host_ints is not None else (n, n)
    return LoRABatchInfo(
        use_cuda_graph=graph_pad_to is not None, bs=bs, num_segments=num,
        seg_indptr=torch.tensor(indptr, dtype=torch.int32),
        weight_indices=torch.tensor(list(slots) + [0] * pad, dtype=torch.int32),
        lora_ranks=torch.tensor(list(ranks), dtype=torch.int32),
        scalings=torch.tensor(list(scalings), dtype=torch.float32),
        max_len=chunk, seg_lens=None, permutation=torch.tensor(list(permutation), dtype=torch.int32))


def random_case(seed: int, num_slices: int, *, tokens: int = 20, unrouted: int = 2, chunk: int = 16,
                graph_pad_to: Optional[int] = None, host_ints: Optional[tuple[int, int]] = None,
                dtype: torch.dtype = torch.float32, k_in: int = K_IN, r_max: int = R_MAX,
                offsets: Optional[Sequence[int]] = None, device="cpu") -> CsgmvCase:
    """A random ragged batch: ``tokens`` routed rows over three slots of ranks (R, r < R, 0) in a random
    order and scalings, one zero-length segment, ``unrouted`` physical rows no segment names (at random
    places), a random physical order.  ``k_in``, ``r_max`` and the slice ``offsets`` (default
    ``SLICE_OFFSETS[num_slices]``) size it; every tensor, metadata included, lives on ``device``."""
    R_MAX, K_IN = r_max, k_in  # noqa: N806 (the module's defaults, overridden for this case)
    g = torch.Generator().manual_seed(seed)
    ranks = [R_MAX, int(torch.randint(1, R_MAX, (1,), generator=g)), 0]
    ranks = [ranks[i] for i in torch.randperm(SLOTS, generator=g).tolist()]
    scalings = [round(float(v), 3) for v in (torch.rand(SLOTS, generator=g) * 2 - 0.5)]
    token_slots = torch.randint(0, SLOTS, (tokens,), generator=g).tolist()
    lens, slots, perm = chunked(token_slots, chunk)  # as the csgmv backend cuts its batch
    at = int(torch.randint(0, len(lens) + 1, (1,), generator=g))
    lens.insert(at, 0)
    slots.insert(at, int(torch.randint(0, SLOTS, (1,), generator=g)))
    S = tokens + unrouted
    physical = torch.randperm(S, generator=g).tolist()  # logical token t lives at physical row physical[t]
    permutation = [physical[t] for t in perm]
    bi = on_device(batch_info(lens, slots, ranks, scalings, permutation, chunk=chunk, graph_pad_to=graph_pad_to,
                              host_ints=host_ints), device)
    offsets = tuple(offsets or SLICE_OFFSETS[num_slices])
    assert len(offsets) == num_slices + 1, (offsets, num_slices)
    out_dim = offsets[-1]

    def rnd(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(device=device, dtype=dtype)

    return CsgmvCase(bi, num_slices, x=rnd(S, K_IN), a=rnd(SLOTS, num_slices * R_MAX, K_IN, scale=K_IN ** -0.5),
                     h=rnd(S, num_slices * R_MAX), b=rnd(SLOTS, out_dim, R_MAX, scale=R_MAX ** -0.5),
                     base=rnd(S, out_dim), offsets=torch.tensor(offsets, dtype=torch.int32, device=device))


def on_device(bi: LoRABatchInfo, device) -> LoRABatchInfo:
    """``bi`` with its tensors on ``device`` (host ints stay ints)."""
    return dataclasses.replace(bi, **{f.name: getattr(bi, f.name).to(device) for f in dataclasses.fields(bi)
                                      if isinstance(getattr(bi, f.name), torch.Tensor)})
