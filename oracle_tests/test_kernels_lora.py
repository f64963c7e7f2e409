"""Differential tests of our Triton kv_b LoRA kernels (``kernels.lora``) against the float64 oracle.

Note [How these tests run]
--------------------------
Without a GPU the kernels run under the Triton interpreter (the conftest sets ``TRITON_INTERPRET=1``)
on small shapes whose grids stay at a few dozen programs; on a GPU the same tests run on CUDA, plus
the ``slow`` ones at realistic shapes (H=64, qk_nope=v_head_dim=128, kv_lora_rank=512, R=16..64).

Every case draws fresh random data (never zeros) from its own seed.  Fresh step-A outputs are the
kernel's own ``torch.empty`` (the poison): only the defined region is compared.  In-place steps poison
nothing; rows that no segment routes must stay bit-identical (``torch.equal``).  Values the contract
says must not matter are NaN: step-B input columns at or beyond a slot's rank, weight rows/columns
beyond a slot's rank, and input rows that no segment routes.  Values are compared with
``reference.tolerance.compare`` against the float64 oracle, with the oracle's faithful mode in the
kernel's precision as the baseline (fp32 runs tl.dot in TF32: ``faithful="tf32"``).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Optional

import pytest
import torch
import triton

import kernel_oracle.kernels as kernels
import kernel_oracle.kernels.lora as klora
import kernel_oracle.kernels.lora._launch as launch
from kernel_oracle.harness.mutations import Mutation
from kernel_oracle.harness.opinfo import FAMILY_OPS, OP_DB
from kernel_oracle.harness.problems import Call, batch_info_of
from kernel_oracle.reference import lora as ref
from kernel_oracle.reference.batch_info import make_lora_batch_info
from kernel_oracle.reference.contracts import expected_message
from kernel_oracle.reference.lora_routing import route_lora_batch
from kernel_oracle.reference.tolerance import compare

from oracle_tests.conftest import DEVICE, HAS_CUDA

OPS = FAMILY_OPS["lora"]
# ops returning a fresh (S,H,R) output; the others update base_output in place
FRESH = {op for op in OPS if OP_DB[op].inplace_arg is None}
FUSED = ("q_side_fused", "v_side_fused")
# the faithful baseline matching each activation dtype's precision in our kernels (klora.PRECISION):
# fp32 runs tl.dot in TF32 on the GPU, so its baseline rounds matmul inputs to TF32
BASELINE = {torch.float16: True, torch.bfloat16: True, torch.float32: "tf32"}
assert klora.PRECISION[torch.float32] == "tf32", "fp32 baseline must follow the kernels' fp32 precision"


def test_kernels_package_is_ours():
    """PyPI has an unrelated ``kernels`` package: make sure we test the checkout's."""
    assert "kernel_oracle" not in kernels.__file__ and kernels.__file__.endswith("kernels/__init__.py"), (
        f"import kernels resolved to {kernels.__file__}, not this checkout's kernels/ package")


@dataclass(frozen=True)
class Dims:
    H: int
    qk: int
    vd: int
    C: int  # kv_lora_rank
    R: int  # buffer rank
    L: int  # slots

    @property
    def full_k(self) -> int:
        return self.qk + self.vd


# Small shapes for the interpreter: head dims that are no multiple of the block sizes (48, 72, 40, 24),
# kv_lora_rank not a multiple of 64, a rank that is no power of two.
SMALL_DIMS = {
    "d48": Dims(H=2, qk=48, vd=40, C=64, R=16, L=3),
    "d72": Dims(H=3, qk=72, vd=24, C=80, R=24, L=4),
}


@dataclass(frozen=True)
class Batch:
    seg_lens: tuple
    slots: tuple
    ranks: tuple
    scalings: tuple
    permuted: bool = False
    pad_to: Optional[int] = None  # CUDA-graph mode, padded with zero-length segments
    extra_rows: int = 0  # rows that no segment routes (identity routing only)
    num_segments_zero: bool = False  # num_segments=0: upstream then processes bs segments


# Edge cases (CPU and GPU).  ranks are per slot; a rank above the buffer's R is clamped to R.
BATCHES = {
    # three slots, one full rank, one below R, one off (rank 0)
    "mixed-ranks": Batch((7, 3, 5), (0, 1, 2), (64, 5, 0), (0.5, 2.0, 1.0)),
    # zero-length segments between and around real ones, plus unrouted tail rows
    "empty-segments": Batch((0, 4, 0, 6, 0), (1, 0, 2, 1, 0), (9, 3, 16), (1.5, -0.5, 0.25), extra_rows=3),
    # rows scattered by a permutation
    "permuted": Batch((5, 4, 3), (2, 0, 1), (16, 7, 11), (1.0, 0.75, -1.25), permuted=True),
    # decode: one-token segments, slots interleaved (token-major by the heuristic)
    "decode": Batch((1,) * 21, (0, 1, 2, 1, 0, 2, 2) * 3, (13, 16, 2), (0.5, 1.0, 2.0)),
    # decode replayed in a CUDA graph captured for 32 segments
    "decode-graph": Batch((1,) * 9, (2, 0, 1) * 3, (16, 4, 8), (1.0, 0.5, 1.5), pad_to=32, permuted=True),
    # prefill in a CUDA graph captured for 6 segments
    "prefill-graph": Batch((6, 2, 5), (1, 1, 0), (3, 16, 0), (1.0, 0.5, 1.5), pad_to=6, extra_rows=2),
    # one segment longer than a segment-major tile (64 rows), a short one after it
    "long-segment": Batch((70, 2), (1, 0), (5, 16), (0.5, 1.0)),
    # every slot off: nothing may change
    "all-off": Batch((4, 3), (0, 1), (0, 0), (1.0, 1.0), extra_rows=1),
    # num_segments=0 and bs=3: upstream processes bs segments
    "bs-only": Batch((3, 2, 4), (0, 2, 1), (16, 1, 6), (1.0, 0.5, 2.0), num_segments_zero=True),
}


def _seed(*parts) -> int:
    return zlib.crc32("|".join(map(str, parts)).encode())


def _randn(gen, shape, dtype, device, scale=1.0, strided=False):
    """Fresh random data (never zeros); ``strided`` returns a non-contiguous view with the same values
    layout-independent: tokens and heads swapped in memory and a padded last dim."""
    if not strided:
        return (torch.randn(shape, generator=gen, dtype=torch.float32) * scale).to(dtype).to(device)
    s0, s1, s2 = shape
    big = (torch.randn((s1, s0, s2 + 5), generator=gen, dtype=torch.float32) * scale).to(dtype).to(device)
    view = big[:, :, 3:3 + s2].transpose(0, 1)
    assert not view.is_contiguous()
    return view


def _batch_info(b: Batch, dims: Dims, gen, device):
    S_routed = sum(b.seg_lens)
    perm = torch.randperm(S_routed, generator=gen).tolist() if b.permuted else None
    bi = make_lora_batch_info(b.seg_lens, b.slots, b.ranks + (16,) * (dims.L - len(b.ranks)),
                              b.scalings + (1.0,) * (dims.L - len(b.scalings)), permutation=perm,
                              cuda_graph_pad_to=b.pad_to, device=device)
    if b.num_segments_zero:
        bi.num_segments = 0
    return bi, S_routed + b.extra_rows


