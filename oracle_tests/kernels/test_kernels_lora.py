"""Differential tests of our Triton kv_b LoRA kernels (``kernels.lora``) against the float64 oracle.

Note [How these tests run]
--------------------------
Without a GPU the kernels run under the Triton interpreter (the conftest sets ``TRITON_INTERPRET=1``)
on small shapes whose grids stay at a few dozen programs; on a GPU the same tests run on CUDA, plus
the ``slow`` ones at realistic shapes (the OpInfo entries' exhaustive inputs).

The cases are the OpInfo entries' (``OP_DB[op].sample_inputs``, ``exhaustive_inputs``,
:data:`harness.opinfo.LORA_EDGE_CASES`), plus the few edges of our kernels' tiles and paths that table has
no row for (:data:`KERNEL_CASES`).  Each is materialized from its seed, then every value the contract says
must not matter is NaN: weight rows/columns beyond a slot's rank, step-B input columns at or beyond a row's
slot rank, and input rows that no segment routes.  Fresh step-A outputs are the kernel's own
``torch.empty`` (the poison): only the defined region is compared.  Rows that no segment routes must stay
bit-identical in in-place outputs (``torch.equal``).  Values are compared with ``reference.tolerance.compare``
against the float64 oracle, with the oracle's faithful mode in the kernel's precision as the baseline (fp32
runs tl.dot in TF32: ``faithful="tf32"``).  How the kernels launch (path, route, blocks) is chosen with
``kernel_oracle.kernels.options`` (Note [Launch options]), never by patching module state.
"""

from __future__ import annotations

import dataclasses
import zlib

import pytest
import torch

import kernel_oracle.kernels as kernels
import kernel_oracle.kernels.lora as klora
import kernel_oracle.kernels.lora._launch as launch
from kernel_oracle.harness.mutations import Mutation
from kernel_oracle.harness.opinfo import FAMILY_OPS, OP_DB
from kernel_oracle.harness.problems import Call, batch_info_of, materialize
from kernel_oracle.harness.problem_lora import LoRAProblem
from kernel_oracle.kernels.interpreter import interpreting
from kernel_oracle.kernels.options import LaunchOptions, current_options, options
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
NAN = float("nan")


def test_kernels_package_is_ours():
    """PyPI has an unrelated ``kernels`` package: make sure we test the checkout's."""
    assert "kernel_oracle" not in kernels.__file__ and kernels.__file__.endswith("kernels/__init__.py"), (
        f"import kernels resolved to {kernels.__file__}, not this checkout's kernels/ package")


# Edges of our kernels that LORA_EDGE_CASES has no row for (name, LoRAProblem fields, num_segments or None).
# Default dims: H=2, qk=48, vd=40, C=64, R=16.
KERNEL_CASES = {
    # a rank above the buffer's R (64: clamped to 16), one below it, one off
    "rank_above_R": (dict(seg_lens=(7, 3, 5), weight_indices=(0, 1, 2), lora_ranks=(64, 5, 0),
                          scalings=(0.5, 2.0, 1.0)), None),
    # zero-length segments first, between and last, plus unrouted tail rows
    "empty_segments": (dict(seg_lens=(0, 4, 0, 6, 0), weight_indices=(1, 0, 2, 1, 0), lora_ranks=(9, 3, 16),
                            scalings=(1.5, -0.5, 0.25), extra_rows=3), None),
    # one segment longer than a segment-major tile (64 rows), a short one after it
    "long_segment": (dict(seg_lens=(70, 2), weight_indices=(1, 0), lora_ranks=(5, 16), scalings=(0.5, 1.0)), None),
    # every slot off: nothing may change
    "all_off": (dict(seg_lens=(4, 3), weight_indices=(0, 1), lora_ranks=(0, 0), scalings=(1.0, 1.0), extra_rows=1),
                None),
    # num_segments=0 and bs=3: upstream processes bs segments
    "bs_only": (dict(seg_lens=(3, 2, 4), weight_indices=(0, 2, 1), lora_ranks=(16, 1, 6), scalings=(1.0, 0.5, 2.0)),
                0),
    # decode replayed in a CUDA graph captured for 32 segments, rows permuted
    "decode_graph": (dict(seg_lens=(1,) * 9, weight_indices=(2, 0, 1) * 3, lora_ranks=(16, 4, 8),
                          scalings=(1.0, 0.5, 1.5), cuda_graph_pad_to=32, permute=True), None),
}
# fp32 cases run at head dims that are no multiple of the block sizes and a buffer rank that is no power of two
# (the samples that set their own dims keep them)
FP32_DIMS = dict(H=3, qk=72, vd=24, C=80, R=24)
_DTYPE_NAME = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}


