"""SGLang's chunked SGMV LoRA kernels (``--lora-backend csgmv``, SGLang's default) on a CUDA device, at serving
shapes, against the float64 oracle of reference/csgmv.py: what the interpreter run (test_sglang_csgmv.py) cannot
show.

* bf16 and fp16 (the interpreter gets bf16 wrong), fp32 with TF32 dot products (Triton's default on the GPU);
  an fp32 shrink whose tiles need more shared memory than the device gives a block (64-row chunks on an H100 or
  H200: Note [csgmv shrink shared memory]) must be refused by Triton with exactly that figure, the known
  difference ``sglang-csgmv-fp32-shared-memory`` (harness/known_issues.toml);
* serving widths: K 4096, ranks 16 / 32 / 64, the qkv (4096 / 1024 / 1024), gate_up (2 x 14336) and o
  (4096) slice layouts, 16 / 32 / 64-row chunks (``max_len``, the kernels' BLOCK_M), with a rank-0 slot, a
  zero-length segment, unrouted rows and a random physical order (shrink outputs NaN-poisoned);
* the tuned block configs of the device the test runs on (``csgmv_configs/`` for an H200 or H100);
* the split-K shrink of 0.5.22+ where SGLang takes it (``SGLANG_ENABLE_LORA_CSGMV_SPLIT_K``: bf16, rank 32,
  K 4096) and with an explicit ``split_k``;
* a CUDA graph captured once and replayed for new batches written into the same metadata buffers, as the
  csgmv backend replays decode (0.5.14+; earlier releases' stale host ints are test_sglang_csgmv.py's).

Each distinct code runs once (its first release); the tolerance is the oracle's exact-arithmetic bound.
"""

from __future__ import annotations

import functools

import pytest
import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from kernel_oracle.fuzz.targets.sglang_csgmv import CsgmvConfiguration, load_csgmv
from kernel_oracle.fuzz.targets.sglang_csgmv_smem import shrink_tiles
from kernel_oracle.harness.fresh_outputs import nan_filled_allocations
from kernel_oracle.harness.known_issues import match_known
from kernel_oracle.reference.csgmv import expand_reference, shrink_reference

from oracle_tests._csgmv_cases import CODE_GROUPS, random_case
from oracle_tests._sglang_releases import ALL_RELEASES, release_files
from oracle_tests.conftest import DEVICE

pytestmark = pytest.mark.skipif(DEVICE != "cuda", reason="serving shapes need a CUDA device; the interpreter run "
                                                         "is test_sglang_csgmv.py")

CODES = tuple(group[0] for group in CODE_GROUPS)
GRAPH_FIX, SPLIT_K_SINCE = "0.5.14", "0.5.22"
K = 4096
OUT_OF_SHARED_MEMORY = "sglang-csgmv-fp32-shared-memory"  # the known difference (harness/known_issues.toml)
LAYOUTS = {"qkv": (0, 4096, 5120, 6144), "gate_up": (0, 14336, 28672), "o": (0, 4096)}


def since(version: str, release: str) -> bool:
    return ALL_RELEASES.index(version) >= ALL_RELEASES.index(release)


@functools.lru_cache(maxsize=None)
def kernels(version: str, config: CsgmvConfiguration = CsgmvConfiguration()):
    return load_csgmv(release_files(version), config)


def allowed(expected, dtype) -> torch.Tensor:
    """The error bound of a GPU launch, per entry, as a multiple of the oracle's ``magnitude``: products in
    fp32 (exact for bf16 and fp16 inputs; TF32 for fp32, each factor truncated to 10 mantissa bits, so off
    by less than 2**-10 of itself, the product by less than 2**-9 + 2**-20: Note [TF32 rounding] in
    reference/tolerance.py, shown on the device by :func:`test_tl_dot_truncates_fp32_operands_to_tf32`),
    summed in fp32 (``terms`` additions of 2**-24 each), then at most two roundings to the output dtype (the
    result, and a partial sum cast before it is added to ``base_output``).  Far tighter than the oracle's
    default (every step in the output dtype), which at K 4096 in bf16 would allow 32 times the magnitude."""
    products = 2.0 ** -9 + 2.0 ** -20 if dtype == torch.float32 else 0.0
    rel = products + (expected.terms + 2) * 2.0 ** -24 + 2 * torch.finfo(dtype).eps
    return rel * expected.magnitude + torch.finfo(dtype).tiny


def mismatch(expected, actual) -> str | None:
    """None when ``actual`` is within :func:`allowed` of the oracle over its defined region, else where."""
    return expected.mismatch(actual, allowed=allowed(expected, actual.dtype))


