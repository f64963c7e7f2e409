"""SGLang 0.5.23's grouped primitives (``build_route``, ``grouped_lora_a``, ``grouped_lora_b``) against their own
references (reference/grouped_route.py, reference/grouped_lora.py), where the q/v-side ops do not pin them down.

* every builder of ``build_route`` (one-program small, histogram/scan/place large through ``capacity``, the
  pure-torch aligner of the middle sizes) gives a route that ``check_route`` accepts: every pair once, in its
  bucket's blocks, unrouted pairs (slot -1, slot past ``max_loras``, group past ``groups_per_slot``) in blocks
  labelled -1, the plan packed, the capacity held;
* ``grouped_lora_a`` over fresh random cases of each option (pair / token / mapped input rows, ``weight_div``,
  live ranks with ``stack``, ``windowed``, split-K serial and planes, fp32 and fp16) into a NaN-poisoned
  bridge: the reference's defined region within tolerance, its untouched region bit-for-bit;
* ``grouped_lora_b`` the same (add in place vs overwrite, ``zero_sentinel``, per-head destination, two slices
  at other columns, shared bridge blocks, split-K planes, rank-0 slots, scalings, token bridge);
* each reference check fails on a planted defect (a pair moved to another bucket, an add that overwrites,
  a shrink past the live rank, a route without its unrouted pairs).

Under the Triton interpreter the expand's K tile is the whole pool rank: past the first K tile the
interpreter refuses the kernel's block mask (a canary here shows the interpreter defect on code of our
own, and fails once a Triton release fixes it).
"""

from __future__ import annotations

import types

import pytest
import torch

from kernel_oracle.fuzz.targets.sglang_v2 import v2_primitives
from kernel_oracle.reference.grouped_lora import grouped_lora_a_planes_ref, grouped_lora_a_ref, grouped_lora_b_ref
from kernel_oracle.reference.grouped_route import RouteError, check_route, pair_slots_and_heads, route_buckets

from oracle_tests._sglang_releases import release_target
from oracle_tests.conftest import DEVICE, HAS_CUDA

pytest.importorskip("msgspec", reason="SGLang 0.5.23's v2 files import msgspec (requirements-cpu.txt installs it)")
pytest.importorskip("pydantic", reason="SGLang 0.5.23's v2 files import pydantic (requirements-cpu.txt installs it)")

SPEC = "sglang-v2==0.5.23"
NAN = float("nan")
SEEDS = (0, 1)  # fresh slots, weights and inputs per seed, reproducible from the test id
A_TILES = dict(BLOCK_SIZE_N=16, BLOCK_SIZE_K=16, GROUP_SIZE_M=1, num_warps=4, num_stages=1)
# the expand's K tile is min(BLOCK_SIZE_K, next power of two of the pool rank) (at least 16): 64 makes it the
# whole rank of every case here, the one K tile the interpreter runs (test_interpreter_canary...)
B_TILES = dict(BLOCK_SIZE_N=16, BLOCK_SIZE_K=64, GROUP_SIZE_M=1, num_warps=4, num_stages=1)


@pytest.fixture(scope="module")
def prims():
    corrections = release_target(SPEC, DEVICE).entries["q_side_fused"].__self__
    return v2_primitives(corrections.module, DEVICE)


def _rtol(dtype: torch.dtype) -> float:
    if dtype == torch.float16:
        return 4e-3  # fp16 operands, a bridge cast to the weight's dtype, an fp16 store
    return 4e-3 if HAS_CUDA else 1e-5  # tl.dot on fp32: TF32 on NVIDIA GPUs, exact fp32 in the interpreter


def _slots(gen, tokens: int, loras: int) -> torch.Tensor:
    """Per-token slots in a random order: every slot, -1 and one past ``loras`` (both unrouted) at least once
    (``tokens >= loras + 2``), the rest random."""
    s = torch.randint(-1, loras, (tokens,), generator=gen, dtype=torch.int32)
    s[: loras + 2] = torch.arange(-1, loras + 1, dtype=torch.int32)
    return s[torch.randperm(tokens, generator=gen)]


def _mla_route(prims, slots: torch.Tensor, heads: int, loras: int, **kw):
    pair_slots, head_ids = pair_slots_and_heads(slots, heads)
    pair_slots, head_ids = pair_slots.to(DEVICE), head_ids.to(DEVICE)
    route = prims.build_route(pair_slots, group_ids=head_ids, groups_per_slot=heads, max_loras=loras,
                              block_size=kw.pop("block_size", 16), **kw)
    inputs = dict(token_slots=pair_slots, group_ids=head_ids, groups_per_slot=heads, max_loras=loras)
    return route, inputs