def _seed(*parts) -> int:
    return zlib.crc32("|".join(map(str, parts)).encode())


def _kernel_case(op: str, name: str, dtype: torch.dtype, **changes) -> tuple[LoRAProblem, int | None]:
    fields, num_segments = KERNEL_CASES[name]
    return LoRAProblem(op=op, dtype=_DTYPE_NAME[dtype], seed=_seed(op, name), **{**fields, **changes}), num_segments


def _cases(op: str, dtype: torch.dtype):
    """(name, problem, num_segments) of every OpInfo sample of ``op`` in ``dtype``, and of every KERNEL_CASES row
    in bf16 and fp32 (the tiles' edges do not depend on which half-precision type fills them)."""
    for sample in OP_DB[op].sample_inputs(DEVICE, dtype):
        yield sample.name, sample.problem, None
    for name in KERNEL_CASES if dtype != torch.float16 else ():
        yield (name, *_kernel_case(op, name, dtype))


def _poisoned(problem: LoRAProblem, num_segments=None, strided_weights: bool = False):
    """The positional arguments of ``problem`` with NaN wherever the contract says values don't matter, and the
    routed-rows mask (S,).  ``strided_weights``: B_buf and A_buf as non-contiguous views of the same values."""
    p = problem
    if _DTYPE_NAME.get(torch.float32) == p.dtype and (p.qk, p.vd, p.C, p.R) == (48, 40, 64, 16):
        p = dataclasses.replace(p, **FP32_DIMS)
    call = materialize(p, DEVICE)
    bi = batch_info_of(call)
    if num_segments is not None:
        bi.num_segments = num_segments
    route = route_lora_batch(bi, num_rows=p.S, num_slots=p.L, max_rank=p.R, device=bi.seg_indptr.device,
                             strict=True)
    routed = torch.zeros(p.S, dtype=torch.bool)
    routed[route.rows.cpu()] = True
    ranks = [max(min(p.R, int(r)), 0) for r in bi.lora_ranks.tolist()]
    sig = call.signature
    with torch.no_grad():
        for name in ("B_buf", "A_buf"):
            if name not in sig.params:
                continue
            buf = call.arg(name)
            for w, r in enumerate(ranks):
                if name == "B_buf":
                    buf[w, :, r:] = NAN
                else:
                    buf[w, r:, :] = NAN
            if strided_weights:
                buf = (torch.cat([buf, buf[..., :3]], dim=-1)[..., :p.R] if name == "B_buf"
                       else buf.transpose(1, 2).contiguous().transpose(1, 2))
                assert not buf.is_contiguous()
                call.set_arg(name, buf)
        x = call.arg(sig.params[0])
        x[~routed.to(x.device)] = NAN  # unrouted rows must not be read into anything defined
        if sig.params[0] in ("q_lora_a", "attn_lora_a"):  # step-B columns at or beyond the row's slot rank
            row_rank = torch.full((p.S,), p.R, dtype=torch.int64)
            row_rank[route.rows.cpu()] = torch.tensor([ranks[int(w)] for w in route.slot], dtype=torch.int64)
            beyond = torch.arange(p.R)[None, :] >= row_rank[:, None]
            x.masked_fill_(beyond[:, None, :].to(x.device), NAN)
    return call.args, routed


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


def _params():
    for op in OPS:
        for dtype in (torch.bfloat16, torch.float32, torch.float16):
            for name, problem, num_segments in _cases(op, dtype):
                yield pytest.param(op, problem, num_segments, id=f"{op}-{name}-{str(dtype)[6:]}")