def _make_call(op: str, b: Batch, dims: Dims, dtype, base_dtype, device, *, strided=False, seed=0):
    """Positional arguments of ``op`` (SGLang order) with NaN wherever the contract says values don't matter."""
    gen = torch.Generator().manual_seed(seed)
    bi, S = _batch_info(b, dims, gen, device)
    H, R, C = dims.H, dims.R, dims.C
    route = route_lora_batch(bi, num_rows=S, num_slots=dims.L, max_rank=R, device=bi.seg_indptr.device,
                             strict=True)
    routed = torch.zeros(S, dtype=torch.bool)
    routed[route.rows] = True
    ranks = [min(R, int(r)) for r in bi.lora_ranks.tolist()]
    # weights: 1/sqrt(fan-in) scale; NaN beyond each slot's rank
    B_buf = _randn(gen, (dims.L, H * dims.full_k, R), dtype, device, scale=dims.qk ** -0.5)
    A_buf = _randn(gen, (dims.L, R, C), dtype, device, scale=C ** -0.5)
    for w, r in enumerate(ranks):
        B_buf[w, :, max(r, 0):] = float("nan")
        A_buf[w, max(r, 0):, :] = float("nan")
    if strided:
        B_buf = torch.cat([B_buf, B_buf[..., :3]], dim=-1)[..., :R]
        A_buf = A_buf.transpose(1, 2).contiguous().transpose(1, 2)
    sig = OP_DB[op].signature
    name = sig.params[0]  # the step's input; its last dim and base_output's (q side: C, v side: vd)
    in_dim, out_dim = {"q_nope": (dims.qk, C), "attn_output": (C, dims.vd), "q_lora_a": (R, C),
                       "attn_lora_a": (R, dims.vd)}[name]
    x = _randn(gen, (S, H, in_dim), dtype, device, strided=strided)
    with torch.no_grad():
        x[~routed.to(device)] = float("nan")  # unrouted rows must not be read into anything defined
        if in_dim == R:  # step-B columns at or beyond the row's slot rank
            row_rank = torch.full((S,), R, dtype=torch.int64)
            row_rank[route.rows] = torch.tensor([ranks[int(w)] for w in route.slot], dtype=torch.int64)
            beyond = torch.arange(R)[None, :] >= row_rank[:, None]
            x.masked_fill_(beyond[:, None, :].to(device), float("nan"))
    values = {name: x, "B_buf": B_buf, "A_buf": A_buf, sig.batch_info: bi, "full_K_per_head": dims.full_k,
              "qk_nope_head_dim": dims.qk, "v_head_dim": dims.vd}
    if sig.inplace is not None:
        values[sig.inplace] = _randn(gen, (S, H, out_dim), base_dtype, device, strided=strided)
    args = sig.bind({k: v for k, v in values.items() if k in sig.params})
    return args, routed


def _as_call(op: str, args) -> Call:
    return Call.bind(OP_DB[op].signature, dict(zip(OP_DB[op].signature.params, args)))


def _check(op: str, args, routed, dtype, repro: str):
    oracle = getattr(ref, f"{op}_oracle")
    exact = oracle(*args)
    faithful = oracle(*args, faithful=BASELINE[dtype])
    kernel = getattr(klora, f"{op}_fwd")
    if op in FRESH:
        out = kernel(*args)  # fresh output: its torch.empty is the poison
    else:
        base = args[OP_DB[op].inplace_arg]
        before = base.clone()
        out = kernel(*args)
        assert out is base, f"{op} must update base_output in place and return it"
        keep = (~routed).to(base.device)
        assert torch.equal(base[keep], before[keep]), f"{op}: rows no segment routes changed; {repro}"
    c = compare(out, exact.value, exact.defined, family="lora", baseline=faithful.baselines, repro=repro)
    assert c.ok, c.message


def _cases():
    for op in OPS:
        for bname in BATCHES:
            for dname, dtype in (("d48", torch.bfloat16), ("d72", torch.float32), ("d48", torch.float16)):
                yield pytest.param(op, bname, dname, dtype, id=f"{op}-{bname}-{dname}-{str(dtype)[6:]}")


@pytest.mark.interpreter
@pytest.mark.parametrize("path", ["seg", "tok"])  # "auto" runs in test_kernel_dtypes_and_strides
@pytest.mark.parametrize("op,bname,dname,dtype", list(_cases()))
def test_kernel_matches_oracle(op, bname, dname, dtype, path, monkeypatch):
    monkeypatch.setattr(launch, "FORCE_PATH", path)
    seed = _seed(op, bname, dname, dtype, path)
    args, routed = _make_call(op, BATCHES[bname], SMALL_DIMS[dname], dtype, dtype, DEVICE, seed=seed)
    _check(op, args, routed, dtype, f"op={op} batch={bname} dims={dname} dtype={dtype} path={path} seed={seed}")


# activation dtype x base_output dtype, strided layouts of every data tensor
LAYOUT_CASES = [
    (torch.bfloat16, torch.float32, False),
    (torch.float32, torch.bfloat16, False),
    (torch.float16, torch.float32, True),
    (torch.bfloat16, torch.bfloat16, True),
]


@pytest.mark.interpreter
@pytest.mark.parametrize("bname", ["mixed-ranks", "decode-graph"])
@pytest.mark.parametrize("dtype,base_dtype,strided", LAYOUT_CASES,
                         ids=[f"{str(a)[6:]}-base_{str(b)[6:]}-{'strided' if s else 'contig'}"
                              for a, b, s in LAYOUT_CASES])
@pytest.mark.parametrize("op", OPS)
def test_kernel_dtypes_and_strides(op, dtype, base_dtype, strided, bname):
    seed = _seed(op, dtype, base_dtype, strided, bname)
    args, routed = _make_call(op, BATCHES[bname], SMALL_DIMS["d72"], dtype, base_dtype, DEVICE,
                              strided=strided, seed=seed)
    _check(op, args, routed, dtype, f"op={op} batch={bname} dtype={dtype} base={base_dtype} strided={strided}")


def _with_blocks(monkeypatch, path: str, **changes) -> None:
    """BLOCKS with ``changes`` applied to every op's ``path`` entry that has the keys (or to all, for
    new keys the fused kernels take)."""
    blocks = {op: {p: dict(b) for p, b in paths.items()} for op, paths in launch.BLOCKS.items()}
    for op, paths in blocks.items():
        for key, value in changes.items():
            if key in ("PREFETCH", "HEADS_FIRST", "META_FIRST", "PDL") and op not in FUSED:
                continue
            if key == "PREFETCH_ALL" and op != "q_side_fused":
                continue
            paths[path][key] = value
    monkeypatch.setattr(launch, "BLOCKS", blocks)


# The token-major routes (logical rows; each slot's rows in segment order, Note [Slot-sorted tiles], on its
# per-slot grid or on the flat grid, Note [Flat slot grid]) and the fused kernels' early base load
# (PREFETCH) are options a benchmark sweeps, so each is checked against the oracle; tiles of 4 rows make
# every slot span several tiles, and tiles mix slots
ROUTES = {"logical-rows": dict(SLOT_SORTED=False, FLAT_SLOTS=False),
          "slot-sorted": dict(SLOT_SORTED=True, FLAT_SLOTS=False),
          "flat": dict(SLOT_SORTED=True, FLAT_SLOTS=True, FLAT_SLOTS_MIN_SAVING=0)}


def _with_route(monkeypatch, route: str) -> list:
    """Token-major launches on ``route``; returns the list the launches' plans are appended to."""
    monkeypatch.setattr(launch, "FORCE_PATH", "tok")
    for name, value in ROUTES[route].items():
        monkeypatch.setattr(launch, name, value)
    plans, plan = [], launch.plan
    monkeypatch.setattr(launch, "plan", lambda *a, **kw: plans.append(plan(*a, **kw)) or plans[-1])
    return plans


@pytest.mark.interpreter
@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("bname", ["decode", "decode-graph", "empty-segments", "permuted"])
@pytest.mark.parametrize("op", OPS)
def test_token_major_routes_match_oracle(op, bname, route, monkeypatch):
    plans = _with_route(monkeypatch, route)
    _with_blocks(monkeypatch, "tok", BT=4)
    seed = _seed(op, bname, route != "logical-rows")  # slot-sorted and flat: the same data
    args, routed = _make_call(op, BATCHES[bname], SMALL_DIMS["d48"], torch.bfloat16, torch.bfloat16, DEVICE,
                              seed=seed)
    _check(op, args, routed, torch.bfloat16, f"op={op} batch={bname} route={route} seed={seed}")
    assert plans and all((p.slot_block > 0) == (route == "flat") for p in plans), plans


# Flat grid (Note [Flat slot grid]) batches, with 4-row tiles: slots interleaved, a slot with no rows, a
# rank-0 slot, slots of several tiles, slot counts that are no power of two, and more slots than NSLOT's
# smallest bucket (11 slots: NSLOT 16).  (batch, slots)
FLAT_BATCHES = {
    # slot 4: 14 rows (4 tiles), 0: 5 (2), 2: 3 (1), 1 (rank 0): 2; slot 3 (rank 12) has none
    "five-slots": (Batch((1, 3, 1, 1, 6, 1, 2, 1, 1, 5, 1, 1), (4, 0, 2, 1, 4, 0, 4, 2, 1, 4, 0, 2),
                         (16, 0, 7, 12, 16), (0.5, 1.0, -2.0, 1.5, 0.75)), 5),
    # one-token segments over 11 slots, slot 10 unused, slot 5 off, permuted rows
    "eleven-slots": (Batch((1,) * 23, tuple(i * 7 % 10 for i in range(23)),
                           (16, 3, 9, 16, 1, 0, 12, 5, 16, 8, 4), (1.0, 0.5, 2.0, -1.0, 1.5, 1.0, 0.25, 1.0, 0.5,
                                                                     2.0, 1.0), permuted=True), 11),
    # graph replay: padded segments of zero length, 3 slots, and a long segment of slot 1
    "three-slots-graph": (Batch((1, 9, 1, 1), (2, 1, 0, 2), (16, 5, 11), (1.0, 0.5, 1.5), pad_to=8), 3),
}


