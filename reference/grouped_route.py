"""The contract of SGLang's aligned pair routes (``build_route``, 0.5.23+), in pure torch.

Note [Aligned routes]
---------------------
SGLang's ``triton_v2`` LoRA kernels (``grouped_lora_a`` / ``grouped_lora_b``) do not read segments:
they read a *route* that groups rows ("pairs") by bucket.  What a route means, read from the 0.5.23
files ``sglang/kernels/ops/lora/common/{routing,route_view}.py`` and checked against all three of its
builders (one-program "small" builder, histogram/scan/place "large" builder, and the pure-torch
block aligner behind the middle sizes):

* **pairs**: ``P = token_slots.numel()`` without ``group_ids``, else ``group_ids.numel()`` with
  ``width = group_ids.shape[1]``; pair ``p`` belongs to token ``p // width``.
* **bucket of a pair**: ``slot = token_slots[p // width]``; the pair is *unrouted* (bucket ``-1``)
  unless ``0 <= slot < max_loras``; with groups it is also unrouted for a negative group; with
  ``groups_per_slot == 1`` every non-negative group folds into its slot (bucket ``slot``), otherwise a
  group ``>= groups_per_slot`` is unrouted and the bucket is ``slot * groups_per_slot + group``.  The
  dense MLA correction routes (token, head) pairs with ``group = head`` and ``groups_per_slot = H``:
  bucket ``slot * H + head``.  There are ``groups_per_slot * max_loras`` route buckets.
* **blocks**: ``sorted_pair_ids`` is cut into blocks of ``block_size`` entries; the first
  ``T = num_pairs_post_padded[0]`` entries (``T`` a multiple of the block) are the plan, and
  consumers read nothing past them.  Block ``j < T / block_size`` holds pairs of one bucket, its label
  ``block_bucket_ids[j]`` (``-1``: the sentinel bucket of the unrouted pairs).  An entry ``>= P`` is
  padding (every builder writes exactly ``P``); a bucket's pairs fill ``ceil(count / block_size)``
  blocks, so ``T`` is the sum of those over the buckets, the sentinel included.
* **unrouted pairs are present**: every pair, routed or not, appears exactly once in the plan; the
  unrouted ones in blocks labelled ``-1`` (the expand's ``zero_sentinel`` clears exactly those rows).
  The small builder puts the sentinel's blocks first, the others last: the order of buckets across
  blocks, and of pairs inside a bucket, is *not* part of the contract.
* **capacity**: the kernels' grids cover ``cdiv(len(sorted_pair_ids), block_size)`` blocks and read a
  label for each, so ``block_bucket_ids`` has at least that many entries; ``sorted_pair_ids`` holds
  the worst case of any assignment of the ``P`` pairs, ``P + min(P, buckets + 1) * (block_size - 1)``
  (so a graph replay with other slots fits), and at least ``capacity`` rounded up to a block where
  the caller passed ``capacity``.

:func:`route_buckets` gives the bucket of every pair; :func:`check_route` validates a route object
(anything with ``sorted_pair_ids``, ``block_bucket_ids``, ``num_pairs_post_padded`` and
``block_size``) against it and raises :class:`RouteError` naming the first broken rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

__all__ = ["RouteError", "RouteSummary", "check_route", "min_route_capacity", "pair_slots_and_heads",
           "route_buckets"]


class RouteError(AssertionError):
    """A route that breaks the contract of Note [Aligned routes]."""


@dataclass(frozen=True)
class RouteSummary:
    """What :func:`check_route` found in a valid route."""

    num_pairs: int
    padded: int  # T: the plan's length
    counts: dict  # bucket -> pairs (the sentinel -1 included when it has any)


def _cpu_long(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu", torch.int64).reshape(-1)


def route_buckets(token_slots: torch.Tensor, *, group_ids: Optional[torch.Tensor] = None, groups_per_slot: int = 1,
                  max_loras: int) -> torch.Tensor:
    """int64 ``(P,)``: the bucket of every pair, ``-1`` for an unrouted one (Note [Aligned routes])."""
    slots = _cpu_long(token_slots)
    if group_ids is None:
        live = (slots >= 0) & (slots < max_loras)
        return torch.where(live, slots, torch.full_like(slots, -1))
    if group_ids.dim() != 2:
        raise ValueError(f"group_ids is [tokens, width]; got shape {tuple(group_ids.shape)}")
    width = int(group_ids.shape[1])
    groups = _cpu_long(group_ids)
    pair_slot = slots.repeat_interleave(width) if width else slots[:0]
    if pair_slot.numel() != groups.numel():
        raise ValueError(f"group_ids has {groups.numel()} pairs but token_slots {slots.numel()} tokens of width {width}")
    live = (pair_slot >= 0) & (pair_slot < max_loras) & (groups >= 0)
    if groups_per_slot == 1:
        buckets = pair_slot
    else:
        live &= groups < groups_per_slot
        buckets = pair_slot * groups_per_slot + groups
    return torch.where(live, buckets, torch.full_like(buckets, -1))


def pair_slots_and_heads(token_slots: torch.Tensor, heads: int) -> tuple:
    """The (token, head) pair inputs of the dense MLA route: per-pair slots ``(T * heads,)`` and head
    ids ``(T * heads, 1)``, int32, on ``token_slots``'s device (pair ``t * heads + h``)."""
    tokens = token_slots.numel()
    slots = token_slots.reshape(tokens, 1).expand(tokens, heads).reshape(-1).to(torch.int32).contiguous()
    ids = torch.arange(heads, dtype=torch.int32, device=token_slots.device).repeat(tokens).reshape(-1, 1)
    return slots, ids