@pytest.mark.interpreter
@pytest.mark.parametrize("route", ["seg", "tok"])  # "auto" runs in test_kernel_dtypes_and_strides
@pytest.mark.parametrize("op,problem,num_segments", list(_params()))
def test_kernel_matches_oracle(op, problem, num_segments, route):
    args, routed = _poisoned(problem, num_segments)
    with options(lora={"route": route}):
        _check(op, args, routed, args[0].dtype, f"{problem} num_segments={num_segments} route={route}")


# activation dtype x base_output dtype, strided layouts of every data tensor
LAYOUT_CASES = [
    (torch.bfloat16, torch.float32, False),
    (torch.float32, torch.bfloat16, False),
    (torch.float16, torch.float32, True),
    (torch.bfloat16, torch.bfloat16, True),
]


@pytest.mark.interpreter
@pytest.mark.parametrize("name", ["rank_above_R", "decode_graph"])
@pytest.mark.parametrize("dtype,base_dtype,strided", LAYOUT_CASES,
                         ids=[f"{str(a)[6:]}-base_{str(b)[6:]}-{'strided' if s else 'contig'}"
                              for a, b, s in LAYOUT_CASES])
@pytest.mark.parametrize("op", OPS)
def test_kernel_dtypes_and_strides(op, dtype, base_dtype, strided, name):
    problem, _ = _kernel_case(op, name, dtype, strided=strided, base_dtype=_DTYPE_NAME[base_dtype],
                              **FP32_DIMS)
    args, routed = _poisoned(problem, strided_weights=strided)
    _check(op, args, routed, dtype, f"{problem} strided weights={strided}")


def _entries(path: str, ops=OPS, **changes) -> dict:
    """``LoRAOptions.blocks`` (``{op: {path: entry}}``): the default entries of ``ops`` with ``changes`` applied
    where an op takes the key (the fused switches: the fused kernels; PREFETCH_ALL: the fused q side)."""
    out = {}
    for op in ops:
        entry = dict(klora.BLOCKS[op][path])
        for key, value in changes.items():
            if key in entry or (op in FUSED and key in ("PREFETCH", "HEADS_FIRST", "META_FIRST", "PDL")) \
                    or (op == "q_side_fused" and key == "PREFETCH_ALL"):
                entry[key] = value
        out[op] = {path: entry}
    return out


def _planned(op: str, args) -> launch.Plan:
    """The plan an entry point makes for ``args`` under the options in force (the kernels' launch of it:
    test_entry_points_launch_the_options_plan)."""
    bi = batch_info_of(_as_call(op, args))
    weights = args[1]
    return launch.plan(op, bi, args[0].shape[0], ref.validate_call(op, *args, strict=False), num_slots=weights.shape[0])


# The token-major routes (logical rows; each slot's rows in segment order, Note [Slot-sorted tiles], on its
# per-slot grid or on the flat grid, Note [Flat slot grid]) are options a benchmark sweeps, so each is checked
# against the oracle; tiles of 4 rows make every slot span several tiles, and tiles mix slots
ROUTES = {"logical-rows": dict(slot_sorted=False, flat_slots=False),
          "slot-sorted": dict(slot_sorted=True, flat_slots=False),
          "flat": dict(slot_sorted=True, flat_slots=True, flat_slots_min_saving=0)}
ROUTE_SAMPLES = ("decode_one_token_segments", "permuted_extra_rows")  # of LORA_EDGE_CASES


def _route_options(route: str, **changes) -> dict:
    return {"route": "tok", **ROUTES[route], "blocks": _entries("tok", BT=4, **changes)}


def _sample(op: str, name: str, dtype=torch.bfloat16) -> LoRAProblem:
    return next(s.problem for s in OP_DB[op].sample_inputs(DEVICE, dtype) if s.name == name)


@pytest.mark.interpreter
@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("name", ROUTE_SAMPLES + ("decode_graph", "empty_segments"))
@pytest.mark.parametrize("op", OPS)
def test_token_major_routes_match_oracle(op, name, route):
    problem = _sample(op, name) if name in ROUTE_SAMPLES else _kernel_case(op, name, torch.bfloat16)[0]
    args, routed = _poisoned(problem)
    with options(lora=_route_options(route)):
        p = _planned(op, args)
        _check(op, args, routed, torch.bfloat16, f"{problem} route={route}")
    assert p.token_major and p.blocks["BT"] == 4 and (p.slot_block > 0) == (route == "flat"), p
    assert p.sorted_rows == (route != "logical-rows"), p