@pytest.mark.interpreter
@pytest.mark.parametrize("bname", list(FLAT_BATCHES))
@pytest.mark.parametrize("op", OPS)
def test_flat_grid_matches_oracle(op, bname, monkeypatch):
    plans = _with_route(monkeypatch, "flat")
    _with_blocks(monkeypatch, "tok", BT=4)
    batch, L = FLAT_BATCHES[bname]
    dims = Dims(H=2, qk=48, vd=40, C=64, R=16, L=L)
    seed = _seed(op, bname, "flat")
    args, routed = _make_call(op, batch, dims, torch.bfloat16, torch.bfloat16, DEVICE, seed=seed)
    _check(op, args, routed, torch.bfloat16, f"op={op} batch={bname} flat seed={seed}")
    assert plans and all(p.slot_block == launch.slot_block(L) > 0 for p in plans), plans


# Note [Slot metadata first]: the fused kernels' option of loading the slot's rank and scaling (on the flat
# grid every slot's) before the route, on each route and on the flat batches (11 slots: NSLOT 16; a rank-0
# slot; a slot with no rows; graph padding)
META_FIRST_CASES = [(route, bname) for route in ROUTES for bname in ("decode-graph", "permuted")] + \
    [("flat", bname) for bname in FLAT_BATCHES]


@pytest.mark.interpreter
@pytest.mark.parametrize("route,bname", META_FIRST_CASES, ids=[f"{r}-{b}" for r, b in META_FIRST_CASES])
@pytest.mark.parametrize("op", FUSED)
def test_fused_slot_metadata_first_matches_oracle(op, route, bname, monkeypatch):
    plans = _with_route(monkeypatch, route)
    _with_blocks(monkeypatch, "tok", BT=4, META_FIRST=True)
    if bname in FLAT_BATCHES:
        batch, L = FLAT_BATCHES[bname]
        dims = Dims(H=2, qk=48, vd=40, C=64, R=16, L=L)
    else:
        batch, dims = BATCHES[bname], SMALL_DIMS["d48"]
    seed = _seed(op, bname, route, "meta-first")
    args, routed = _make_call(op, batch, dims, torch.bfloat16, torch.bfloat16, DEVICE, seed=seed)
    _check(op, args, routed, torch.bfloat16, f"op={op} batch={bname} route={route} META_FIRST seed={seed}")
    assert plans and all(p.blocks.get("META_FIRST") for p in plans), plans


@pytest.mark.interpreter
@pytest.mark.parametrize("op,route,meta_first", [(op, route, False) for op in OPS for route in ("slot-sorted", "flat")]
                         + [(op, route, True) for op in FUSED for route in ("slot-sorted", "flat")])
def test_token_major_out_of_range_slots_with_strict_false(op, route, meta_first, monkeypatch):
    """strict=False, weight indices past the slots and negative: no fault (nothing read or written out of
    bounds), the defined rows match the oracle, and the broken segments' rows, which no program serves,
    stay as they were (in-place ops), like every row no segment routes.  META_FIRST (fused kernels): the
    slots' ranks and scalings loaded before the route read none past the L slots either."""
    _with_route(monkeypatch, route)
    _with_blocks(monkeypatch, "tok", BT=4, **({"META_FIRST": True} if meta_first else {}))
    batch = Batch((1, 2, 1, 5, 1, 1, 3, 1), (0, 2, 1, 0, 2, 2, 1, 0), (16, 7, 11), (0.5, 2.0, -1.0))
    dims = SMALL_DIMS["d48"]
    seed = _seed(op, route, "bad-slots")
    args, routed = _make_call(op, batch, dims, torch.bfloat16, torch.bfloat16, DEVICE, seed=seed)
    bi = batch_info_of(_as_call(op, args))
    bi.weight_indices[3] = dims.L + 4  # segment 3: rows 4..8 (a slot below NSLOT, 8: only n_slots excludes it)
    bi.weight_indices[6] = -1  # segment 6: rows 11..13
    # ranks and scalings as views of longer buffers, on and finite past the L slots: a program that took a
    # bad index for a slot would read them and write the broken rows
    bi.lora_ranks = torch.cat([bi.lora_ranks, torch.full_like(bi.lora_ranks, dims.R).repeat(4)])[:dims.L]
    bi.scalings = torch.cat([bi.scalings, torch.ones_like(bi.scalings).repeat(4)])[:dims.L]
    broken = torch.zeros_like(routed)
    broken[4:9] = broken[11:14] = True
    oracle = getattr(ref, f"{op}_oracle")
    exact = oracle(*args, strict=False)
    assert not exact.defined[broken.to(exact.defined.device)].any()
    kernel = getattr(klora, f"{op}_fwd")
    repro = f"op={op} route={route} bad slots seed={seed}"
    if op in FRESH:
        out = kernel(*args, strict=False)
    else:
        base = args[OP_DB[op].inplace_arg]
        before = base.clone()
        out = kernel(*args, strict=False)
        keep = (~routed | broken).to(base.device)
        assert torch.equal(base[keep], before[keep]), f"{op}: rows of no slot changed; {repro}"
    faithful = oracle(*args, faithful=BASELINE[torch.bfloat16], strict=False)
    c = compare(out, exact.value, exact.defined, family="lora", baseline=faithful.baselines, repro=repro)
    assert c.ok, c.message


@pytest.mark.parametrize("op", OPS)
def test_flat_grid_is_the_bound_and_falls_back_above_the_slot_cap(op, monkeypatch):
    """Host side of Note [Flat slot grid]: ceil(S/BT) + L - 1 tiles and no slot axis up to FLAT_SLOTS_MAX
    slots (a bound of sum_w ceil(n_w/BT), reached when every slot's rows overflow a tile by one row);
    the slot-sorted grid above it, with FLAT_SLOTS off, without slot-sorted tiles, or beyond the compare
    tile (binary search)."""
    monkeypatch.setattr(launch, "FORCE_PATH", "tok")
    monkeypatch.setattr(launch, "FLAT_SLOTS_MIN_SAVING", 0)  # the bound wherever allowed (the saving rule: below)
    bt = launch.BLOCKS[op]["tok"]["BT"]
    for L in (1, 3, 4, 8, 9, 31, 32, 33, 64):
        # one segment of bt + 1 rows per slot: 2 tiles each, 2L (slot, tile) pairs in all
        bi = make_lora_batch_info((bt + 1,) * L, list(range(L)), [16] * L, [1.0] * L)
        S = L * (bt + 1)
        p = launch.plan(op, bi, S, bt + 1, num_slots=L)
        assert p.token_major and p.seg_tile > 0, p
        if L <= launch.FLAT_SLOTS_MAX:
            assert p.slot_block == max(8, triton.next_power_of_2(L)), (L, p)
            assert p.row_tiles == triton.cdiv(S, bt) + L - 1 >= 2 * L and launch._axis2(p, L, 3) == 3, (L, p)
            assert p.row_tiles == 2 * L or L > bt, (L, p)  # the bound is reached
        else:
            assert p.slot_block == 0 and p.row_tiles == triton.cdiv(S, bt), (L, p)
            assert launch._axis2(p, L, 3) == 3 * L
    bi = make_lora_batch_info((1,) * 64, [i % 4 for i in range(64)], [16] * 4, [1.0] * 4)
    assert launch.plan(op, bi, 64, 1, num_slots=0).slot_block == 0  # no slots: nothing to lay out flat
    for name in ("FLAT_SLOTS", "SLOT_SORTED"):
        with monkeypatch.context() as m:
            m.setattr(launch, name, False)
            p = launch.plan(op, bi, 64, 1, num_slots=4)
            assert p.slot_block == 0 and p.row_tiles == triton.cdiv(64, bt) and launch._axis2(p, 4, 1) == 4
    many = make_lora_batch_info((1,) * 300, [i % 4 for i in range(300)], [16] * 4, [1.0] * 4)
    assert launch.plan(op, many, 300, 1, num_slots=4).slot_block == 0  # binary search: no compare tile