def _check(expected, actual, what):
    problem = mismatch(expected, actual)
    assert problem is None, f"{what}: {problem}"


def _shrink(k, c, **kw):
    with nan_filled_allocations():  # the output is a fresh torch.empty: unwritten entries read NaN
        out = k.shrink(c.x, c.a, c.batch_info, c.num_slices, **kw)
    torch.cuda.synchronize()
    return out


def _refused_for_shared_memory(version, k, c, tag) -> bool:
    """Whether the shrink's tiles need more shared memory than the device gives a block (Note [csgmv shrink
    shared memory]); if so, Triton must refuse the launch with exactly that figure and the device's limit,
    as the known difference the registry records for this release."""
    need = shrink_tiles(k.shrink, c.x, c.a, c.batch_info, c.num_slices).shared_memory(
        torch.cuda.get_device_capability(0))
    limit = torch.cuda.get_device_properties(0).shared_memory_per_block_optin
    if need <= limit:
        return False
    with pytest.raises(OutOfResources) as info:
        _shrink(k, c)
    assert (info.value.name, info.value.required, info.value.limit) == ("shared memory", need, limit), tag
    target = f"sglang-csgmv=={version}"
    finding = {"target": target, "op": "csgmv_shrink", "kind": "contract",  # as a campaign records the raise
               "message": f"raised OutOfResources({str(info.value)!r}) on a valid input"}
    known = match_known(finding, target)
    assert known is not None and known.id == OUT_OF_SHARED_MEMORY, f"{tag}: {known}"
    return True


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16, torch.float32), ids=str)
@pytest.mark.parametrize("version", CODES)
def test_each_code_matches_the_oracle_at_serving_shapes(version, dtype):
    """Shrink and expand against the oracle at each layout, rank and chunk; a shrink whose tiles cannot fit
    (fp32 at 64-row chunks on Hopper) is asserted refused instead, and its expand still checked."""
    k = kernels(version)
    for i, (layout, offsets) in enumerate(LAYOUTS.items()):
        for rank, chunk in ((16, 16), (64, 32), (32, 64)):
            c = random_case(100 * CODES.index(version) + 10 * i + rank, len(offsets) - 1, tokens=300, unrouted=5,
                            chunk=chunk, dtype=dtype, k_in=K, r_max=rank, offsets=offsets, device="cuda")
            tag = f"sglang {version} {str(dtype)[6:]}, {layout}, rank {rank}, chunk {chunk}"
            if not _refused_for_shared_memory(version, k, c, f"{tag}: shrink"):
                _check(shrink_reference(c.x, c.a, c.batch_info, c.num_slices), _shrink(k, c), f"{tag}: shrink")
            base = c.base.clone()
            out = k.expand(c.h, c.b, c.batch_info, c.offsets, c.max_slice_size, base)
            assert out.data_ptr() == base.data_ptr(), f"{tag}: expand must accumulate into base_output in place"
            _check(expand_reference(c.h, c.b, c.batch_info, c.offsets, c.max_slice_size, c.base), out,
                   f"{tag}: expand")
            if since(version, SPLIT_K_SINCE):  # the ragged slice grid from the CPU copy of the offsets
                cpu = c.offsets.cpu()
                _check(expand_reference(c.h, c.b, c.batch_info, c.offsets, 0, c.base, cpu),
                       k.expand(c.h, c.b, c.batch_info, c.offsets, c.max_slice_size, c.base.clone(),
                                slice_offsets_cpu=cpu), f"{tag}: expand, CPU offsets")