def min_route_capacity(num_pairs: int, block_size: int, num_route_buckets: int) -> int:
    """The entries a route of ``num_pairs`` pairs must hold for any assignment of them to the
    ``num_route_buckets`` buckets and the sentinel (Note [Aligned routes])."""
    if num_pairs == 0:
        return 0
    return num_pairs + min(num_pairs, num_route_buckets + 1) * (block_size - 1)


def _fail(message: str) -> None:
    raise RouteError(message)


def _check_sizes(sorted_ids, labels, padded: int, block_size: int, num_pairs: int, num_route_buckets: int,
                 capacity: Optional[int]) -> None:
    if padded < 0 or padded % block_size:
        _fail(f"num_pairs_post_padded is {padded}, not a non-negative multiple of the block size {block_size}")
    if padded > sorted_ids.numel():
        _fail(f"num_pairs_post_padded is {padded} but sorted_pair_ids holds only {sorted_ids.numel()} entries")
    grid = -(-sorted_ids.numel() // block_size)
    if labels.numel() < grid:
        _fail(f"block_bucket_ids has {labels.numel()} labels but the kernels' grid covers {grid} blocks of "
              f"sorted_pair_ids ({sorted_ids.numel()} entries)")
    need = min_route_capacity(num_pairs, block_size, num_route_buckets)
    if sorted_ids.numel() < need:
        _fail(f"sorted_pair_ids holds {sorted_ids.numel()} entries, fewer than the {need} that {num_pairs} pairs "
              f"over {num_route_buckets} buckets and the sentinel may need")
    if capacity is not None:
        want = -(-capacity // block_size) * block_size
        if sorted_ids.numel() < want:
            _fail(f"capacity {capacity} asks for at least {want} entries; sorted_pair_ids holds {sorted_ids.numel()}")


def _check_placement(plan: torch.Tensor, labels: torch.Tensor, buckets: torch.Tensor, block_size: int,
                     num_route_buckets: int) -> None:
    num_pairs = buckets.numel()
    bad_label = (labels < -1) | (labels >= num_route_buckets)
    if bool(bad_label.any()):
        j = int(bad_label.nonzero()[0])
        _fail(f"block {j} is labelled {int(labels[j])}, neither -1 nor one of the {num_route_buckets} buckets")
    if bool((plan < 0).any()):
        i = int((plan < 0).nonzero()[0])
        _fail(f"entry {i} of the plan is {int(plan[i])}: negative (a consumer's `pair < P` test lets it through)")
    real = plan < num_pairs
    pairs = plan[real]
    seen = torch.bincount(pairs, minlength=num_pairs) if pairs.numel() else torch.zeros(num_pairs, dtype=torch.int64)
    if bool((seen > 1).any()):
        p = int((seen > 1).nonzero()[0])
        _fail(f"pair {p} appears {int(seen[p])} times in the plan")
    if bool((seen == 0).any()):
        p = int((seen == 0).nonzero()[0])
        kind = "unrouted pair" if int(buckets[p]) < 0 else f"pair of bucket {int(buckets[p])}"
        _fail(f"{kind} {p} is not in the plan (every pair appears once; unrouted ones in blocks labelled -1)")
    block_of = torch.arange(plan.numel()) // block_size
    got = labels[block_of[real]]
    want = buckets[pairs]
    wrong = got != want
    if bool(wrong.any()):
        i = int(wrong.nonzero()[0])
        _fail(f"pair {int(pairs[i])} (bucket {int(want[i])}) is in block {int(block_of[real][i])}, labelled "
              f"{int(got[i])}")


def check_route(route, *, token_slots: torch.Tensor, group_ids: Optional[torch.Tensor] = None,
                groups_per_slot: int = 1, max_loras: int, block_size: Optional[int] = None,
                capacity: Optional[int] = None) -> RouteSummary:
    """Validate an aligned route against Note [Aligned routes]; :class:`RouteError` on the first broken
    rule, else a :class:`RouteSummary`."""
    bs = int(route.block_size)
    if block_size is not None and bs != block_size:
        _fail(f"the route's block size is {bs}, not the {block_size} asked for")
    buckets = route_buckets(token_slots, group_ids=group_ids, groups_per_slot=groups_per_slot, max_loras=max_loras)
    num_pairs = buckets.numel()
    num_route_buckets = groups_per_slot * max_loras
    sorted_ids = _cpu_long(route.sorted_pair_ids)
    labels = _cpu_long(route.block_bucket_ids)
    padded = int(_cpu_long(route.num_pairs_post_padded)[0])
    _check_sizes(sorted_ids, labels, padded, bs, num_pairs, num_route_buckets, capacity)
    _check_placement(sorted_ids[:padded], labels[: padded // bs], buckets, bs, num_route_buckets)
    keys, counts = torch.unique(buckets, return_counts=True)
    packed = int(((counts + bs - 1) // bs).sum()) * bs
    if padded != packed:
        _fail(f"num_pairs_post_padded is {padded}; the buckets' pairs fill {packed // bs} blocks ({packed} entries)")
    return RouteSummary(num_pairs, padded, {int(k): int(c) for k, c in zip(keys, counts)})