def test_flat_grid_bound_holds_for_random_batches():
    """sum_w ceil(n_w/BT) <= ceil(S/BT) + L - 1 for any split of S rows over L slots (the flat grid's bound)."""
    gen = torch.Generator().manual_seed(7)
    for _ in range(2000):
        L = int(torch.randint(1, 33, (1,), generator=gen))
        bt = int(2 ** torch.randint(0, 7, (1,), generator=gen))
        n = torch.randint(0, 200, (L,), generator=gen)
        S = int(n.sum()) + int(torch.randint(0, 3, (1,), generator=gen))  # unrouted rows too
        assert sum(triton.cdiv(int(x), bt) for x in n) <= triton.cdiv(S, bt) + L - 1, (L, bt, n.tolist(), S)


@pytest.mark.interpreter
@pytest.mark.parametrize("heads_first", [False, True])
@pytest.mark.parametrize("path", ["seg", "tok"])
@pytest.mark.parametrize("bname", ["decode", "mixed-ranks", "long-segment"])
@pytest.mark.parametrize("op", ["q_side_fused", "v_side_fused"])
def test_fused_prefetch_matches_oracle(op, bname, path, heads_first, monkeypatch):
    """PREFETCH, in the grid's own order and with programs renumbered heads first (HEADS_FIRST): A/B options."""
    monkeypatch.setattr(launch, "FORCE_PATH", path)
    # inner blocks of 16 columns: several base blocks per program, so the prefetch chain is exercised
    _with_blocks(monkeypatch, path, PREFETCH=True, HEADS_FIRST=heads_first,
                 **({"BLOCK_C": 16} if op == "q_side_fused" else {"BLOCK_V": 16}))
    seed = _seed(op, bname, path, "prefetch", heads_first)
    args, routed = _make_call(op, BATCHES[bname], SMALL_DIMS["d72"], torch.float16, torch.float32, DEVICE, seed=seed)
    _check(op, args, routed, torch.float16,
           f"op={op} batch={bname} path={path} heads_first={heads_first} prefetch seed={seed}")


@pytest.mark.interpreter
@pytest.mark.parametrize("path", ["seg", "tok"])
@pytest.mark.parametrize("bname", ["decode", "mixed-ranks", "long-segment"])
def test_fused_q_whole_row_prefetch_matches_oracle(bname, path, monkeypatch):
    """PREFETCH_ALL (Note [Whole-row prefetch]): the first four base and A blocks loaded before step A.  Blocks of 16 columns over kv_lora_rank 80: four prefetched blocks and one more in the
    plain loop after them, so both halves and the hand-off between them are checked."""
    monkeypatch.setattr(launch, "FORCE_PATH", path)
    _with_blocks(monkeypatch, path, PREFETCH=False, PREFETCH_ALL=True, BLOCK_C=16)
    seed = _seed("q_side_fused", bname, path, "prefetch-all")
    args, routed = _make_call("q_side_fused", BATCHES[bname], SMALL_DIMS["d72"], torch.float16, torch.float32,
                              DEVICE, seed=seed)
    _check("q_side_fused", args, routed, torch.float16,
           f"batch={bname} path={path} PREFETCH_ALL seed={seed}")