# ---- build_route ---------------------------------------------------------------------------------

ROUTES = {  # name -> (tokens, heads, loras, build_route keywords): each builder, each kind of unrouted pair
    "small builder, decode block": (9, 2, 3, dict(block_size=16)),
    "small builder, prefill block": (7, 3, 2, dict(block_size=64)),
    "large builder (capacity)": (6, 2, 3, dict(block_size=16, capacity=0)),
    "large builder, spare capacity": (5, 2, 2, dict(block_size=16, capacity=200)),
    "torch aligner (600 pairs)": (300, 2, 3, dict(block_size=16)),
}


@pytest.mark.parametrize("name", sorted(ROUTES))
def test_every_builder_gives_a_route_the_contract_accepts(prims, name):
    tokens, heads, loras, kw = ROUTES[name]
    gen = torch.Generator().manual_seed(len(name))
    slots = _slots(gen, tokens, loras)
    route, inputs = _mla_route(prims, slots, heads, loras, **dict(kw))
    summary = check_route(route, block_size=kw["block_size"], capacity=kw.get("capacity"), **inputs)
    assert summary.counts.get(-1, 0) >= heads  # the slot past max_loras (and any -1) is there, labelled -1


def test_token_routes_and_groups_past_the_slot_are_unrouted(prims):
    slots = torch.tensor([0, 1, -1, 2, 1], dtype=torch.int32, device=DEVICE)
    route = prims.build_route(slots, max_loras=2, block_size=16)  # no groups: bucket = slot; slot 2 unrouted
    assert check_route(route, token_slots=slots, max_loras=2).counts == {-1: 2, 0: 1, 1: 2}
    groups = torch.tensor([[0, 3], [1, -1], [0, 1], [2, 0], [1, 1]], dtype=torch.int32, device=DEVICE)
    route = prims.build_route(slots, group_ids=groups, groups_per_slot=2, max_loras=2, block_size=16)
    summary = check_route(route, token_slots=slots, group_ids=groups, groups_per_slot=2, max_loras=2)
    assert summary.counts[-1] == 6  # group 3 (past 2), group -1, token 2 (two), token 3 (slot 2, two)
    route = prims.build_route(slots, group_ids=groups, groups_per_slot=1, max_loras=2, block_size=16)
    check_route(route, token_slots=slots, group_ids=groups, groups_per_slot=1, max_loras=2)  # groups fold in


def _moved(route, src: int, dst: int):
    """``route`` with the pair at plan entry ``src`` swapped with the one at ``dst``."""
    ids = route.sorted_pair_ids.clone()
    ids[src], ids[dst] = route.sorted_pair_ids[dst].clone(), route.sorted_pair_ids[src].clone()
    return types.SimpleNamespace(block_size=route.block_size, sorted_pair_ids=ids,
                                 block_bucket_ids=route.block_bucket_ids,
                                 num_pairs_post_padded=route.num_pairs_post_padded)


def test_a_real_route_with_a_pair_in_the_wrong_bucket_or_without_its_unrouted_pairs_fails(prims):
    slots = torch.tensor([0, -1, 1, 1, 0], dtype=torch.int32)
    route, inputs = _mla_route(prims, slots, 2, 2)
    check_route(route, **inputs)
    labels = route.block_bucket_ids.tolist()
    a, b = labels.index(0), labels.index(1)  # the first blocks of buckets 0 and 1
    with pytest.raises(RouteError, match="is in block"):
        check_route(_moved(route, a * 16, b * 16), **inputs)
    s = labels.index(-1)
    dropped = route.sorted_pair_ids.clone()
    dropped[s * 16: s * 16 + 16] = 10  # the sentinel block's pairs become padding (P = 10)
    with pytest.raises(RouteError, match="unrouted pair"):
        check_route(types.SimpleNamespace(**{**_moved(route, 0, 0).__dict__, "sorted_pair_ids": dropped}), **inputs)


# ---- grouped_lora_a ------------------------------------------------------------------------------

SHRINKS = {  # name -> options: the MLA shrinks and each option of the primitive
    "q side: pair input, ranks": dict(pair_input=True, ranks=True),
    "v side: weight_div H": dict(pair_input=True, weight_div="H", ranks=True),
    "token input (width H)": dict(token_input=True),
    "mapped rows, holes": dict(pair_to_row=True),
    "stack 2, ranks": dict(pair_input=True, stack=2, ranks=True),
    "windowed stack 2 (ranks ignored)": dict(pair_input=True, stack=2, windowed=True, ranks=True),
    "two K tiles": dict(pair_input=True, K=40, ranks=True),
    "split-K serial": dict(pair_input=True, split=("serial", 3), ranks=True),
    "split-K planes": dict(pair_input=True, split=("planes", 2)),
    "prefill block 64, large route": dict(pair_input=True, ranks=True, block=64, capacity=0),
}