# Flat grid (Note [Flat slot grid]) batches, with 4-row tiles: slots interleaved, a slot with no rows, a
# rank-0 slot, slots of several tiles, slot counts that are no power of two, and more slots than NSLOT's
# smallest bucket (11 slots: NSLOT 16).  LoRAProblem fields
FLAT_BATCHES = {
    # slot 4: 14 rows (4 tiles), 0: 5 (2), 2: 3 (1), 1 (rank 0): 2; slot 3 (rank 12) has none
    "five-slots": dict(seg_lens=(1, 3, 1, 1, 6, 1, 2, 1, 1, 5, 1, 1), weight_indices=(4, 0, 2, 1, 4, 0, 4, 2, 1, 4, 0, 2),
                       lora_ranks=(16, 0, 7, 12, 16), scalings=(0.5, 1.0, -2.0, 1.5, 0.75)),
    # one-token segments over 11 slots, slot 10 unused, slot 5 off, permuted rows
    "eleven-slots": dict(seg_lens=(1,) * 23, weight_indices=tuple(i * 7 % 10 for i in range(23)),
                         lora_ranks=(16, 3, 9, 16, 1, 0, 12, 5, 16, 8, 4),
                         scalings=(1.0, 0.5, 2.0, -1.0, 1.5, 1.0, 0.25, 1.0, 0.5, 2.0, 1.0), permute=True),
    # graph replay: padded segments of zero length, 3 slots, and a long segment of slot 1
    "three-slots-graph": dict(seg_lens=(1, 9, 1, 1), weight_indices=(2, 1, 0, 2), lora_ranks=(16, 5, 11),
                              scalings=(1.0, 0.5, 1.5), cuda_graph_pad_to=8),
}


def _flat_problem(op: str, name: str) -> LoRAProblem:
    return LoRAProblem(op=op, dtype="bfloat16", seed=_seed(op, name, "flat"), **FLAT_BATCHES[name])


@pytest.mark.interpreter
@pytest.mark.parametrize("name", list(FLAT_BATCHES))
@pytest.mark.parametrize("op", OPS)
def test_flat_grid_matches_oracle(op, name):
    problem = _flat_problem(op, name)
    args, routed = _poisoned(problem)
    with options(lora=_route_options("flat")):
        p = _planned(op, args)
        _check(op, args, routed, torch.bfloat16, f"{problem} flat")
    assert p.slot_block == launch.slot_block(problem.L) > 0, p


# Note [Slot metadata first]: the fused kernels' option of loading the slot's rank and scaling (on the flat
# grid every slot's) before the route, on each route and on the flat batches (11 slots: NSLOT 16; a rank-0
# slot; a slot with no rows; graph padding)
META_FIRST_CASES = [(route, name) for route in ROUTES for name in ("decode_graph", "permuted_extra_rows")] + \
    [("flat", name) for name in FLAT_BATCHES]


@pytest.mark.interpreter
@pytest.mark.parametrize("route,name", META_FIRST_CASES, ids=[f"{r}-{b}" for r, b in META_FIRST_CASES])
@pytest.mark.parametrize("op", FUSED)
def test_fused_slot_metadata_first_matches_oracle(op, route, name):
    problem = (_flat_problem(op, name) if name in FLAT_BATCHES else _sample(op, name) if name in ROUTE_SAMPLES
               else _kernel_case(op, name, torch.bfloat16)[0])
    args, routed = _poisoned(problem)
    with options(lora=_route_options(route, META_FIRST=True)):
        p = _planned(op, args)
        _check(op, args, routed, torch.bfloat16, f"{problem} route={route} META_FIRST")
    assert p.blocks.get("META_FIRST") and p.token_major, p


@pytest.mark.interpreter
@pytest.mark.parametrize("op,route,meta_first", [(op, route, False) for op in OPS for route in ("slot-sorted", "flat")]
                         + [(op, route, True) for op in FUSED for route in ("slot-sorted", "flat")])