@pytest.mark.interpreter
@pytest.mark.skipif(HAS_CUDA, reason="on a GPU the fp32 realistic-shape tests check TF32 on the real tensor cores")
@pytest.mark.parametrize("op", OPS)
def test_fp32_tf32_operands_match_tf32_baseline(op, monkeypatch):
    """The interpreter's fp32 dot is exact: forcing the TF32 path there checks that our operand rounding
    (RNE to TF32, because the tensor cores truncate) is exactly the oracle's faithful="tf32" model."""
    flags = launch._flags
    monkeypatch.setattr(launch, "_flags", lambda *a: {**flags(*a), "DOT_PREC": "tf32"})
    seed = _seed("tf32", op)
    args, routed = _make_call(op, BATCHES["mixed-ranks"], SMALL_DIMS["d72"], torch.float32, torch.float32, DEVICE,
                              seed=seed)
    out = getattr(klora, f"{op}_fwd")(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    tf32 = getattr(ref, f"{op}_oracle")(*args, faithful="tf32")
    d = tf32.defined
    # same rounding points, fp32 summation order only: far below one TF32 ulp of the outputs
    err = float((out.double() - tf32.value.double()).abs()[d].max())
    scale = float(tf32.value.double().abs()[d].max())
    assert err <= 1e-5 * scale, f"{op}: TF32-emulated kernel differs from faithful='tf32' by {err:.3g} (scale {scale:.3g})"


# ---- path choice ---------------------------------------------------------------------------------

@pytest.mark.parametrize("seg_lens,pad_to,expect_token_major", [
    ((1,) * 64, None, True),        # decode: 64 one-token segments
    ((1,) * 7, 64, True),           # decode replayed in a graph captured for 64 segments
    ((1024,) * 4, None, False),     # prefill
    ((2048,) * 8, None, False),
    ((300, 1, 1, 1, 1), None, True),   # skewed: segment-major would launch 25 tiles for 5 tiles of rows
    ((300, 200, 250), None, False),  # ragged prefill: tiles mostly full
    ((2,) * 40, None, True),        # short chunks
])
def test_path_heuristic(seg_lens, pad_to, expect_token_major):
    bi = make_lora_batch_info(seg_lens, [0] * len(seg_lens), [16], [1.0], cuda_graph_pad_to=pad_to)
    for op in OPS:
        p = launch.plan(op, bi, sum(seg_lens), bi.max_len)
        assert p.token_major == expect_token_major, f"{op}: {p} for seg_lens={seg_lens[:4]}... pad_to={pad_to}"


# ---- contracts -----------------------------------------------------------------------------------

def _fail_launch(monkeypatch):
    """Make every kernel launch an error, to show that a contract error comes before any launch."""
    class NoLaunch:
        def __getitem__(self, grid):
            raise AssertionError("a kernel was launched before the contract error")
    for op in OPS:
        monkeypatch.setattr(launch.K, f"{op}_kernel", NoLaunch())


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("op", OPS)
def test_missing_max_len_raises_upstream_error(op, strict, monkeypatch):
    args, _ = _make_call(op, BATCHES["mixed-ranks"], SMALL_DIMS["d48"], torch.float32, torch.float32, DEVICE,
                         seed=_seed("missing", op))
    call = Mutation("lora", "drop_max_len_and_seg_lens").apply(_as_call(op, args))
    _fail_launch(monkeypatch)
    with pytest.raises(ValueError) as info:
        getattr(klora, f"{op}_fwd")(*call.args, strict=strict)
    assert type(info.value) is ValueError
    assert str(info.value) == expected_message("lora.missing_max_len")


# (mutation, contract, its fields from the broken batch info): on segments (7, 3, 5) over 3 slots, permuted
STRICT_BREAKERS = {
    # weight_indices[1] = 3 + 5 - 1 = 7
    "bad_slot": (Mutation("lora", "slot_out_of_range", 1, 5), "lora.strict.slot_out_of_range",
                 lambda bi: dict(index=1, value=7, num_slots=3, last=2)),
    # max_len = 7 - 5 = 2
    "small_max_len": (Mutation("lora", "max_len_too_small", 0, 5), "lora.strict.max_len_too_small",
                      lambda bi: dict(value=2, index=0, longest=7)),
    # permutation[3] = permutation[0]
    "dup_perm": (Mutation("lora", "permutation_duplicate", 0, 3), "lora.strict.permutation_duplicate",
                 lambda bi: dict(index=3, value=int(bi.permutation[0]), first=0)),
}


# strict errors come from the same code as the reference's (reference.lora.validate_call), before any launch
@pytest.mark.parametrize("breaker", list(STRICT_BREAKERS))
@pytest.mark.parametrize("op", OPS)
def test_strict_errors_match_reference(op, breaker, monkeypatch):
    batch = Batch((7, 3, 5), (0, 1, 2), (16, 5, 0), (0.5, 2.0, 1.0), permuted=True)
    args, _ = _make_call(op, batch, SMALL_DIMS["d48"], torch.float32, torch.float32, DEVICE, seed=_seed("strict", op))
    mutation, cid, fields = STRICT_BREAKERS[breaker]
    call = mutation.apply(_as_call(op, args))
    with pytest.raises(ValueError) as from_ref:
        getattr(ref, f"{op}_fwd")(*call.args)
    _fail_launch(monkeypatch)
    with pytest.raises(ValueError) as from_kernel:
        getattr(klora, f"{op}_fwd")(*call.args)
    assert type(from_kernel.value) is ValueError
    assert str(from_kernel.value) == expected_message(cid, **fields(batch_info_of(call))) == str(from_ref.value)


# ---- GPU: realistic shapes, CUDA graphs, no host synchronisation ---------------------------------

REAL_DIMS = {f"R{R}": Dims(H=64, qk=128, vd=128, C=512, R=R, L=4) for R in (16, 32, 64)}
REAL_BATCHES = {
    # decode-bs64: one-token segments over 4 slots, mixed ranks incl. one below R and one off
    "decode-bs64": Batch((1,) * 64, (0, 1, 2, 3) * 16, (64, 9, 0, 32), (0.5, 1.0, 2.0, 0.25)),
    # chunked prefill with a permutation and an empty segment
    "prefill-perm": Batch((700, 0, 333, 1024), (3, 2, 0, 1), (32, 64, 5, 17), (1.0, 0.5, 2.0, 1.5), permuted=True),
    # decode in a graph captured for 128 segments
    "decode-graph": Batch((1,) * 50, (3, 1) * 25, (8, 16, 0, 64), (1.0, 0.5, 1.0, 2.0), pad_to=128),
}


# every rank with bf16 (the production dtype); the other dtypes at R=32
REAL_DTYPES = [("R16", torch.bfloat16), ("R32", torch.bfloat16), ("R64", torch.bfloat16),
               ("R32", torch.float16), ("R32", torch.float32)]


@pytest.mark.slow
@pytest.mark.parametrize("dname,dtype", REAL_DTYPES, ids=[f"{n}-{str(d)[6:]}" for n, d in REAL_DTYPES])
@pytest.mark.parametrize("bname", list(REAL_BATCHES))
@pytest.mark.parametrize("op", OPS)
def test_kernel_realistic_shapes(op, bname, dname, dtype):
    seed = _seed("real", op, bname, dname, dtype)
    args, routed = _make_call(op, REAL_BATCHES[bname], REAL_DIMS[dname], dtype, dtype, DEVICE, seed=seed)
    _check(op, args, routed, dtype, f"op={op} batch={bname} dims={dname} dtype={dtype} seed={seed}")


@pytest.mark.slow
@pytest.mark.skipif(not HAS_CUDA, reason="CUDA graphs and sync debug mode need a CUDA device")
@pytest.mark.parametrize("op", OPS)
def test_strict_false_is_graph_capturable(op):
    """strict=False with max_len given: no host sync (sync debug mode errors on one), capturable in a
    CUDA graph, and a replay on new data equals an eager call."""
    dims = REAL_DIMS["R32"]
    batch = REAL_BATCHES["decode-graph"]
    args, routed = _make_call(op, batch, dims, torch.bfloat16, torch.bfloat16, DEVICE, seed=_seed("graph", op))
    kernel = getattr(klora, f"{op}_fwd")
    static = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    kernel(*static, strict=False)  # compile outside the capture
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        kernel(*static, strict=False)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = kernel(*static, strict=False)
    fresh, _ = _make_call(op, batch, dims, torch.bfloat16, torch.bfloat16, DEVICE, seed=_seed("graph2", op))
    for s, f in zip(static, fresh):
        if isinstance(s, torch.Tensor) and s.dtype.is_floating_point:
            s.copy_(f)
    g.replay()
    eager = kernel(*[f.clone() if isinstance(f, torch.Tensor) else f for f in fresh], strict=False)
    torch.cuda.synchronize()
    if op in FRESH:
        exact = getattr(ref, f"{op}_oracle")(*fresh)
        d = exact.defined
        assert torch.equal(out[d], eager[d]), f"{op}: graph replay differs from an eager call"
    else:
        assert torch.equal(out, eager), f"{op}: graph replay differs from an eager call"


@pytest.mark.skipif(not HAS_CUDA, reason="programmatic dependent launch needs a CUDA device (sm_90 or newer)")
@pytest.mark.parametrize("path", ["tok", "seg", "tok-early"])
@pytest.mark.parametrize("op", FUSED)
def test_pdl_chained_in_place_calls(op, path, monkeypatch):
    """Note [Programmatic dependent launch]: eight calls on one base_output, each reading what the one before
    wrote, captured in a CUDA graph with PDL on, give bit for bit what eight eager calls without PDL give
    (a kernel that read base_output before its grid-dependency wait would race its predecessor), and one
    call matches the oracle.  ``tok-early``: the same under Note [Early reads] (metadata and weights, which
    no call writes, read before the wait; the eager chain has the same blocks without PDL)."""
    path, early = path.removesuffix("-early"), path.endswith("-early")
    monkeypatch.setattr(launch, "EARLY_READS", early)
    monkeypatch.setattr(launch, "FORCE_PATH", path)
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs sm_90 or newer")
    batch = REAL_BATCHES["decode-bs64" if path == "tok" else "prefill-perm"]
    seed = _seed("pdl", op, path)
    args, routed = _make_call(op, batch, REAL_DIMS["R32"], torch.bfloat16, torch.bfloat16, DEVICE, seed=seed)
    kernel = getattr(klora, f"{op}_fwd")
    base_at = OP_DB[op].inplace_arg

    def chain(with_pdl: bool, graph: bool) -> torch.Tensor:
        _with_blocks(monkeypatch, path, PDL=with_pdl)
        call = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        if not graph:
            for _ in range(8):
                kernel(*call, strict=False)
                torch.cuda.synchronize()
            return call[base_at]
        start = call[base_at].clone()
        kernel(*call, strict=False)  # compile outside the capture
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(8):
                kernel(*call, strict=False)
        call[base_at].copy_(start)
        g.replay()
        torch.cuda.synchronize()
        return call[base_at]

    assert launch._pdl_options(True, args[0].device) == launch.PDL_OPTIONS  # the graph below launches with PDL
    eager = chain(False, graph=False)
    assert torch.equal(chain(True, graph=True), eager), f"{op} path={path}: PDL graph differs; seed={seed}"
    _with_blocks(monkeypatch, path, PDL=True)
    _check(op, args, routed, torch.bfloat16, f"op={op} path={path} PDL seed={seed}")


def test_pdl_is_a_gpu_launch_option_only():
    """Note [Programmatic dependent launch]: the interpreter (CPU tensors) gets neither the kernel's PDL
    constexpr nor Triton's launch option, whatever BLOCKS ask; a request off gets none anywhere."""
    assert launch._pdl_options(True, torch.device("cpu")) == {}
    assert launch._pdl_options(False, torch.device("cpu")) == {}
    if HAS_CUDA:
        assert launch._pdl_options(False, torch.device("cuda")) == {}
    assert launch._pdl_options(True, torch.device("cpu"), early=True) == {}  # Note [Early reads]: PDL only
    if HAS_CUDA and torch.cuda.get_device_capability()[0] >= 9:
        assert launch._pdl_options(True, torch.device("cuda"), early=True) == launch.PDL_EARLY_OPTIONS
        assert launch._pdl_options(False, torch.device("cuda"), early=True) == {}
    assert launch.PDL_OPTIONS == {"PDL": True, "launch_pdl": True}
    assert launch.PDL_EARLY_OPTIONS == {"PDL": True, "launch_pdl": True, "EARLY": True}
    assert launch.BLOCKS["q_side_fused"]["tok"]["PDL"] and launch.BLOCKS["v_side_fused"]["seg"]["PDL"]


# ---- shared memory: block sizes and stages within the device's limit (kernels/lora/_smem.py) ------

# per-block opt-in shared memory of the GPUs the kernels meet (bytes; cudaDevAttrMaxSharedMemoryPerBlockOptin)
SMEM_LIMITS = {"sm90 (H100, H200)": 232448, "sm80 (A100)": 166912, "sm89 (L40, RTX 4090)": 101376}
# the ranks SPEC and SGLang allow.  kv_lora_rank (512, 1024, 1536) is only a loop length: no tile depends on
# it, so it is not a parameter of the estimate (the GPU test below runs C=1536).
SMEM_RANKS = (16, 32, 64, 128)
# (activation dtype, weight dtype): fp32 tiles are TF32-rounded in registers, mixed dtypes upcast
SMEM_DTYPES = ((torch.float16, torch.float16), (torch.bfloat16, torch.bfloat16), (torch.float32, torch.float32),
               (torch.float32, torch.bfloat16))


def test_smem_estimate_covers_the_measured_h200_crash():
    """step_a_v, fp32, R=128, BLOCKS' segment-major winners, Triton's default 3 stages: the H200 asked for
    262144 bytes (OutOfResources, limit 232448); the estimate must not be below that."""
    from kernel_oracle.kernels.lora._smem import DEFAULT_STAGES, estimate_bytes

    blocks = {k: v for k, v in launch.BLOCKS["step_a_v"]["seg"].items() if k != "num_warps"}
    est = estimate_bytes("step_a_v", blocks, block_r=128, num_stages=DEFAULT_STAGES, elem_bytes=4, transformed=True)
    assert est >= 262144 > SMEM_LIMITS["sm90 (H100, H200)"]


@pytest.mark.parametrize("limit_name", list(SMEM_LIMITS))
@pytest.mark.parametrize("op", OPS)
def test_smem_fitted_configs_stay_within_the_limit(op, limit_name):
    from kernel_oracle.kernels.lora._smem import DEFAULT_STAGES, estimate_bytes, fit_config

    limit = SMEM_LIMITS[limit_name]
    for path in ("seg", "tok"):
        default = {k: v for k, v in launch.BLOCKS[op][path].items() if k != "num_warps"}
        for R in SMEM_RANKS:
            for x_dtype, w_dtype in SMEM_DTYPES:
                elem = max(x_dtype.itemsize, w_dtype.itemsize)
                transformed = x_dtype == torch.float32 or w_dtype != x_dtype
                kw = dict(block_r=launch._block_r(R), elem_bytes=elem, transformed=transformed)
                cfg, stages = fit_config(op, default, limit=limit, **kw)
                est = estimate_bytes(op, cfg, num_stages=stages, **kw)
                where = f"{op} {path} R={R} {x_dtype}/{w_dtype} limit={limit}: {cfg} x{stages} needs {est}"
                assert est <= limit, where
                assert cfg["BT"] == default["BT"], f"{where}: BT fixes the plan's grid and must not change"
                if estimate_bytes(op, default, num_stages=DEFAULT_STAGES, **kw) <= limit:
                    assert (cfg, stages) == (default, DEFAULT_STAGES), f"{where}: the winners fit, keep them"


def test_smem_h200_keeps_the_winners_in_half_precision():
    """bf16/fp16 (production) keep BLOCKS and 3 stages at every rank on the H200; only fp32 steps down."""
    from kernel_oracle.kernels.lora._smem import DEFAULT_STAGES, fit_config

    for op in OPS:
        # the chosen blocks, and on the token-major path the wide tiles of many rows per slot (WIDE_BT)
        for path, blocks in (("seg", launch.BLOCKS[op]["seg"]), ("tok", launch.BLOCKS[op]["tok"]),
                             ("tok", launch.token_major_blocks(op, 1 << 20, 1))):
            default = {k: v for k, v in blocks.items() if k != "num_warps"}
            got = fit_config(op, default, block_r=128, elem_bytes=2, transformed=False, limit=232448)
            assert got == (default, DEFAULT_STAGES), (op, path, got)


def test_launch_steps_down_when_the_device_still_runs_out(monkeypatch):
    """An estimate that is too low costs one failed compile, never a crash: _launch catches
    OutOfResources, takes the next configuration down, and remembers the one that launched."""
    from kernel_oracle.kernels.lora._smem import estimate_bytes

    monkeypatch.setattr(launch, "smem_limit", lambda device: 232448)
    monkeypatch.setattr(launch, "_FITTED", {})
    tried = []

    def fake_launch(blocks, warps, stages):
        need = estimate_bytes("step_a_v", blocks, block_r=128, num_stages=stages, elem_bytes=4, transformed=True)
        tried.append((blocks["BLOCK_K"], stages))
        if need > 150_000:  # a device that needs more than the estimate says
            raise launch.OutOfResources(need, 150_000, "shared memory")

    x = torch.zeros(2, 2, 2, dtype=torch.float32)
    p = launch.Plan(False, 1, 1, 1, 0, 0, launch.BLOCKS["step_a_v"]["seg"])
    launch._launch("step_a_v", p, x, (x,), 128, fake_launch)
    assert tried[0] == (128, 2), "the estimate's choice first (fp32 R=128 on the H200: 2 stages)"
    assert len(tried) > 1 and tried[-1] != tried[0]
    ((key, (cfg, _, stages)),) = launch._FITTED.items()
    assert (cfg["BLOCK_K"], stages) == tried[-1]
    tried.clear()
    launch._launch("step_a_v", p, x, (x,), 128, fake_launch)
    assert len(tried) == 1, "a remembered configuration launches directly"


def test_a_remembered_configuration_that_no_longer_fits_is_fitted_again(monkeypatch):
    """A configuration remembered from one specialization (the generic kernel, say) that runs out on
    another falls back to the ladder: never OutOfResources on a valid input."""
    monkeypatch.setattr(launch, "smem_limit", lambda device: 232448)
    monkeypatch.setattr(launch, "_FITTED", {})
    x = torch.zeros(2, 2, 2, dtype=torch.float32)
    p = launch.Plan(False, 1, 1, 1, 0, 0, launch.BLOCKS["step_a_v"]["seg"])
    launch._launch("step_a_v", p, x, (x,), 128, lambda blocks, warps, stages: None, align=8)
    ((key, first),) = launch._FITTED.items()
    assert key[-1] == 8, "ALIGN is part of the key"
    tried = []

    def tighter(blocks, warps, stages):
        tried.append((dict(blocks), stages))
        if (blocks, stages) == (first[0], first[2]):
            raise launch.OutOfResources(300_000, 232_448, "shared memory")

    launch._launch("step_a_v", p, x, (x,), 128, tighter, align=8)
    assert len(tried) >= 2 and launch._FITTED[key] != first


def test_other_requested_blocks_are_fitted_on_their_own(monkeypatch):
    """The benchmark's sweeps change BLOCKS between launches: a configuration fitted for one request must
    not be launched for another (it was, and every sweep entry after the first timed the first)."""
    monkeypatch.setattr(launch, "smem_limit", lambda device: 232448)
    monkeypatch.setattr(launch, "_FITTED", {})
    x = torch.zeros(2, 2, 2, dtype=torch.bfloat16)
    launched = []
    for bk in (128, 64):
        blocks = {**launch.BLOCKS["step_a_v"]["seg"], "BLOCK_K": bk}
        p = launch.Plan(False, 1, 1, 1, 0, 0, blocks)
        launch._launch("step_a_v", p, x, (x,), 32, lambda b, w, s: launched.append(b["BLOCK_K"]), align=8)
    assert launched == [128, 64] and len(launch._FITTED) == 2


@pytest.mark.parametrize("table,path", [("DECODE_AB", "tok"), ("PREFILL_AB", "seg")])
def test_ab_tables_override_the_chosen_blocks(table, path):
    """bench_lora's A/B entries are overrides of the chosen BLOCKS on a named token-major route: {} launches
    exactly the chosen configuration, and no entry names a block the kernel does not take (a typo would
    time the chosen one) or a route that does not exist."""
    from kernel_oracle.benchmarks import bench_lora

    configs = bench_lora.ab_configs(getattr(bench_lora, table), launch.BLOCKS, path)
    for op, entries in configs.items():
        chosen = launch.BLOCKS[op][path]
        assert entries[0] == ("auto", chosen)  # the first entry: what the kernels launch by default
        for (route, overrides), (_, cfg) in zip(getattr(bench_lora, table)[op], entries):
            assert route in bench_lora.ROUTES, route
            assert set(overrides) <= set(chosen) | {"PREFETCH", "PREFETCH_ALL", "HEADS_FIRST", "num_stages",
                                                    "maxnreg", "META_FIRST", "PDL", "EARLY"}, overrides
            assert cfg == {**chosen, **overrides}
    assert bench_lora.ab_configs({"q_side_fused": [("sorted", {"BT": 16})]}, launch.BLOCKS, path) == \
        {"q_side_fused": [("sorted", {**launch.BLOCKS["q_side_fused"][path], "BT": 16})]}


@pytest.mark.parametrize("op", OPS)
def test_flat_grid_only_where_it_halves_the_programs(op, monkeypatch):
    """FLAT_SLOTS_MIN_SAVING (2): one-token segments over 4 slots take the flat grid when the slot-sorted
    one would launch at least twice its tiles, L * ceil(S/BT) >= 2 * (ceil(S/BT) + L - 1)."""
    monkeypatch.setattr(launch, "FORCE_PATH", "tok")
    assert launch.FLAT_SLOTS_MIN_SAVING == 2
    for S in (8, 64, 100, 256):
        bi = make_lora_batch_info((1,) * S, [i % 4 for i in range(S)], [16] * 4, [1.0] * 4)
        p = launch.plan(op, bi, S, 1, num_slots=4)
        bt = p.blocks["BT"]
        tiles = triton.cdiv(S, bt)
        assert (p.slot_block > 0) == (4 * tiles >= 2 * (tiles + 3)), (S, bt, p)
        assert p.row_tiles == (tiles + 3 if p.slot_block else tiles), (S, p)
    # the benchmarks' decode shapes: at bs64 (16 rows per slot) neither fused side goes flat (q 8 -> 5 tiles per
    # head, v 4 -> 4); at bs256 (64 per slot, 64-row tiles) both do (16 -> 7)
    for S, flat in ((64, False), (256, True)):
        bi = make_lora_batch_info((1,) * S, [i % 4 for i in range(S)], [16] * 4, [1.0] * 4)
        if op in ("q_side_fused", "v_side_fused"):
            assert (launch.plan(op, bi, S, 1, num_slots=4).slot_block > 0) == flat, (op, S)
    with monkeypatch.context() as m:  # 0: wherever allowed
        m.setattr(launch, "FLAT_SLOTS_MIN_SAVING", 0)
        assert launch.plan(op, make_lora_batch_info((1,) * 8, [i % 4 for i in range(8)], [16] * 4, [1.0] * 4),
                           8, 1, num_slots=4).slot_block == 8


@pytest.mark.parametrize("op", OPS)
def test_wide_tiles_only_where_a_slot_fills_them(op, monkeypatch):
    """WIDE_BT: token-major tiles as tall as WIDE_BT, with the WIDE overrides, where the batch has at least
    that many rows per slot; neither key reaches the kernel."""
    monkeypatch.setattr(launch, "FORCE_PATH", "tok")
    chosen = launch.BLOCKS[op]["tok"]
    wide = chosen.get("WIDE_BT")
    narrow = {k: v for k, v in chosen.items() if k not in ("WIDE_BT", "WIDE", "EARLY_BLOCKS")}
    for S, L in ((64, 4), (255, 4), (256, 4), (512, 4), (64, 1), (128, 8)):
        bi = make_lora_batch_info((1,) * S, [i % L for i in range(S)], [16] * L, [1.0] * L)
        p = launch.plan(op, bi, S, 1, num_slots=L)
        is_wide = bool(wide) and S >= wide * L
        assert p.blocks == ({**narrow, "BT": wide, **chosen.get("WIDE", {})} if is_wide else narrow), (op, S, L)
    assert launch.BLOCKS["q_side_fused"]["tok"]["WIDE_BT"] == 64  # the measured choice (s10d)
    # Note [Whole-row prefetch]: 32-row q tiles (decode-bs64) prefetch whole rows on one stage, 64-row ones not
    bs64 = launch.token_major_blocks("q_side_fused", 64, 4)
    bs256 = launch.token_major_blocks("q_side_fused", 256, 4)
    assert (bs64["BT"], bs64["PREFETCH_ALL"], bs64["num_stages"]) == (32, True, 1)
    assert (bs256["BT"], bs256["PREFETCH_ALL"], bs256["num_stages"]) == (64, False, launch.DEFAULT_STAGES)


def test_early_reads_blocks_and_switch():
    """Note [Early reads]: inside early_reads() the fused token-major launches take their EARLY_BLOCKS and the
    EARLY launch key (the fused q side 16-row tiles, 64 where WIDE_BT applies; the v side its own blocks), the
    split steps and the segment-major path nothing; the switch is restored after, also on an exception."""
    assert not launch.EARLY_READS  # off unless asked
    bi = make_lora_batch_info((1,) * 64, [i % 4 for i in range(64)], [16] * 4, [1.0] * 4)
    before = {op: launch.plan(op, bi, 64, 1, num_slots=4).blocks for op in OPS}
    assert all("EARLY" not in b for b in before.values())
    with pytest.raises(RuntimeError, match="inside"):
        with klora.early_reads():
            q64 = launch.token_major_blocks("q_side_fused", 64, 4)
            q256 = launch.token_major_blocks("q_side_fused", 256, 4)
            v64 = launch.token_major_blocks("v_side_fused", 64, 4)
            plans = {op: launch.plan(op, bi, 64, 1, num_slots=4) for op in OPS}
            seg = launch.plan("q_side_fused", bi, 64, 1, num_slots=4, force="seg")
            raise RuntimeError("inside")
    assert (q64["BT"], q64["EARLY"], q256["BT"], q256["EARLY"]) == (16, True, 64, True)
    assert (v64["BT"], v64["EARLY"]) == (launch.BLOCKS["v_side_fused"]["tok"]["BT"], True)
    assert "EARLY_BLOCKS" not in q64 and "EARLY" not in seg.blocks
    for op, p in plans.items():
        assert p.blocks.get("EARLY", False) == (op in FUSED), op
        if op not in FUSED:
            assert p.blocks == before[op], op
    assert plans["q_side_fused"].slot_block > 0  # 16-row tiles: the flat grid (4 tiles x 4 slots >= 2 x 7)
    assert not launch.EARLY_READS
    assert "EARLY" not in launch.kernel_blocks(q64)  # a launch key: the kernel gets it with PDL only


@pytest.mark.interpreter
@pytest.mark.parametrize("bname", ["decode", "decode-graph", "permuted"])
@pytest.mark.parametrize("op", FUSED)
def test_early_reads_match_oracle(op, bname, monkeypatch):
    """Note [Early reads]: the fused sides under early_reads() (under the interpreter its tiles; on an sm_90
    GPU also the kernels that read metadata and weights before the grid-dependency wait) match the oracle."""
    monkeypatch.setattr(launch, "FORCE_PATH", "tok")
    seed = _seed("early", op, bname)
    args, routed = _make_call(op, BATCHES[bname], SMALL_DIMS["d48"], torch.bfloat16, torch.bfloat16, DEVICE,
                              seed=seed)
    with klora.early_reads():
        _check(op, args, routed, torch.bfloat16, f"op={op} batch={bname} early reads seed={seed}")


def test_ab_routes_set_the_launch_switches_and_restore_them(monkeypatch):
    """bench_lora times flat against the per-slot grid (--decode-ab, --decode-floor) through ROUTES: each
    route's plan is the one it names, and the module's switches are restored after."""
    from kernel_oracle.benchmarks import bench_lora

    assert {"flat", "sorted"} <= {route for route, _ in bench_lora.DECODE_AB["q_side_fused"]}
    assert {"flat", "sorted"} <= {route for route, _ in bench_lora.DECODE_AB["v_side_fused"]}
    bi = make_lora_batch_info((1,) * 64, [i % 4 for i in range(64)], [16] * 4, [1.0] * 4)
    before = (launch.SLOT_SORTED, launch.FLAT_SLOTS)
    for route, flat in (("flat", True), ("sorted", False), ("logical", False)):
        with bench_lora.token_major_route(launch, route):
            p = launch.plan("v_side_fused", bi, 64, 1, num_slots=4)
            assert p.token_major and (p.slot_block > 0) == flat and launch.SLOT_SORTED == (route != "logical")
    assert (launch.SLOT_SORTED, launch.FLAT_SLOTS) == before


# the largest shapes SPEC and SGLang allow: rank 128, kv_lora_rank 1536, 128 heads
LARGEST_DIMS = Dims(H=128, qk=128, vd=128, C=1536, R=128, L=4)
LARGEST_BATCH = Batch((300, 0, 129, 64), (3, 2, 0, 1), (128, 64, 5, 128), (1.0, 0.5, 2.0, 1.5), permuted=True)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not HAS_CUDA, reason="shared-memory limits are a property of a CUDA device")
@pytest.mark.parametrize("path", ["seg", "tok"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("op", OPS)
def test_largest_shapes_launch_within_shared_memory(op, dtype, path, monkeypatch):
    """Never OutOfResources on a valid input (the H200 crash of step_a_v at R=128), right values, and the
    estimate's choice launched without stepping down (else the estimate is too low: fix _smem)."""
    from kernel_oracle.kernels.lora._smem import fit_config, smem_limit

    monkeypatch.setattr(launch, "FORCE_PATH", path)
    monkeypatch.setattr(launch, "_FITTED", {})  # what this shape needs, not what another test remembered
    seed = _seed("largest", op, dtype, path)
    args, routed = _make_call(op, LARGEST_BATCH, LARGEST_DIMS, dtype, dtype, DEVICE, seed=seed)
    _check(op, args, routed, dtype, f"op={op} largest dims dtype={dtype} path={path} seed={seed}")
    key = next(k for k in launch._FITTED
               if k[0] == op and k[1] == (path == "tok") and k[2] == dtype and k[4] == 128 and k[-1] == launch.ALIGN)
    cfg, _, stages = launch._FITTED[key]
    rows = sum(LARGEST_BATCH.seg_lens) + LARGEST_BATCH.extra_rows
    chosen = launch.token_major_blocks(op, rows, LARGEST_DIMS.L) if path == "tok" \
        else launch.BLOCKS[op][path]
    default = launch.kernel_blocks(chosen)  # as _launch does: the launch options are not blocks
    expected = fit_config(op, default, block_r=128, elem_bytes=dtype.itemsize, transformed=dtype == torch.float32,
                          limit=smem_limit(DEVICE), num_stages=chosen.get("num_stages", launch.DEFAULT_STAGES))
    assert (cfg, stages) == expected, f"{op}: the estimate chose {expected}, the device needed {(cfg, stages)}"


# ---- the precision the triton target declares per entry point (fuzz/targets/triton.py) ------------

def test_triton_target_declares_precision_per_op(monkeypatch):
    from kernel_oracle.fuzz.targets.registry import Target, TargetError
    from kernel_oracle.fuzz.targets.triton import kernels_precision

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    on_gpu = kernels_precision("cuda")
    assert {op: on_gpu[op] for op in OPS} == {op: "tf32" for op in OPS} and on_gpu["vision"] == "ieee"
    assert kernels_precision("cuda", vision="tf32")["vision"] == "tf32"
    assert set(kernels_precision("cpu").values()) == {"ieee"}
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert set(kernels_precision("cuda").values()) == {"ieee"}, "the interpreter's tl.dot is exact fp32"
    t = Target("t", {"step_a_q": print, "vision": print}, precision={"step_a_q": "tf32"})
    assert (t.precision_for("step_a_q"), t.precision_for("vision")) == ("tf32", "ieee")
    rec = t.to_record()
    assert rec["precision_by_op"] == {"step_a_q": "tf32", "vision": "ieee"}
    assert rec["precision"] == "tf32: step_a_q; ieee: vision"
    with pytest.raises(TargetError, match=r"target 't': precision\['step_a_q'\]='fp8'; the only valid values are "
                                          r"'ieee', 'tf32', 'tf32-rne', 'tf32-trunc'"):
        Target("t", {}, precision={"step_a_q": "fp8"})
    with pytest.raises(TargetError, match=r"target 't': precision names op='gemm'; the only valid ops are"):
        Target("t", {}, precision={"gemm": "tf32"})


def test_tf32_precision_gives_both_baselines():
    """expected_outcome(precision="tf32") on an fp32 LoRA case: round-to-nearest and truncated baselines;
    a single declared mode gives one."""
    from kernel_oracle.harness.check import Case, expected_outcome
    from kernel_oracle.harness.problems import LoRAProblem

    case = Case(LoRAProblem(op="step_a_v", seg_lens=(4, 3), weight_indices=(0, 1), lora_ranks=(16, 7),
                            scalings=(1.0, 0.5), dtype="float32", seed=5))
    assert len(expected_outcome(case, "cpu", precision="tf32").baseline) == 2
    assert len(expected_outcome(case, "cpu", precision="tf32-trunc").baseline) == 1
    assert len(expected_outcome(case, "cpu", precision="ieee").baseline) == 1


# ---- specialization (Note [Specialization] in kernels.lora._kernels) ------------------------------

# kernel parameters that are tensors (Triton specializes them on 16-byte alignment only)
_POINTERS = {"seg_indptr", "weight_indices", "lora_ranks", "perm", "scalings"}


@pytest.mark.parametrize("op", OPS)
def test_no_runtime_int_is_specialized(op):
    """Every integer parameter of a LoRA kernel is ``do_not_specialize`` or a constexpr: a new batch,
    size or stride never compiles a new kernel (a compilation costs about a second on the H200)."""
    from kernel_oracle.kernels.lora import _kernels as K

    import inspect

    fn = getattr(K, f"{op}_kernel")
    # the interpreter's wrapper keeps neither params nor do_not_specialize: read the decorator's tuple
    dns = set(getattr(fn, "do_not_specialize", None) or getattr(K, f"_DNS_{op.upper()}"))
    params = inspect.signature(getattr(fn, "fn", fn)).parameters.values()
    specialized = [p.name for p in params
                   if "constexpr" not in str(p.annotation) and p.name not in dns and not p.name.endswith("_ptr")
                   and p.name not in _POINTERS]
    assert specialized == [], f"{op}_kernel specializes runtime ints {specialized} (add them to do_not_specialize)"


@pytest.mark.parametrize("dims,inner,strides,align", [
    (dict(QK=128), dict(sx_d=1), dict(sx_t=2048, sx_h=128), 8),
    (dict(QK=127), dict(sx_d=1), dict(sx_t=2032, sx_h=127), 1),  # an odd size: generic variant
    (dict(QK=128), dict(sx_d=2), dict(sx_t=4096, sx_h=256), 1),  # a strided view: generic variant
    (dict(QK=128), dict(sx_d=1), dict(sx_t=2052, sx_h=128), 1),  # one unaligned stride
    (dict(C=0), dict(sa_c=1), dict(sa_l=0), 8),  # empty sizes are aligned
])
def test_layout_has_two_variants(dims, inner, strides, align):
    """``ALIGN`` is 8 or 1 and the values divide back exactly; innermost strides pass unchanged."""
    out = launch._layout(dims, inner, **strides)
    assert out["ALIGN"] == align
    for k, v in {**dims, **strides}.items():
        assert out[k] * align == v, (k, out[k], v)
    assert all(out[k] == v for k, v in inner.items())


def _no_alignment_specialization(fn) -> set:
    """The parameters a kernel never specializes on 16-byte alignment (a JITFunction or the interpreter's)."""
    names = getattr(fn, "do_not_specialize_on_alignment", None)
    return set(names if names is not None else fn.kwargs.get("do_not_specialize_on_alignment") or ())


@pytest.mark.parametrize("op", OPS)
def test_pointers_split_into_two_families(op):
    """The aligned family specializes its data pointers (all aligned when it runs), the generic twin none,
    and neither a metadata pointer: pointer alignment never multiplies the compiled variants."""
    from kernel_oracle.kernels.lora import _kernels as K

    import inspect

    fn = getattr(K, f"{op}_kernel")
    names = set(inspect.signature(getattr(fn, "fn", fn)).parameters)
    data = {n for n in names if n.endswith("_ptr")}
    metadata = names & _POINTERS
    assert data and metadata
    assert data | metadata <= _no_alignment_specialization(fn.generic)
    assert metadata <= _no_alignment_specialization(fn)
    assert not data & _no_alignment_specialization(fn)


def test_a_misaligned_pointer_runs_the_generic_family():
    """An aligned layout at a pointer 2 bytes off 16 is launched generic, and only then."""
    from kernel_oracle.kernels.lora import _kernels as K

    x = torch.zeros(256 + 8, dtype=torch.bfloat16)
    dims, inner, strides = dict(QK=128), dict(sx_d=1), dict(sx_t=128)
    lay = launch._layout(dims, inner, (x[:256],), **strides)
    assert lay["ALIGN"] == 8 and launch._family(K.step_a_q_kernel, lay) is K.step_a_q_kernel
    lay = launch._layout(dims, inner, (x[:256], x[1:257]), **strides)
    assert lay["ALIGN"] == 1 and launch._family(K.step_a_q_kernel, lay) is K.step_a_q_kernel.generic


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="compiled kernels exist only on a CUDA device (the interpreter compiles none)")
def test_new_sizes_and_batches_compile_nothing_new():
    """After one aligned and one generic call, calls with other sizes, strides and batches of the same
    dtypes, rank bucket and path compile no new kernel."""
    from kernel_oracle.benchmarks.gpu_verdicts import compiled_kernels as _compiled
    from kernel_oracle.kernels.lora import _kernels as K

    def compiled():
        return _compiled(K.step_a_v_kernel) + _compiled(K.step_a_v_kernel.generic)

    sizes = [(16, 64, 512, 2), (4, 128, 256, 3), (8, 192, 1024, 5),  # aligned
             (3, 65, 511, 1), (5, 33, 129, 7), (16, 255, 1023, 2)]   # generic (odd sizes)
    for i, (H, qk, C, n) in enumerate(sizes):
        if i in (1, 4):
            before = compiled()
        batch = Batch(tuple(17 * (j + 1) for j in range(n)), tuple(j % 2 for j in range(n)), (32, 20), (1.0, 0.5))
        dims = Dims(H=H, qk=qk, vd=qk, C=C, R=32, L=2)
        launch.FORCE_PATH = "seg"
        try:
            args, routed = _make_call("step_a_v", batch, dims, torch.bfloat16, torch.bfloat16, DEVICE, seed=i)
            _check("step_a_v", args, routed, torch.bfloat16, f"sizes={(H, qk, C, n)}")
        finally:
            launch.FORCE_PATH = None
        if i in (2, 5):
            assert compiled() == before, f"sizes {sizes[i - 1:i + 1]} compiled {compiled() - before} new kernels"
