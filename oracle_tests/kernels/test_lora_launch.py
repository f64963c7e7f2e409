"""Host side of our kv_b LoRA kernels (``kernels.lora``): the launch options, the path and grid a call plans,
the block sizes that fit shared memory, the compiled variants, and the benchmark's option tables.

Nothing here runs a kernel (``test_kernels_lora.py`` compares the kernels with the oracle); every choice is
passed as :class:`~kernel_oracle.kernels.options.LoRAOptions` (Note [Launch options]), never patched.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import triton

import kernel_oracle.kernels.lora as klora
import kernel_oracle.kernels.lora._launch as launch
from kernel_oracle.harness.opinfo import FAMILY_OPS
from kernel_oracle.kernels.options import LaunchOptions, LoRAOptions, OptionsError, current_options, options
from kernel_oracle.reference.batch_info import make_lora_batch_info

from oracle_tests.conftest import HAS_CUDA

OPS = FAMILY_OPS["lora"]
FUSED = ("q_side_fused", "v_side_fused")


def _decode(S: int, L: int, R: int = 16):
    """One-token segments over ``L`` slots in turn (a decode batch of ``S`` rows)."""
    return make_lora_batch_info((1,) * S, [i % L for i in range(S)], [R] * L, [1.0] * L)


@pytest.mark.parametrize("op", OPS)
def test_flat_grid_is_the_bound_and_falls_back_above_the_slot_cap(op):
    """Host side of Note [Flat slot grid]: ceil(S/BT) + L - 1 tiles and no slot axis up to FLAT_SLOTS_MAX
    slots (a bound of sum_w ceil(n_w/BT), reached when every slot's rows overflow a tile by one row);
    the slot-sorted grid above it, with flat_slots off, without slot-sorted tiles, or beyond the compare
    tile (binary search)."""
    anywhere = LoRAOptions(route="tok", flat_slots_min_saving=0)  # the bound wherever allowed (the rule: below)
    bt = klora.BLOCKS[op]["tok"]["BT"]
    for L in (1, 3, 4, 8, 9, 31, 32, 33, 64):
        # one segment of bt + 1 rows per slot: 2 tiles each, 2L (slot, tile) pairs in all
        bi = make_lora_batch_info((bt + 1,) * L, list(range(L)), [16] * L, [1.0] * L)
        S = L * (bt + 1)
        p = launch.plan(op, bi, S, bt + 1, num_slots=L, options=anywhere)
        assert p.token_major and p.seg_tile > 0, p
        if L <= launch.FLAT_SLOTS_MAX:
            assert p.slot_block == max(8, triton.next_power_of_2(L)), (L, p)
            assert p.row_tiles == triton.cdiv(S, bt) + L - 1 >= 2 * L and launch._axis2(p, L, 3) == 3, (L, p)
            assert p.row_tiles == 2 * L or L > bt, (L, p)  # the bound is reached
        else:
            assert p.slot_block == 0 and p.row_tiles == triton.cdiv(S, bt), (L, p)
            assert launch._axis2(p, L, 3) == 3 * L
    bi = _decode(64, 4)
    assert launch.plan(op, bi, 64, 1, num_slots=0, options=anywhere).slot_block == 0  # no slots: nothing flat
    for off in (dict(flat_slots=False), dict(slot_sorted=False)):
        p = launch.plan(op, bi, 64, 1, num_slots=4, options=dataclasses.replace(anywhere, **off))
        assert p.slot_block == 0 and p.row_tiles == triton.cdiv(64, bt) and launch._axis2(p, 4, 1) == 4
        assert p.sorted_rows == off.get("slot_sorted", True)
    many = make_lora_batch_info((1,) * 300, [i % 4 for i in range(300)], [16] * 4, [1.0] * 4)
    p = launch.plan(op, many, 300, 1, num_slots=4, options=anywhere)
    assert p.slot_block == 0 and not p.sorted_rows  # binary search: no compare tile


def test_flat_grid_bound_holds_for_random_batches():
    """sum_w ceil(n_w/BT) <= ceil(S/BT) + L - 1 for any split of S rows over L slots (the flat grid's bound)."""
    gen = torch.Generator().manual_seed(7)
    for _ in range(2000):
        L = int(torch.randint(1, 33, (1,), generator=gen))
        bt = int(2 ** torch.randint(0, 7, (1,), generator=gen))
        n = torch.randint(0, 200, (L,), generator=gen)
        S = int(n.sum()) + int(torch.randint(0, 3, (1,), generator=gen))  # unrouted rows too
        assert sum(triton.cdiv(int(x), bt) for x in n) <= triton.cdiv(S, bt) + L - 1, (L, bt, n.tolist(), S)




# ---- launch options (kernels.options.LoRAOptions) ----------------------------------------------------------

@pytest.mark.parametrize("fields,message", [
    (dict(route="fast"), "LoRAOptions: route='fast' is invalid; the only valid values are 'auto', 'seg', 'tok'"),
    (dict(early_reads=1), "LoRAOptions: expected early_reads to be True or False but got early_reads=1"),
    (dict(flat_slots="yes"), "LoRAOptions: expected flat_slots to be True or False but got flat_slots='yes'"),
    (dict(flat_slots_min_saving=-1), "LoRAOptions: expected flat_slots_min_saving to be a number >= 0 (0: the flat "
                                     "grid wherever allowed) but got flat_slots_min_saving=-1"),
    (dict(fp32_dot="ieee"), "LoRAOptions: fp32_dot='ieee' is invalid; the only valid values are 'auto', 'tf32'"),
    (dict(blocks={"gemm": {}}), "LoRAOptions: blocks op='gemm' is invalid; the only valid values are 'step_a_q', "
                                "'step_b_q', 'step_a_v', 'step_b_v', 'q_side_fused', 'v_side_fused'"),
    (dict(blocks={"step_a_q": {"wide": {}}}), "LoRAOptions: blocks['step_a_q'] path='wide' is invalid; the only "
                                               "valid values are 'seg', 'tok'"),
    (dict(blocks={"step_a_q": {"seg": dict(BT=64)}}),
     "LoRAOptions: blocks['step_a_q']['seg'] lacks 'BLOCK_K', 'num_warps'; an entry replaces the default one "
     "whole: start from kernels.lora.BLOCKS['step_a_q']['seg']"),
    (dict(blocks={"step_a_q": {"seg": dict(BT=48, BLOCK_K=64, num_warps=4)}}),
     "LoRAOptions: blocks['step_a_q']['seg']['BT']=48 is invalid; expected a power of two"),
    (dict(blocks={"step_a_q": {"seg": dict(BT=64, BLOCK_K=64, num_warps=4, PDL=True)}}),
     "LoRAOptions: blocks['step_a_q']['seg'] has no key 'PDL'; the only valid keys are 'BT', 'BLOCK_K', "
     "'num_warps', 'num_stages', 'maxnreg'"),
    (dict(blocks={"q_side_fused": {"tok": {**klora.BLOCKS["q_side_fused"]["tok"], "WIDE": {"EARLY": 1}}}}),
     "LoRAOptions: blocks['q_side_fused']['tok']['EARLY']=1 is invalid; expected True or False"),
])
def test_lora_options_refuse_bad_values_with_the_exact_message(fields, message):
    with pytest.raises(OptionsError) as info:
        LoRAOptions(**fields)
    assert str(info.value) == message
    with pytest.raises(OptionsError) as info:  # the same through a LaunchOptions change
        LaunchOptions().replace(lora=fields)
    assert str(info.value) == message


def test_lora_options_are_hashable_values_and_restored_after_an_error():
    """``blocks`` given as dicts is kept as sorted tuples (equal values, equal hashes: the options can key
    caches); every default entry is a valid one; a block's options are undone after an exception in it."""
    entry = dict(klora.BLOCKS["v_side_fused"]["tok"])
    a = LoRAOptions(blocks={"v_side_fused": {"tok": entry}, "step_a_q": {"seg": dict(BT=64, BLOCK_K=64, num_warps=4)}})
    b = LoRAOptions(blocks=a.blocks)
    assert a == b and hash(a) == hash(b) and isinstance(a.blocks, tuple) and a.block_entry("v_side_fused", "tok") == entry
    assert a.block_entry("v_side_fused", "seg") is None and hash(LaunchOptions(lora=a)) == hash(LaunchOptions(lora=b))
    LoRAOptions(blocks={op: dict(paths) for op, paths in klora.BLOCKS.items()})  # the defaults are valid entries
    before = current_options()
    with pytest.raises(RuntimeError, match="inside"):
        with options(lora={"route": "tok", "early_reads": True}):
            with options(lora={"slot_sorted": False}) as inner:
                assert inner.lora == LoRAOptions(route="tok", early_reads=True, slot_sorted=False)
                assert current_options() is inner
                raise RuntimeError("inside")
    assert current_options() is before and current_options().lora == LoRAOptions()


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
        for route in ("seg", "tok"):  # LoRAOptions.route overrides the heuristic
            assert launch.plan(op, bi, sum(seg_lens), bi.max_len, options=LoRAOptions(route=route)).token_major == \
                (route == "tok")


@pytest.mark.parametrize("op", OPS)
def test_flat_grid_only_where_it_halves_the_programs(op):
    """flat_slots_min_saving (2): one-token segments over 4 slots take the flat grid when the slot-sorted
    one would launch at least twice its tiles, L * ceil(S/BT) >= 2 * (ceil(S/BT) + L - 1)."""
    tok = LoRAOptions(route="tok")
    assert LoRAOptions().flat_slots_min_saving == 2
    for S in (8, 64, 100, 256):
        p = launch.plan(op, _decode(S, 4), S, 1, num_slots=4, options=tok)
        tiles = triton.cdiv(S, p.blocks["BT"])
        assert (p.slot_block > 0) == (4 * tiles >= 2 * (tiles + 3)), (S, p)
        assert p.row_tiles == (tiles + 3 if p.slot_block else tiles), (S, p)
    # the benchmarks' decode shapes: at bs64 (16 rows per slot) neither fused side goes flat (q 8 -> 5 tiles per
    # head, v 4 -> 4); at bs256 (64 per slot, 64-row tiles) both do (16 -> 7)
    for S, flat in ((64, False), (256, True)):
        if op in FUSED:
            assert (launch.plan(op, _decode(S, 4), S, 1, num_slots=4).slot_block > 0) == flat, (op, S)
    anywhere = LoRAOptions(route="tok", flat_slots_min_saving=0)
    assert launch.plan(op, _decode(8, 4), 8, 1, num_slots=4, options=anywhere).slot_block == 8


@pytest.mark.parametrize("op", OPS)
def test_wide_tiles_only_where_a_slot_fills_them(op):
    """WIDE_BT: token-major tiles as tall as WIDE_BT, with the WIDE overrides, where the batch has at least
    that many rows per slot; neither key reaches the kernel."""
    chosen = klora.BLOCKS[op]["tok"]
    wide = chosen.get("WIDE_BT")
    narrow = {k: v for k, v in chosen.items() if k not in ("WIDE_BT", "WIDE", "EARLY_BLOCKS")}
    for S, L in ((64, 4), (255, 4), (256, 4), (512, 4), (64, 1), (128, 8)):
        p = launch.plan(op, _decode(S, L), S, 1, num_slots=L, options=LoRAOptions(route="tok"))
        is_wide = bool(wide) and S >= wide * L
        assert p.blocks == ({**narrow, "BT": wide, **chosen.get("WIDE", {})} if is_wide else narrow), (op, S, L)
    assert klora.BLOCKS["q_side_fused"]["tok"]["WIDE_BT"] == 64
    # Note [Whole-row prefetch]: 32-row q tiles (decode-bs64) prefetch whole rows on one stage, 64-row ones not
    bs64 = launch.token_major_blocks("q_side_fused", 64, 4)
    bs256 = launch.token_major_blocks("q_side_fused", 256, 4)
    assert (bs64["BT"], bs64["PREFETCH_ALL"], bs64["num_stages"]) == (32, True, 1)
    assert (bs256["BT"], bs256["PREFETCH_ALL"], bs256["num_stages"]) == (64, False, launch.DEFAULT_STAGES)
    with pytest.raises(TypeError):  # the defaults are read-only: a caller passes LoRAOptions.blocks
        klora.BLOCKS[op]["tok"] = {}


def test_early_reads_take_their_blocks_in_the_fused_token_major_launches():
    """Note [Early reads]: under LoRAOptions(early_reads=True) the fused token-major launches take their
    EARLY_BLOCKS and the EARLY launch key (the fused q side 16-row tiles, 64 where WIDE_BT applies; the v side
    its own blocks), the split steps and the segment-major path nothing; off by default."""
    bi = _decode(64, 4)
    early = LoRAOptions(early_reads=True)
    before = {op: launch.plan(op, bi, 64, 1, num_slots=4).blocks for op in OPS}
    assert all("EARLY" not in b for b in before.values()) and not LoRAOptions().early_reads
    q64 = launch.token_major_blocks("q_side_fused", 64, 4, early)
    q256 = launch.token_major_blocks("q_side_fused", 256, 4, early)
    v64 = launch.token_major_blocks("v_side_fused", 64, 4, early)
    plans = {op: launch.plan(op, bi, 64, 1, num_slots=4, options=early) for op in OPS}
    seg = launch.plan("q_side_fused", bi, 64, 1, num_slots=4, options=dataclasses.replace(early, route="seg"))
    assert (q64["BT"], q64["EARLY"], q256["BT"], q256["EARLY"]) == (16, True, 64, True)
    assert (v64["BT"], v64["EARLY"]) == (klora.BLOCKS["v_side_fused"]["tok"]["BT"], True)
    assert "EARLY_BLOCKS" not in q64 and "EARLY" not in seg.blocks
    for op, p in plans.items():
        assert p.blocks.get("EARLY", False) == (op in FUSED), op
        if op not in FUSED:
            assert p.blocks == before[op], op
    assert plans["q_side_fused"].slot_block > 0  # 16-row tiles: the flat grid (4 tiles x 4 slots >= 2 x 7)
    assert "EARLY" not in launch.kernel_blocks(q64)  # a launch key: the kernel gets it with PDL only




def test_pdl_is_a_gpu_launch_option_only():
    """Note [Programmatic dependent launch]: the interpreter (CPU tensors) gets neither the kernel's PDL
    constexpr nor Triton's launch option, whatever the blocks ask; a request off gets none anywhere."""
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
    assert klora.BLOCKS["q_side_fused"]["tok"]["PDL"] and klora.BLOCKS["v_side_fused"]["seg"]["PDL"]


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

    blocks = {k: v for k, v in klora.BLOCKS["step_a_v"]["seg"].items() if k != "num_warps"}
    est = estimate_bytes("step_a_v", blocks, block_r=128, num_stages=DEFAULT_STAGES, elem_bytes=4, transformed=True)
    assert est >= 262144 > SMEM_LIMITS["sm90 (H100, H200)"]


@pytest.mark.parametrize("limit_name", list(SMEM_LIMITS))
@pytest.mark.parametrize("op", OPS)
def test_smem_fitted_configs_stay_within_the_limit(op, limit_name):
    from kernel_oracle.kernels.lora._smem import DEFAULT_STAGES, estimate_bytes, fit_config

    limit = SMEM_LIMITS[limit_name]
    for path in ("seg", "tok"):
        default = {k: v for k, v in klora.BLOCKS[op][path].items() if k != "num_warps"}
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
        for path, blocks in (("seg", klora.BLOCKS[op]["seg"]), ("tok", klora.BLOCKS[op]["tok"]),
                             ("tok", launch.token_major_blocks(op, 1 << 20, 1))):
            default = {k: v for k, v in blocks.items() if k != "num_warps"}
            got = fit_config(op, default, block_r=128, elem_bytes=2, transformed=False, limit=232448)
            assert got == (default, DEFAULT_STAGES), (op, path, got)


H200_SMEM = SMEM_LIMITS["sm90 (H100, H200)"]


@pytest.fixture
def fresh_fits():
    """The launcher's fitted configurations forgotten before and after (what a test fits is its own)."""
    launch.forget_fitted()
    yield
    launch.forget_fitted()


def test_launch_steps_down_when_the_device_still_runs_out(fresh_fits):
    """An estimate that is too low costs one failed compile, never a crash: _launch catches
    OutOfResources, takes the next configuration down, and remembers the one that launched."""
    from kernel_oracle.kernels.lora._smem import estimate_bytes

    tried = []

    def fake_launch(blocks, warps, stages):
        need = estimate_bytes("step_a_v", blocks, block_r=128, num_stages=stages, elem_bytes=4, transformed=True)
        tried.append((blocks["BLOCK_K"], stages))
        if need > 150_000:  # a device that needs more than the estimate says
            raise launch.OutOfResources(need, 150_000, "shared memory")

    x = torch.zeros(2, 2, 2, dtype=torch.float32)
    p = launch.Plan(False, 1, 1, 1, 0, 0, klora.BLOCKS["step_a_v"]["seg"])
    launch._launch("step_a_v", p, x, (x,), 128, fake_launch, smem=H200_SMEM)
    assert tried[0] == (128, 2), "the estimate's choice first (fp32 R=128 on the H200: 2 stages)"
    assert len(tried) > 1 and tried[-1] != tried[0]
    ((key, (cfg, _, stages)),) = launch.fitted().items()
    assert (cfg["BLOCK_K"], stages) == tried[-1]
    tried.clear()
    launch._launch("step_a_v", p, x, (x,), 128, fake_launch, smem=H200_SMEM)
    assert len(tried) == 1, "a remembered configuration launches directly"


def test_a_remembered_configuration_that_no_longer_fits_is_fitted_again(fresh_fits):
    """A configuration remembered from one specialization (the generic kernel, say) that runs out on
    another falls back to the ladder: never OutOfResources on a valid input."""
    x = torch.zeros(2, 2, 2, dtype=torch.float32)
    p = launch.Plan(False, 1, 1, 1, 0, 0, klora.BLOCKS["step_a_v"]["seg"])
    launch._launch("step_a_v", p, x, (x,), 128, lambda blocks, warps, stages: None, align=8, smem=H200_SMEM)
    ((key, first),) = launch.fitted().items()
    assert key[-1] == 8, "ALIGN is part of the key"
    tried = []

    def tighter(blocks, warps, stages):
        tried.append((dict(blocks), stages))
        if (blocks, stages) == (first[0], first[2]):
            raise launch.OutOfResources(300_000, 232_448, "shared memory")

    launch._launch("step_a_v", p, x, (x,), 128, tighter, align=8, smem=H200_SMEM)
    assert len(tried) >= 2 and launch.fitted()[key] != first


def test_other_requested_blocks_and_routes_are_fitted_on_their_own(fresh_fits):
    """The benchmark's sweeps launch other blocks and routes (LoRAOptions) from call to call: a configuration
    fitted for one request must not be launched for another (every sweep entry after the first would time the
    first)."""
    x = torch.zeros(2, 2, 2, dtype=torch.bfloat16)
    launched = []
    for bk in (128, 64):
        blocks = {**klora.BLOCKS["step_a_v"]["seg"], "BLOCK_K": bk}
        p = launch.Plan(False, 1, 1, 1, 0, 0, blocks)
        launch._launch("step_a_v", p, x, (x,), 32, lambda b, w, s: launched.append(b["BLOCK_K"]), align=8,
                       smem=H200_SMEM)
    tok = dict(klora.BLOCKS["step_a_v"]["tok"])
    for flat, sorted_rows in ((0, True), (8, True), (0, False)):  # the per-slot, flat and logical-row routes
        p = launch.Plan(True, 1, 1, 1, 1, 64, tok, flat, sorted_rows)
        launch._launch("step_a_v", p, x, (x,), 32, lambda b, w, s: launched.append(b["BLOCK_K"]), align=8,
                       smem=H200_SMEM)
    assert launched == [128, 64, 128, 128, 128] and len(launch.fitted()) == 5


@pytest.mark.parametrize("table,path", [("DECODE_AB", "tok"), ("PREFILL_AB", "seg")])
def test_ab_tables_override_the_chosen_blocks(table, path):
    """bench_lora's A/B entries are overrides of the default blocks on a named token-major route: {} launches
    exactly the default configuration, and every entry is a block entry LoRAOptions accepts (a key the kernel
    does not take is refused: a typo would time the default one) on a route that exists."""
    from kernel_oracle.benchmarks import bench_lora

    configs = bench_lora.ab_configs(getattr(bench_lora, table), klora.BLOCKS, path)
    for op, entries in configs.items():
        chosen = klora.BLOCKS[op][path]
        assert entries[0] == ("auto", chosen)  # the first entry: what the kernels launch by default
        for (route, overrides), (_, cfg) in zip(getattr(bench_lora, table)[op], entries):
            assert route in bench_lora.ROUTES, route
            assert cfg == {**chosen, **overrides}
            lora = LoRAOptions(**bench_lora.route_options(route, {op: {path: cfg}}))
            assert lora.block_entry(op, path) == cfg and (lora.flat_slots_min_saving == 0) == (route == "flat")
    assert bench_lora.ab_configs({"q_side_fused": [("sorted", {"BT": 16})]}, klora.BLOCKS, path) == \
        {"q_side_fused": [("sorted", {**klora.BLOCKS["q_side_fused"][path], "BT": 16})]}


# ---- the precision the triton target declares per entry point (fuzz/targets/triton.py) ------------

def test_bench_routes_are_launch_options_and_restored_after():
    """bench_lora times flat against the per-slot grid (--decode-ab, --decode-floor) through ROUTES: each
    route's plan is the one it names, and the options in force are restored after."""
    from kernel_oracle.benchmarks import bench_lora

    assert {"flat", "sorted"} <= {route for route, _ in bench_lora.DECODE_AB["q_side_fused"]}
    assert {"flat", "sorted"} <= {route for route, _ in bench_lora.DECODE_AB["v_side_fused"]}
    before = current_options()
    for route, flat in (("flat", True), ("sorted", False), ("logical", False)):
        with options(lora=bench_lora.route_options(route)):
            p = launch.plan("v_side_fused", _decode(64, 4), 64, 1, num_slots=4)
            assert p.token_major and (p.slot_block > 0) == flat and p.sorted_rows == (route != "logical")
    assert current_options() is before


@pytest.mark.parametrize("argv,lora", [
    ([], LoRAOptions()),
    (["--early-reads"], LoRAOptions(early_reads=True)),
    (["--decode-floor", "--routes", "auto", "flat", "--early-reads"], LoRAOptions(early_reads=True)),
    (["--decode-ab"], LoRAOptions()),
    (["--prefill-ab", "--json", "x.json"], LoRAOptions()),
    (["--sweep", "--sweep-decode", "--shapes", "decode-bs64"], LoRAOptions()),
])
def test_bench_lora_flags_parse_into_launch_options(argv, lora):
    """bench_lora's modes only time on a GPU; on any machine their flags parse, build the LaunchOptions every
    timed call starts from, and name the command that reproduces the run."""
    from kernel_oracle.benchmarks import bench_lora

    args = bench_lora.parse_args(argv)
    assert bench_lora.flag_options(args) == LaunchOptions(lora=lora)
    command = bench_lora.command_line(args)
    assert command.startswith("python -m kernel_oracle.benchmarks.bench_lora")
    assert all(flag in command for flag in argv if flag.startswith("--") and flag not in ("--json", "--shapes"))
    with pytest.raises(SystemExit):
        bench_lora.parse_args(["--routes", "diagonal"])


def test_triton_target_declares_precision_per_op(monkeypatch):
    from kernel_oracle.harness.targets import Target, TargetError
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
    from kernel_oracle.harness.problem_lora import LoRAProblem

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
    # the interpreter's wrapper keeps the decorator's arguments in its kwargs
    dns = set(getattr(fn, "do_not_specialize", None) or fn.kwargs["do_not_specialize"])
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
