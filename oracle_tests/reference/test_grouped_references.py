"""The grouped-route and grouped-LoRA references (reference/grouped_route.py, reference/grouped_lora.py) against
per-pair loops written independently here.

* ``route_buckets`` is the bucket rule pair by pair; ``check_route`` accepts routes packed by a loop here
  (sentinel first or last, pairs in any order, spare capacity) and names each broken rule of a planted route;
* ``grouped_lora_a_ref`` / ``grouped_lora_a_planes_ref`` / ``grouped_lora_b_ref`` equal loops over pairs,
  columns and rank on random cases across every option, and their masks say which elements are written;
* ``Expected.mismatch`` catches a moved untouched element and an add-in-place that overwrote.
"""

from __future__ import annotations

import itertools
import types

import pytest
import torch

from kernel_oracle.reference.grouped_lora import (Expected, grouped_lora_a_planes_ref, grouped_lora_a_ref,
                                                  grouped_lora_b_ref, split_ranges)
from kernel_oracle.reference.grouped_route import RouteError, check_route, pair_slots_and_heads, route_buckets


def _bucket(slot: int, group, gps: int, max_loras: int) -> int:
    if not 0 <= slot < max_loras:
        return -1
    if group is None:
        return slot
    if group < 0 or (gps > 1 and group >= gps):
        return -1
    return slot if gps == 1 else slot * gps + group