@pytest.mark.parametrize("version", [v for v in CODES if since(v, SPLIT_K_SINCE)])
def test_split_k_shrink_where_sglang_takes_it(version):
    """bf16 rank-32 adapters at K 4096 with the switch on take the split-K shrink (fp32 partials, then a
    reduce); an explicit split_k takes it for any shape."""
    on = kernels(version, CsgmvConfiguration(split_k=True))
    for slices, offsets in ((3, LAYOUTS["qkv"]), (1, LAYOUTS["o"])):
        c = random_case(7 + slices, slices, tokens=300, chunk=32, dtype=torch.bfloat16, k_in=K, r_max=32,
                        offsets=offsets, device="cuda")
        want = shrink_reference(c.x, c.a, c.batch_info, slices)
        _check(want, _shrink(on, c), f"sglang {version}, {slices} slice(s): split-K shrink (switch on)")
        for split in (2, 5):
            _check(want, _shrink(kernels(version), c, split_k=split), f"sglang {version}: split_k={split}")


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float32), ids=str)
@pytest.mark.parametrize("version", [v for v in CODES if since(v, GRAPH_FIX)])
def test_a_captured_graph_replays_new_batches(version, dtype):
    """Shrink then expand captured once for a padded batch (``use_cuda_graph``: every device segment runs),
    replayed after new inputs and a new batch's segments, slots and permutation are copied into the same
    buffers (its host ints stale, as SGLang leaves them): each replay equals the oracle of that batch."""
    k = kernels(version)
    offsets = LAYOUTS["qkv"]

    def case(seed):
        return random_case(seed, 3, tokens=64, unrouted=3, chunk=16, graph_pad_to=12, host_ints=(1, 1),
                           dtype=dtype, k_in=K, r_max=16, offsets=offsets, device="cuda")

    live = case(0)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm-up: compile and autotune outside the capture
            h = k.shrink(live.x, live.a, live.batch_info, 3)
            k.expand(h, live.b, live.batch_info, live.offsets, live.max_slice_size, live.base.clone())
    torch.cuda.synchronize()
    base, widest = live.base.clone(), live.max_slice_size  # a host int, read before the capture (a device read)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        h = k.shrink(live.x, live.a, live.batch_info, 3)
        out = k.expand(h, live.b, live.batch_info, live.offsets, widest, base)
    for seed in (1, 2, 3):
        new = case(seed)
        if new.batch_info.seg_indptr.numel() != live.batch_info.seg_indptr.numel():
            continue  # a batch of more segments than the capture padded to: not a replay of this graph
        for field in ("seg_indptr", "weight_indices", "permutation", "lora_ranks", "scalings"):
            getattr(live.batch_info, field).copy_(getattr(new.batch_info, field))
        for name in ("x", "a", "b"):
            getattr(live, name).copy_(getattr(new, name))
        base.copy_(new.base)
        graph.replay()
        torch.cuda.synchronize()
        tag = f"sglang {version} {str(dtype)[6:]}, replay {seed}"
        _check(shrink_reference(new.x, new.a, new.batch_info, 3), h, f"{tag}: shrink")  # stale rows would differ
        _check(expand_reference(h.clone(), new.b, new.batch_info, new.offsets, widest, new.base), out,
               f"{tag}: expand")


def test_the_bound_catches_what_the_default_rule_lets_through():
    """A shrink entry off by 5 % of its magnitude passes the oracle's every-step-in-bf16 rule at K 4096 but
    not this file's bound, and the real kernel's output passes both."""
    k = kernels(CODES[-1])
    c = random_case(3, 1, tokens=40, chunk=16, dtype=torch.bfloat16, k_in=K, r_max=16, offsets=LAYOUTS["o"],
                    device="cuda")
    want, got = shrink_reference(c.x, c.a, c.batch_info, 1), _shrink(k, c)
    assert mismatch(want, got) is None and want.mismatch(got) is None
    row, col = (int(i) for i in want.defined.nonzero()[0])
    off = got.clone()
    off[row, col] += 0.05 * float(want.magnitude[row, col])
    assert want.mismatch(off) is None and f"first at row {row}, column {col}" in mismatch(want, off)


@triton.jit
def _dot_kernel(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    tile = i[:, None] * N + i[None, :]
    tl.store(c_ptr + tile, tl.dot(tl.load(a_ptr + tile), tl.load(b_ptr + tile)))


@pytest.mark.parametrize("n", (16, 64))
def test_tl_dot_truncates_fp32_operands_to_tf32(n):
    """The fact :func:`allowed` rests on: ``tl.dot`` of fp32 tiles (Triton's default TF32) drops the 13 low
    mantissa bits of each operand.  1 + 3 * 2**-12 lies between two TF32 values: truncated it is 1, rounded
    to nearest 1 + 2**-10.  When this fails (the operands are rounded to nearest), the fp32 bound can be
    halved to 2**-10."""
    a = torch.zeros(n, n, device="cuda")
    b = torch.zeros(n, n, device="cuda")
    a[0, 0], a[1, 1], b[0, 0], b[1, 1] = 1 + 3 * 2.0 ** -12, -(1 + 3 * 2.0 ** -12), 1.0, 1.0
    c = torch.full((n, n), float("nan"), device="cuda")
    _dot_kernel[(1,)](a, b, c, N=n)
    assert (float(c[0, 0]), float(c[1, 1])) == (1.0, -1.0), f"tl.dot gave {float(c[0, 0])!r}, {float(c[1, 1])!r}"