def _shrink_call(name: str, dtype: torch.dtype, seed: int):
    o = dict(SHRINKS[name])
    gen = torch.Generator().manual_seed(seed)
    T, H, L, R, stack = 6, 2, 2, 16, o.get("stack", 1)
    K, N = o.get("K", 24), R * stack
    slots = _slots(gen, T, L)
    if o.get("token_input"):
        pair_slots, groups, width = slots, torch.arange(H, dtype=torch.int32).repeat(T, 1), H
    else:
        (pair_slots, groups), width = pair_slots_and_heads(slots, H), 1
    P = T * H
    div = H if o.get("weight_div") == "H" else 1
    kw = dict(weight_div=div, stack=stack, windowed=o.get("windowed", False), pair_input=o.get("pair_input", False))
    if o.get("ranks"):
        kw["lora_ranks"] = torch.tensor([R, 5], dtype=torch.int32)[:L]
    if o.get("pair_to_row"):
        rows = torch.randint(0, T, (P,), generator=gen, dtype=torch.int32)
        live = (pair_slots >= 0) & (pair_slots < L)
        rows[live.nonzero()[:2, 0]] = torch.tensor([-1, T + 1], dtype=torch.int32)  # routed pairs off the input
        kw["pair_to_row"] = rows
    rows = T if (o.get("token_input") or o.get("pair_to_row")) else P
    x = torch.randn(rows, K * (stack if kw["windowed"] else 1), generator=gen).to(dtype)
    w = (torch.randn(L * H // div, N, K, generator=gen) / 4).to(dtype)
    return dict(pair_slots=pair_slots, groups=groups, width=width, H=H, L=L, x=x, w=w, kw=kw, split=o.get("split"),
                route=dict(block_size=o.get("block", 16), capacity=o.get("capacity")))


def _on(t):
    return None if t is None else t.to(DEVICE)


def _run_shrink(prims, c, dtype, *, lora_ranks="same"):
    route = prims.build_route(_on(c["pair_slots"]), group_ids=_on(c["groups"]), groups_per_slot=c["H"],
                              max_loras=c["L"], **c["route"])
    P, N = c["groups"].numel(), c["w"].shape[1]
    out = torch.full((P, N), NAN, dtype=dtype, device=DEVICE)
    kw = {k: _on(v) if isinstance(v, torch.Tensor) else v for k, v in c["kw"].items()}
    if lora_ranks != "same":
        kw["lora_ranks"] = lora_ranks
    cfg, partial, counters = dict(A_TILES), None, None
    if c["split"]:
        mode, split = c["split"]
        cfg.update(SPLIT_K=split, SPLIT_MODE=mode)
        partial = torch.full((split, P, N), NAN, dtype=torch.float32, device=DEVICE)
        counters = torch.zeros(64, dtype=torch.int32, device=DEVICE)
    prims.grouped_lora_a(_on(c["x"]), _on(c["w"]), out, route, config=cfg, partial=partial, counters=counters, **kw)
    return out, partial, counters


def _shrink_expected(c, out0):
    buckets = route_buckets(c["pair_slots"], group_ids=c["groups"], groups_per_slot=c["H"], max_loras=c["L"])
    mode, split = c["split"] or ("serial", 1)
    return buckets, grouped_lora_a_ref(c["x"], c["w"], out0, buckets, groups_per_slot=c["H"], width=c["width"],
                                       split_k=split, split_mode=mode, **c["kw"])


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("name", sorted(SHRINKS))
def test_grouped_lora_a_matches_its_reference(prims, name, dtype, seed):
    c = _shrink_call(name, dtype, seed=seed)
    out, partial, counters = _run_shrink(prims, c, dtype)
    buckets, exp = _shrink_expected(c, torch.full(out.shape, NAN))
    assert bool(exp.defined.any()) or c["split"][0] == "planes"
    problem = exp.mismatch(out, rtol=_rtol(dtype), atol=1e-6)
    assert problem is None, f"grouped_lora_a [{name}] {dtype} seed {seed}: {problem}"
    if partial is not None:
        planes = grouped_lora_a_planes_ref(c["x"], c["w"], torch.full(partial.shape, NAN), buckets,
                                           split_k=partial.shape[0], groups_per_slot=c["H"], width=c["width"],
                                           **c["kw"])
        problem = planes.mismatch(partial, rtol=_rtol(dtype), atol=1e-6)
        assert problem is None, f"grouped_lora_a [{name}] {dtype} seed {seed} split-K planes: {problem}"
        assert not bool(counters.any()), "the serial split-K tile counters are zero at rest"


def test_a_shrink_past_the_live_rank_fails_the_reference(prims):
    c = _shrink_call("q side: pair input, ranks", torch.float32, seed=3)
    out, _, _ = _run_shrink(prims, c, torch.float32, lora_ranks=None)  # planted: the ranks are not passed
    _, exp = _shrink_expected(c, torch.full(out.shape, NAN))
    assert "should be untouched" in (exp.mismatch(out, rtol=_rtol(torch.float32), atol=1e-6) or "")


# ---- grouped_lora_b ------------------------------------------------------------------------------

EXPANDS = {  # name -> options
    "MLA q apply (heads, add, weight_div H)": dict(add=True, heads=True, weight_div="H", ranks=True, scalings=True),
    "MLA v apply (heads, add)": dict(add=True, heads=True, ranks=True, scalings=True),
    "overwrite, 2-D": dict(),
    "zero sentinel": dict(zero_sentinel=True, ranks=True),
    "two slices at other columns": dict(offsets=(0, 20, 36), out_offsets=(20, 0), ranks=True, bridge=2),
    "shared bridge blocks": dict(offsets=(0, 16, 32), bridge_slices=1, add=True, ranks=True),
    "split-K planes": dict(planes=3, scalings=True),
    "token bridge, zero sentinel": dict(token_bridge=True, zero_sentinel=True),
    "prefill block 64, large route": dict(add=True, heads=True, ranks=True, block=64, capacity=0),
}


def _expand_call(name: str, dtype: torch.dtype, seed: int, R: int = 16):
    o = dict(EXPANDS[name])
    gen = torch.Generator().manual_seed(seed)
    T, H, L = 6, 2, 3
    slots = _slots(gen, T, L)
    if o.get("token_bridge"):
        pair_slots, groups, width = slots, torch.arange(H, dtype=torch.int32).repeat(T, 1), H
    else:
        (pair_slots, groups), width = pair_slots_and_heads(slots, H), 1
    P, offsets = T * H, o.get("offsets", (0, 24))
    div = H if o.get("weight_div") == "H" else 1
    kw = dict(offsets=offsets, out_offsets=o.get("out_offsets"), add_inplace=o.get("add", False),
              zero_sentinel=o.get("zero_sentinel", False), weight_div=div, pair_heads=H if o.get("heads") else 0,
              bridge_slices=o.get("bridge_slices", 0), pair_bridge=not o.get("token_bridge"))
    if o.get("ranks"):
        kw["lora_ranks"] = torch.tensor([R, 0, 7], dtype=torch.int32)  # a full, a rank-0 and a partial slot
    if o.get("scalings"):
        kw["scalings"] = torch.tensor([1.0, 0.5, -2.0])
    planes = o.get("planes", 1)
    bridge_rows = T if o.get("token_bridge") else P
    bridge_width = R * o.get("bridge", 1)
    bridge = torch.randn(*((planes,) if planes > 1 else ()), bridge_rows, bridge_width, generator=gen)
    bridge = bridge if planes > 1 else bridge.to(dtype)
    w = (torch.randn(L * H // div, offsets[-1], R, generator=gen) / 4).to(dtype)
    C = max(c + (hi - lo) for c, lo, hi in zip(kw["out_offsets"] or offsets[:-1], offsets, offsets[1:])) + 3
    shape = (T, H, C) if kw["pair_heads"] else (P, C)
    dest0 = torch.randn(shape, generator=gen).to(dtype) if kw["add_inplace"] else torch.full(shape, NAN, dtype=dtype)
    return dict(pair_slots=pair_slots, groups=groups, width=width, H=H, L=L, bridge=bridge, w=w, dest0=dest0, kw=kw,
                route=dict(block_size=o.get("block", 16), capacity=o.get("capacity")))


def _run_expand(prims, c, config=B_TILES, **override):
    kw = {**c["kw"], **override}
    route = prims.build_route(_on(c["pair_slots"]), group_ids=_on(c["groups"]), groups_per_slot=c["H"],
                              max_loras=c["L"], **c["route"])
    dest = c["dest0"].clone().to(DEVICE)
    geometry = prims.slice_geometry(kw.pop("offsets"), B_TILES["BLOCK_SIZE_N"], torch.device(DEVICE),
                                    kw.pop("out_offsets"))
    planes = c["bridge"].shape[0] if c["bridge"].dim() == 3 else 1
    prims.grouped_lora_b(_on(c["bridge"]), _on(c["w"]), dest, route, geometry=geometry, config=config,
                         planes=planes, **{k: _on(v) if isinstance(v, torch.Tensor) else v for k, v in kw.items()})
    return dest


def _expand_expected(c):
    buckets = route_buckets(c["pair_slots"], group_ids=c["groups"], groups_per_slot=c["H"], max_loras=c["L"])
    return grouped_lora_b_ref(c["bridge"], c["w"], c["dest0"], buckets, groups_per_slot=c["H"], width=c["width"],
                              **c["kw"])


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("name", sorted(EXPANDS))
def test_grouped_lora_b_matches_its_reference(prims, name, dtype, seed):
    c = _expand_call(name, dtype, seed=seed)
    dest = _run_expand(prims, c)
    exp = _expand_expected(c)
    assert bool(exp.defined.any()) and bool(exp.untouched.any())
    problem = exp.mismatch(dest, rtol=_rtol(dtype), atol=1e-6)
    assert problem is None, f"grouped_lora_b [{name}] {dtype} seed {seed}: {problem}"


def test_an_add_in_place_that_overwrites_fails_the_reference(prims):
    c = _expand_call("MLA v apply (heads, add)", torch.float32, seed=7)
    dest = _run_expand(prims, c, add_inplace=False)  # planted: the expand replaces the base output
    assert "defined elements off" in (_expand_expected(c).mismatch(dest, rtol=_rtol(torch.float32)) or "")


def test_unrouted_rows_keep_nan_without_zero_sentinel_and_get_zero_with_it(prims):
    c = _expand_call("zero sentinel", torch.float32, seed=11)
    unrouted = route_buckets(c["pair_slots"], group_ids=c["groups"], groups_per_slot=c["H"], max_loras=c["L"]) < 0
    assert bool(unrouted.any())
    cleared = _run_expand(prims, c).cpu()
    kept = _run_expand(prims, c, zero_sentinel=False).cpu()
    assert bool((cleared[unrouted][:, :24] == 0).all()) and bool(kept[unrouted].isnan().all())


# ---- the interpreter, and what needs CUDA --------------------------------------------------------

@pytest.mark.skipif(HAS_CUDA, reason="a Triton-interpreter canary: the CPU path only")
def test_interpreter_canary_a_loop_mask_anded_with_a_loaded_scalar_comparison_is_refused():
    """The interpreter defect the expand's tiles work around (B_TILES), on a kernel of our own: inside a
    ``range`` loop, ``(offsets < N) & (k_begin < loaded_scalar)`` as a load mask raises "mask has unsupported
    dtype".  When this test fails, Triton fixed it: give the CPU cases a K tile smaller than the rank."""
    import triton
    import triton.language as tl
    from triton.runtime.errors import InterpreterError

    @triton.jit
    def _masked_tail(x_ptr, r_ptr, out_ptr, N: tl.constexpr, B: tl.constexpr):
        r = tl.load(r_ptr)
        acc = tl.zeros((B,), dtype=tl.float32)
        for k_begin in range(B, N, B):
            offs = k_begin + tl.arange(0, B)
            acc += tl.load(x_ptr + offs, mask=(offs < N) & (k_begin < r), other=0.0)
        tl.store(out_ptr + tl.arange(0, B), acc)

    with pytest.raises(InterpreterError, match="mask has unsupported dtype"):
        _masked_tail[(1,)](torch.arange(32.0), torch.tensor([32], dtype=torch.int32), torch.zeros(16), N=32, B=16)


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device: the release's own slice_geometry (a CUDA table), an "
                    "expand over several K tiles and routes of 120,000 pairs (too slow, or refused, in the interpreter)")
def test_on_cuda_several_k_tiles_and_the_largest_routes_hold(prims):
    c = _expand_call("MLA q apply (heads, add, weight_div H)", torch.float16, seed=5, R=64)
    for block_k in (16, 32):  # four and two K tiles of the rank-64 pool; the live ranks 64, 0 and 7
        dest = _run_expand(prims, c, config={**B_TILES, "BLOCK_SIZE_K": block_k})
        problem = _expand_expected(c).mismatch(dest, rtol=_rtol(torch.float16), atol=1e-6)
        assert problem is None, f"grouped_lora_b, K tile {block_k}: {problem}"
    slots = _slots(torch.Generator().manual_seed(0), 60000, 4)
    big, inputs = _mla_route(prims, slots, 2, 4)  # 120,000 pairs over 9 buckets: the large builder, per-block claims
    check_route(big, **inputs)