def test_token_major_out_of_range_slots_with_strict_false(op, route, meta_first):
    """strict=False, weight indices past the slots and negative: no fault (nothing read or written out of
    bounds), the defined rows match the oracle, and the broken segments' rows, which no program serves,
    stay as they were (in-place ops), like every row no segment routes.  META_FIRST (fused kernels): the
    slots' ranks and scalings loaded before the route read none past the L slots either."""
    problem = LoRAProblem(op=op, seg_lens=(1, 2, 1, 5, 1, 1, 3, 1), weight_indices=(0, 2, 1, 0, 2, 2, 1, 0),
                          lora_ranks=(16, 7, 11), scalings=(0.5, 2.0, -1.0), dtype="bfloat16",
                          seed=_seed(op, route, "bad-slots"))
    args, routed = _poisoned(problem)
    bi = batch_info_of(_as_call(op, args))
    bi.weight_indices[3] = problem.L + 4  # segment 3: rows 4..8 (a slot below NSLOT, 8: only n_slots excludes it)
    bi.weight_indices[6] = -1  # segment 6: rows 11..13
    # ranks and scalings as views of longer buffers, on and finite past the L slots: a program that took a
    # bad index for a slot would read them and write the broken rows
    bi.lora_ranks = torch.cat([bi.lora_ranks, torch.full_like(bi.lora_ranks, problem.R).repeat(4)])[:problem.L]
    bi.scalings = torch.cat([bi.scalings, torch.ones_like(bi.scalings).repeat(4)])[:problem.L]
    broken = torch.zeros_like(routed)
    broken[4:9] = broken[11:14] = True
    oracle = getattr(ref, f"{op}_oracle")
    exact = oracle(*args, strict=False)
    assert not exact.defined[broken.to(exact.defined.device)].any()
    kernel = getattr(klora, f"{op}_fwd")
    repro = f"{problem} route={route} bad slots"
    with options(lora=_route_options(route, **({"META_FIRST": True} if meta_first else {}))):
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


def _decode(S: int, L: int, R: int = 16):
    return make_lora_batch_info((1,) * S, [i % L for i in range(S)], [R] * L, [1.0] * L)


PREFETCH_SAMPLES = ("decode_one_token_segments", "ragged_mixed_ranks")  # of LORA_EDGE_CASES, and long_segment


def _prefetch_problem(op: str, name: str) -> LoRAProblem:
    problem = _sample(op, name) if name in PREFETCH_SAMPLES else _kernel_case(op, name, torch.float16)[0]
    return dataclasses.replace(problem, dtype="float16", base_dtype="float32", **FP32_DIMS)


@pytest.mark.interpreter
@pytest.mark.parametrize("heads_first", [False, True])
@pytest.mark.parametrize("path", ["seg", "tok"])
@pytest.mark.parametrize("name", PREFETCH_SAMPLES + ("long_segment",))
@pytest.mark.parametrize("op", FUSED)
def test_fused_prefetch_matches_oracle(op, name, path, heads_first):
    """PREFETCH, in the grid's own order and with programs renumbered heads first (HEADS_FIRST): A/B options.
    Inner blocks of 16 columns: several base blocks per program, so the prefetch chain is exercised."""
    problem = _prefetch_problem(op, name)
    args, routed = _poisoned(problem)
    inner = {"BLOCK_C": 16} if op == "q_side_fused" else {"BLOCK_V": 16}
    with options(lora={"route": path, "blocks": _entries(path, (op,), PREFETCH=True, HEADS_FIRST=heads_first,
                                                                 **inner)}):
        _check(op, args, routed, torch.float16, f"{problem} path={path} heads_first={heads_first} prefetch")


@pytest.mark.interpreter
@pytest.mark.parametrize("path", ["seg", "tok"])
@pytest.mark.parametrize("name", PREFETCH_SAMPLES + ("long_segment",))
def test_fused_q_whole_row_prefetch_matches_oracle(name, path):
    """PREFETCH_ALL (Note [Whole-row prefetch]): the first four base and A blocks loaded before step A.  Blocks
    of 16 columns over kv_lora_rank 80: four prefetched blocks and one more in the plain loop after them, so
    both halves and the hand-off between them are checked."""
    problem = _prefetch_problem("q_side_fused", name)
    args, routed = _poisoned(problem)
    blocks = _entries(path, ("q_side_fused",), PREFETCH=False, PREFETCH_ALL=True, BLOCK_C=16)
    with options(lora={"route": path, "blocks": blocks}):
        _check("q_side_fused", args, routed, torch.float16, f"{problem} path={path} PREFETCH_ALL")