def test_route_buckets_follow_the_rule_pair_by_pair():
    gen = torch.Generator().manual_seed(1)
    for gps, width, L in ((1, 1, 3), (3, 1, 2), (1, 2, 2), (2, 3, 3)):
        slots = torch.randint(-2, L + 2, (7,), generator=gen, dtype=torch.int32)
        groups = torch.randint(-1, gps + 2, (7, width), generator=gen, dtype=torch.int32)
        got = route_buckets(slots, group_ids=groups, groups_per_slot=gps, max_loras=L)
        want = [_bucket(int(slots[p // width]), int(groups.reshape(-1)[p]), gps, L) for p in range(7 * width)]
        assert got.tolist() == want
    slots = torch.tensor([0, -1, 4, 1], dtype=torch.int32)
    assert route_buckets(slots, max_loras=2).tolist() == [0, -1, -1, 1]


def test_mla_pairs_are_token_major_with_bucket_slot_times_heads_plus_head():
    slots, heads = pair_slots_and_heads(torch.tensor([1, -1, 0], dtype=torch.int32), 2)
    assert slots.tolist() == [1, 1, -1, -1, 0, 0] and heads.reshape(-1).tolist() == [0, 1, 0, 1, 0, 1]
    assert route_buckets(slots, group_ids=heads, groups_per_slot=2, max_loras=2).tolist() == [2, 3, -1, -1, 0, 1]


# ---- routes packed here --------------------------------------------------------------------------

def _pack(buckets: list, bs: int, nb: int, *, sentinel_first: bool, spare: int = 0, reverse: bool = False):
    """A route object packed pair by pair: one run of blocks per bucket, padding P."""
    P = len(buckets)
    order = ([-1] if sentinel_first else []) + list(range(nb)) + ([] if sentinel_first else [-1])
    sorted_ids, labels = [], []
    for b in order:
        mine = [p for p in range(P) if buckets[p] == b]
        if reverse:
            mine.reverse()
        while mine:
            chunk, mine = mine[:bs], mine[bs:]
            sorted_ids += chunk + [P] * (bs - len(chunk))
            labels.append(b)
    padded = len(sorted_ids)
    cap = P + min(P, nb + 1) * (bs - 1) + spare
    cap = -(-cap // bs) * bs
    sorted_ids += [P] * (cap - padded)
    labels += [-1] * (cap // bs - len(labels))
    return types.SimpleNamespace(block_size=bs, sorted_pair_ids=torch.tensor(sorted_ids, dtype=torch.int32),
                                 block_bucket_ids=torch.tensor(labels, dtype=torch.int32),
                                 num_pairs_post_padded=torch.tensor([padded], dtype=torch.int32))


SLOTS = torch.tensor([0, -1, 1, 1, 0, 5, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0], dtype=torch.int32)  # slot 5: unrouted


def _mla_route(**kw):
    slots, heads = pair_slots_and_heads(SLOTS, 2)
    buckets = route_buckets(slots, group_ids=heads, groups_per_slot=2, max_loras=2).tolist()
    return _pack(buckets, 4, 4, **kw), dict(token_slots=slots, group_ids=heads, groups_per_slot=2, max_loras=2)


@pytest.mark.parametrize("kw", [dict(sentinel_first=True), dict(sentinel_first=False, reverse=True),
                                dict(sentinel_first=False, spare=9)], ids=["sentinel-first", "reversed", "spare"])
def test_check_route_accepts_any_bucket_order_pair_order_and_spare_room(kw):
    route, inputs = _mla_route(**kw)
    summary = check_route(route, block_size=4, **inputs)
    assert summary.num_pairs == 36 and summary.counts[-1] == 4  # tokens 1 and 5, two heads each
    assert summary.padded == route.num_pairs_post_padded.item()


def _edit(route, **fields):
    out = types.SimpleNamespace(**vars(route))
    for name, fn in fields.items():
        t = getattr(route, name).clone()
        setattr(out, name, fn(t) if callable(fn) else fn)
    return out


def _swap_across_blocks(t):
    # block 0 is the sentinel's (sentinel first); block 1 is bucket 0's: swap their first pairs
    t[0], t[4] = t[4].clone(), t[0].clone()
    return t


PLANTED = {
    "a pair in the wrong bucket": (dict(sorted_pair_ids=_swap_across_blocks), "is in block"),
    "a pair twice": (dict(sorted_pair_ids=lambda t: t.index_fill_(0, torch.tensor([1]), int(t[0]))),
                     "appears 2 times"),
    "an unrouted pair left out": (dict(sorted_pair_ids=lambda t: t.index_fill_(0, torch.tensor([0]), 36)),
                                  "unrouted pair"),
    "a block mislabelled": (dict(block_bucket_ids=lambda t: t.index_fill_(0, torch.tensor([1]), 2)), "labelled 2"),
    "a label past the buckets": (dict(block_bucket_ids=lambda t: t.index_fill_(0, torch.tensor([1]), 4)),
                                 "neither -1 nor"),
    "a negative entry": (dict(sorted_pair_ids=lambda t: t.index_fill_(0, torch.tensor([3]), -1)), "negative"),
    "a plan of extra blocks": (dict(num_pairs_post_padded=lambda t: t + 4), "fill"),
    "a plan off the block": (dict(num_pairs_post_padded=lambda t: t - 1), "multiple of the block"),
    "too little capacity": (dict(sorted_pair_ids=lambda t: t[:48], block_bucket_ids=lambda t: t[:12]),
                            "may need"),
    "too few labels for the grid": (dict(block_bucket_ids=lambda t: t[:-1]), "grid covers"),
}


@pytest.mark.parametrize("defect", sorted(PLANTED))
def test_check_route_names_each_planted_defect(defect):
    route, inputs = _mla_route(sentinel_first=True)
    check_route(route, block_size=4, **inputs)
    fields, message = PLANTED[defect]
    with pytest.raises(RouteError, match=message):
        check_route(_edit(route, **fields), block_size=4, **inputs)


def test_check_route_holds_the_caller_capacity_and_block_size():
    route, inputs = _mla_route(sentinel_first=False)
    have = route.sorted_pair_ids.numel()
    check_route(route, capacity=have, **inputs)
    with pytest.raises(RouteError, match="capacity"):
        check_route(route, capacity=have + 1, **inputs)
    with pytest.raises(RouteError, match="block size is 4"):
        check_route(route, block_size=16, **inputs)


# ---- the shrink, pair by pair --------------------------------------------------------------------

def _shrink_loop(x, w, out0, buckets, *, gps=1, width=1, pair_input=False, pair_to_row=None, lora_ranks=None,
                 stack=1, weight_div=1, windowed=False, k_range=None):
    """(value, written) of the shrink by loops over pairs, columns and k."""
    value, written = out0.double().clone(), torch.zeros(out0.shape, dtype=torch.bool)
    _, N, K = w.shape
    lo, hi = k_range or (0, K)
    for p, b in enumerate(buckets):
        if b < 0:
            continue
        row = int(pair_to_row[p]) if pair_to_row is not None else (p if pair_input else p // width)
        for n in range(N):
            if windowed:
                nb = N // stack
                if n >= nb * stack:
                    continue
                k0 = (n // nb) * K
            else:
                k0 = 0
                if lora_ranks is not None and n >= int(lora_ranks[b // gps]) * stack:
                    continue
            acc = 0.0
            for k in range(lo, hi):
                xv = float(x[row, k0 + k]) if 0 <= row < x.shape[0] else 0.0
                acc += xv * float(w[b // weight_div, n, k])
            value[p, n], written[p, n] = acc, True
    return value, written


SHRINK_OPTIONS = {
    "plain": dict(),
    "pair_input, weight_div": dict(pair_input=True, weight_div=2),
    "ranks, stack": dict(lora_ranks=(2, 0, 3), stack=2),
    "windowed": dict(windowed=True, stack=2),
    "windowed ragged N": dict(windowed=True, stack=3),
    "pair_to_row with holes": dict(pair_to_row=True),
    "width 2 tokens": dict(width=2),
}


def _shrink_case(name, seed):
    gen = torch.Generator().manual_seed(seed)
    opts = dict(SHRINK_OPTIONS[name])
    gps, L, K, N, P = 2, 3, 5, 7 if "ragged" in name else 6, 9
    buckets = torch.randint(-1, gps * L, (P,), generator=gen).tolist()
    if opts.get("lora_ranks"):
        opts["lora_ranks"] = torch.tensor(opts["lora_ranks"], dtype=torch.int32)
    if opts.pop("pair_to_row", False):
        opts["pair_to_row"] = torch.tensor([0, -1, 2, 9, 1, 3, 3, 100, 2], dtype=torch.int32)
    E = gps * L // opts.get("weight_div", 1)
    x = torch.randn(P, K * opts.get("stack", 1) + 1, generator=gen)
    w = torch.randn(E, N, K, generator=gen)
    out0 = torch.full((P + 1, N), float("nan"))
    return x, w, out0, buckets, gps, opts


@pytest.mark.parametrize("name", sorted(SHRINK_OPTIONS))
def test_the_shrink_reference_equals_the_pair_loop(name):
    for seed in range(3):
        x, w, out0, buckets, gps, opts = _shrink_case(name, seed)
        exp = grouped_lora_a_ref(x, w, out0, torch.tensor(buckets), groups_per_slot=gps, **opts)
        value, written = _shrink_loop(x, w, out0, buckets, gps=gps, **opts)
        assert torch.equal(exp.defined, written) and torch.equal(exp.untouched, ~written)
        assert torch.allclose(exp.value[written], value[written], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["plain", "ranks, stack", "windowed"])
def test_split_k_planes_sum_to_the_shrink_and_planes_mode_leaves_the_output(name):
    x, w, out0, buckets, gps, opts = _shrink_case(name, 4)
    b = torch.tensor(buckets)
    part0 = torch.full((3, out0.shape[0], out0.shape[1]), float("nan"))
    planes = grouped_lora_a_planes_ref(x, w, part0, b, split_k=3, groups_per_slot=gps, **opts)
    whole = grouped_lora_a_ref(x, w, out0, b, groups_per_slot=gps, **opts)
    assert split_ranges(5, 3) == [(0, 2), (2, 4), (4, 5)] and split_ranges(4, 3) == [(0, 2), (2, 4), (4, 4)]
    for s, k_range in enumerate(split_ranges(5, 3)):
        value, written = _shrink_loop(x, w, out0, buckets, gps=gps, k_range=k_range, **opts)
        assert torch.equal(planes.defined[s], written)
        assert torch.allclose(planes.value[s][written], value[written], rtol=1e-12, atol=1e-12)
    total = planes.value.nan_to_num().sum(0)
    assert torch.allclose(total[whole.defined], whole.value[whole.defined], rtol=1e-12, atol=1e-12)
    untouched = grouped_lora_a_ref(x, w, out0, b, groups_per_slot=gps, split_k=3, split_mode="planes", **opts)
    assert bool(untouched.untouched.all()) and not bool(untouched.defined.any())


# ---- the expand, pair by pair --------------------------------------------------------------------

def _expand_loop(bridge, w, dest0, buckets, *, offsets, out_offsets=None, add_inplace, zero_sentinel, gps=1, width=1,
                 pair_bridge=True, lora_ranks=None, scalings=None, weight_div=1, pair_heads=0, bridge_slices=0):
    value, count = dest0.double().clone(), torch.zeros(dest0.shape, dtype=torch.int64)
    br = bridge.double().sum(0) if bridge.dim() == 3 else bridge.double()
    R, S = w.shape[2], len(offsets) - 1
    for p, b in enumerate(buckets):
        at = (p // pair_heads, p % pair_heads) if pair_heads else (p,)
        slot = b // gps if b >= 0 else None
        rank = int(lora_ranks[slot]) if (slot is not None and lora_ranks is not None) else R
        for s in range(S):
            col = out_offsets[s] if out_offsets is not None else offsets[s]
            c0 = 0 if S == 1 else ((s % bridge_slices) if 0 < bridge_slices < S else s) * rank
            for n in range(offsets[s + 1] - offsets[s]):
                where = at + (col + n,)
                if b < 0:
                    if zero_sentinel:
                        value[where], count[where] = 0.0, count[where] + 1
                    continue
                if lora_ranks is not None and rank == 0:
                    continue
                row = p if pair_bridge else p // width
                acc = sum(float(br[row, c0 + k]) * float(w[b // weight_div, offsets[s] + n, k])
                          for k in range(min(rank, R)))
                acc *= float(scalings[slot]) if scalings is not None else 1.0
                value[where] = acc + (float(dest0[where]) if add_inplace else 0.0)
                count[where] += 1
    return value, count


EXPAND_OPTIONS = {
    "overwrite, 2-D": dict(add_inplace=False),
    "add in place, heads": dict(add_inplace=True, pair_heads=3),
    "zero sentinel": dict(add_inplace=False, zero_sentinel=True),
    "ranks with 0, scalings": dict(add_inplace=True, lora_ranks=(4, 0, 2), scalings=(1.0, 3.0, -0.5)),
    "two slices, out offsets": dict(add_inplace=False, offsets=(0, 3, 5), out_offsets=(6, 0), lora_ranks=(2, 1, 2)),
    "shared bridge blocks": dict(add_inplace=True, offsets=(0, 2, 4, 6), bridge_slices=1, lora_ranks=(4, 3, 1)),
    "split-K planes, weight_div": dict(add_inplace=False, planes=2, weight_div=2),
    "token bridge": dict(add_inplace=False, pair_bridge=False, width=3, zero_sentinel=True),
}


@pytest.mark.parametrize("name", sorted(EXPAND_OPTIONS))
def test_the_expand_reference_equals_the_pair_loop(name):
    for seed in range(3):
        gen = torch.Generator().manual_seed(seed)
        opts = dict(EXPAND_OPTIONS[name])
        opts.setdefault("offsets", (0, 5))
        opts.setdefault("zero_sentinel", False)
        planes = opts.pop("planes", 1)
        gps, L, R, P = 2, 3, 4, 9
        for key in ("lora_ranks", "scalings"):
            if key in opts:
                opts[key] = torch.tensor(opts[key], dtype=torch.int32 if key == "lora_ranks" else torch.float32)
        buckets = torch.randint(-1, gps * L, (P,), generator=gen).tolist()
        E = gps * L // opts.get("weight_div", 1)
        w = torch.randn(E, opts["offsets"][-1], R, generator=gen)
        bridge = torch.randn(*((planes,) if planes > 1 else ()), P, 3 * R, generator=gen)
        shape = (P // 3, 3, 9) if opts.get("pair_heads") else (P + 1, 9)
        dest0 = torch.randn(shape, generator=gen) if opts["add_inplace"] else torch.full(shape, float("nan"))
        exp = grouped_lora_b_ref(bridge, w, dest0, torch.tensor(buckets), groups_per_slot=gps, **opts)
        value, count = _expand_loop(bridge, w, dest0, buckets, gps=gps, **opts)
        assert torch.equal(exp.defined, count == 1) and torch.equal(exp.untouched, count == 0)
        d = exp.defined
        assert torch.allclose(exp.value[d], value[d], rtol=1e-12, atol=1e-12)


def test_mismatch_names_a_moved_untouched_element_and_an_add_that_overwrote():
    gen = torch.Generator().manual_seed(5)
    buckets = torch.tensor([0, -1, 1, 1])
    w, bridge, dest0 = torch.randn(2, 4, 3, generator=gen), torch.randn(4, 3, generator=gen), torch.randn(5, 4, generator=gen)
    exp = grouped_lora_b_ref(bridge, w, dest0, buckets, offsets=(0, 4), add_inplace=True, zero_sentinel=False)
    good = exp.value.clone()
    assert exp.mismatch(good, rtol=1e-6) is None
    moved = good.clone()
    moved[1, 0] += 1.0  # the unrouted pair's row
    assert "should be untouched" in exp.mismatch(moved, rtol=1e-6)
    overwrite = grouped_lora_b_ref(bridge, w, dest0, buckets, offsets=(0, 4), add_inplace=False,
                                   zero_sentinel=False).value
    assert "defined elements off" in exp.mismatch(overwrite, rtol=1e-6)


def test_which_pairs_are_written_follows_zero_sentinel_and_rank_zero():
    for add, zero, ranks in itertools.product((False, True), repeat=3):
        buckets = torch.tensor([0, -1, 1])
        exp = grouped_lora_b_ref(torch.ones(3, 2), torch.ones(2, 2, 2), torch.zeros(3, 2), buckets, offsets=(0, 2),
                                 add_inplace=add, zero_sentinel=zero,
                                 lora_ranks=torch.tensor([2, 0]) if ranks else None)
        assert isinstance(exp, Expected)
        assert exp.defined[0].all() and bool(exp.defined[1].all()) == zero
        assert bool(exp.untouched[2].all()) == ranks