@pytest.mark.interpreter
@pytest.mark.skipif(HAS_CUDA, reason="on a GPU the fp32 realistic-shape tests check TF32 on the real tensor cores")
@pytest.mark.parametrize("op", OPS)
def test_fp32_tf32_operands_match_tf32_baseline(op):
    """The interpreter's fp32 dot is exact: LoRAOptions(fp32_dot="tf32") there checks that our operand rounding
    (RNE to TF32, because the tensor cores truncate) is exactly the oracle's faithful="tf32" model."""
    problem, _ = _kernel_case(op, "rank_above_R", torch.float32, **FP32_DIMS)
    args, _ = _poisoned(problem)
    with options(lora={"fp32_dot": "tf32"}):
        out = getattr(klora, f"{op}_fwd")(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    tf32 = getattr(ref, f"{op}_oracle")(*args, faithful="tf32")
    d = tf32.defined
    # same rounding points, fp32 summation order only: far below one TF32 ulp of the outputs
    err = float((out.double() - tf32.value.double()).abs()[d].max())
    scale = float(tf32.value.double().abs()[d].max())
    assert err <= 1e-5 * scale, f"{op}: TF32-emulated kernel differs from faithful='tf32' by {err:.3g} (scale {scale:.3g})"


class _Launches:
    """Stands in for every LoRA kernel (both families): a launch records its constexprs and runs nothing."""

    def __init__(self):
        self.seen: list[dict] = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.seen.append(dict(kwargs, grid=grid))

    @property
    def generic(self):
        return self


def _expected_dot(dtype: torch.dtype, fp32_dot) -> object:
    """The ``DOT_PREC`` a launch must get: under the interpreter every tile is upcast to fp32, exact unless
    ``fp32_dot="tf32"``; compiled, fp32 tiles run TF32 (as upstream's ``tl.dot``) and fp16/bf16 tiles take no
    setting (None)."""
    if interpreting():
        return "tf32" if fp32_dot == "tf32" else "ieee"
    return "tf32" if dtype == torch.float32 else None


def test_entry_points_launch_the_options_plan(monkeypatch):
    """Every entry point reads the options in force and launches their plan: the path, the route's
    constexprs, the blocks, the fp32 dot; outside the block the defaults again."""
    launches = _Launches()
    for op in OPS:
        monkeypatch.setattr(launch.K, f"{op}_kernel", launches)
    for op in OPS:
        for dtype in (torch.bfloat16, torch.float32):
            args, _ = _poisoned(_sample(op, "decode_one_token_segments", dtype))
            for lora in [dict(route="seg"), *(_route_options(r) for r in ROUTES), dict(fp32_dot="tf32")]:
                launches.seen.clear()
                with options(lora=lora):
                    p = _planned(op, args)
                    getattr(klora, f"{op}_fwd")(*args)
                (got,) = launches.seen
                assert (got["TOKEN_MAJOR"], got["SORTED"], got["FLAT"], got["BT"]) == \
                    (p.token_major, p.sorted_rows, p.slot_block > 0, p.blocks["BT"]), (op, lora, got)
                assert p.token_major == (lora.get("route") != "seg"), (op, lora)  # decode: token-major by default
                assert got["DOT_PREC"] == _expected_dot(dtype, lora.get("fp32_dot")), (op, lora, got)
    assert current_options() == LaunchOptions()




@pytest.mark.interpreter
@pytest.mark.parametrize("name", ["decode_one_token_segments", "decode_graph", "permuted_extra_rows"])
@pytest.mark.parametrize("op", FUSED)
def test_early_reads_match_oracle(op, name):
    """Note [Early reads]: the fused sides under early reads (under the interpreter its tiles; on an sm_90
    GPU also the kernels that read metadata and weights before the grid-dependency wait) match the oracle."""
    problem = _sample(op, name) if name in ROUTE_SAMPLES else _kernel_case(op, name, torch.bfloat16)[0]
    args, routed = _poisoned(problem)
    with options(lora={"route": "tok", "early_reads": True}):
        _check(op, args, routed, torch.bfloat16, f"{problem} early reads")


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
    args, _ = _poisoned(_kernel_case(op, "rank_above_R", torch.float32)[0])
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
    args, _ = _poisoned(LoRAProblem(op=op, seg_lens=(7, 3, 5), weight_indices=(0, 1, 2), lora_ranks=(16, 5, 0),
                                    scalings=(0.5, 2.0, 1.0), permute=True, seed=_seed("strict", op)))
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

# the OpInfo entries' exhaustive inputs, plus what they lack: decode in a graph captured for 128 segments
# (rank 0 and rank above R among the slots) and a rank-16 buffer
REAL = dict(H=64, qk=128, vd=128, C=512)
REAL_GRAPH = dict(seg_lens=(1,) * 50, weight_indices=(3, 1) * 25, lora_ranks=(8, 16, 0, 64), scalings=(1.0, 0.5, 1.0, 2.0),
                  cuda_graph_pad_to=128, R=32, **REAL)
REAL_R16 = dict(seg_lens=(700, 0, 333, 1024), weight_indices=(3, 2, 0, 1), lora_ranks=(32, 64, 5, 17),
                scalings=(1.0, 0.5, 2.0, 1.5), permute=True, R=16, **REAL)


def _real_cases():
    for op in OPS:
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            for s in OP_DB[op].exhaustive_inputs(DEVICE, dtype):
                yield pytest.param(s.problem, id=f"{op}-{s.name}-{str(dtype)[6:]}")
            for name, fields in (("graph", REAL_GRAPH), ("r16", REAL_R16)):
                yield pytest.param(LoRAProblem(op=op, dtype=_DTYPE_NAME[dtype], seed=_seed("real", op, name), **fields),
                                   id=f"{op}-{name}-{str(dtype)[6:]}")


@pytest.mark.slow
@pytest.mark.parametrize("problem", list(_real_cases()))
def test_kernel_realistic_shapes(problem):
    args, routed = _poisoned(problem)
    _check(problem.op, args, routed, args[0].dtype, f"{problem}")


@pytest.mark.slow
@pytest.mark.skipif(not HAS_CUDA, reason="CUDA graphs and sync debug mode need a CUDA device")
@pytest.mark.parametrize("op", OPS)
def test_strict_false_is_graph_capturable(op):
    """strict=False with max_len given: no host sync (sync debug mode errors on one), capturable in a
    CUDA graph, and a replay on new data equals an eager call."""
    problem = LoRAProblem(op=op, dtype="bfloat16", seed=_seed("graph", op), **REAL_GRAPH)
    args, routed = _poisoned(problem)
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
    fresh, _ = _poisoned(dataclasses.replace(problem, seed=_seed("graph2", op)))
    for s, f in zip(static, fresh):
        if isinstance(s, torch.Tensor) and s.dtype.is_floating_point:
            s.copy_(f)
    g.replay()
    eager = kernel(*[f.clone() if isinstance(f, torch.Tensor) else f for f in fresh], strict=False)
    torch.cuda.synchronize()
    if op in FRESH:
        d = getattr(ref, f"{op}_oracle")(*fresh).defined
        assert torch.equal(out[d], eager[d]), f"{op}: graph replay differs from an eager call"
    else:
        assert torch.equal(out, eager), f"{op}: graph replay differs from an eager call"


@pytest.mark.skipif(not HAS_CUDA, reason="programmatic dependent launch needs a CUDA device (sm_90 or newer)")
@pytest.mark.parametrize("path", ["tok", "seg", "tok-early"])
@pytest.mark.parametrize("op", FUSED)
def test_pdl_chained_in_place_calls(op, path):
    """Note [Programmatic dependent launch]: eight calls on one base_output, each reading what the one before
    wrote, captured in a CUDA graph with PDL on, give bit for bit what eight eager calls without PDL give
    (a kernel that read base_output before its grid-dependency wait would race its predecessor), and one
    call matches the oracle.  ``tok-early``: the same under Note [Early reads] (metadata and weights, which
    no call writes, read before the wait; the eager chain has the same blocks without PDL)."""
    path, early = path.removesuffix("-early"), path.endswith("-early")
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs sm_90 or newer")
    decode = dict(seg_lens=(1,) * 64, weight_indices=(0, 1, 2, 3) * 16, lora_ranks=(64, 9, 0, 32),
                  scalings=(0.5, 1.0, 2.0, 0.25), R=32, **REAL)
    problem = LoRAProblem(op=op, dtype="bfloat16", seed=_seed("pdl", op, path),
                          **(decode if path == "tok" else REAL_R16 | dict(R=32)))
    args, routed = _poisoned(problem)
    kernel = getattr(klora, f"{op}_fwd")
    base_at = OP_DB[op].inplace_arg

    def lora(with_pdl: bool) -> dict:
        return {"route": path, "early_reads": early, "blocks": _entries(path, (op,), PDL=with_pdl)}

    def chain(with_pdl: bool, graph: bool) -> torch.Tensor:
        call = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        with options(lora=lora(with_pdl)):
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
    assert torch.equal(chain(True, graph=True), eager), f"{op} path={path}: PDL graph differs; {problem}"
    with options(lora=lora(True)):
        _check(op, args, routed, torch.bfloat16, f"{problem} path={path} PDL")


# the largest shapes SPEC and SGLang allow: rank 128, kv_lora_rank 1536, 128 heads
LARGEST = dict(seg_lens=(300, 0, 129, 64), weight_indices=(3, 2, 0, 1), lora_ranks=(128, 64, 5, 128),
               scalings=(1.0, 0.5, 2.0, 1.5), permute=True, H=128, qk=128, vd=128, C=1536, R=128)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not HAS_CUDA, reason="shared-memory limits are a property of a CUDA device")
@pytest.mark.parametrize("path", ["seg", "tok"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("op", OPS)
def test_largest_shapes_launch_within_shared_memory(op, dtype, path):
    """Never OutOfResources on a valid input (the H200 crash of step_a_v at R=128), right values, and the
    estimate's choice launched without stepping down (else the estimate is too low: fix _smem)."""
    from kernel_oracle.kernels.lora._smem import fit_config, smem_limit

    launch.forget_fitted()  # what this shape needs, not what another test remembered
    problem = LoRAProblem(op=op, dtype=_DTYPE_NAME[dtype], seed=_seed("largest", op, dtype, path), **LARGEST)
    args, routed = _poisoned(problem)
    with options(lora={"route": path}):
        _check(op, args, routed, dtype, f"{problem} path={path}")
    fitted = launch.fitted()
    key = next(k for k in fitted
               if k[0] == op and k[1] == (path == "tok") and k[2] == dtype and k[4] == 128 and k[-1] == launch.ALIGN)
    cfg, _, stages = fitted[key]
    chosen = launch.token_major_blocks(op, problem.S, problem.L) if path == "tok" else klora.BLOCKS[op][path]
    default = launch.kernel_blocks(chosen)  # as _launch does: the launch options are not blocks
    expected = fit_config(op, default, block_r=128, elem_bytes=dtype.itemsize, transformed=dtype == torch.float32,
                          limit=smem_limit(DEVICE), num_stages=chosen.get("num_stages", launch.DEFAULT_STAGES))
    assert (cfg, stages) == expected, f"{op}: the estimate chose {expected}, the device needed {(cfg, stages)}"


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
        problem = LoRAProblem(op="step_a_v", seg_lens=tuple(17 * (j + 1) for j in range(n)),
                              weight_indices=tuple(j % 2 for j in range(n)), lora_ranks=(32, 20), scalings=(1.0, 0.5),
                              H=H, qk=qk, vd=qk, C=C, R=32, dtype="bfloat16", seed=i)
        args, routed = _poisoned(problem)
        with options(lora={"route": "seg"}):
            _check("step_a_v", args, routed, torch.bfloat16, f"sizes={(H, qk, C, n)}")
        if i in (2, 5):
            assert compiled() == before, f"sizes {sizes[i - 1:i + 1]} compiled {compiled() - before} new kernels"
