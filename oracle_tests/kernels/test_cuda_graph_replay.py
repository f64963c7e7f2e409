"""CUDA graphs as SGLang uses them (issue 12.3; docs/semantics.md#cuda-graph-host-ints): capture once, replay other batches.

SGLang captures a decode graph with one batch and replays it for later batches by writing their batch
info into the *same device tensors* (``seg_indptr``, ``seg_lens``, ``weight_indices``, ``lora_ranks``,
``scalings``, padded to the graph's segment count) and their activations into the same buffers; the
host ints ``bs`` / ``num_segments`` keep their capture-time values and ``max_len`` is an upper bound.
Here a graph is captured with one batch (3 segments of 8 padded, ``max_len`` bound 40, 64 token rows)
and replayed with others: more segments up to the padded count, rotated slots, other lengths within the
bound, fewer segments.  Every replay is judged against the oracle of the batch it replays
(:func:`harness.check.judge`: the tolerance rule, and unrouted rows bit-identical).

Expected: our kernels (``triton``) and ``sglang==0.5.23`` pass every replay; ``sglang==0.5.12``
launches ``bs`` programs guarded by ``num_segments`` and skips the segments a replay adds (PR #28371).

On the CPU there is no graph: the same buffers are refilled and the entry point called again
(``graph=False``), which checks this file's plumbing and the stale host ints under the interpreter.
"""

from __future__ import annotations

import inspect

import pytest
import torch

from kernel_oracle.fuzz.targets import resolve_target
from kernel_oracle.harness.check import Case, Observed, expected_outcome, judge
from kernel_oracle.harness.device import interpreting
from kernel_oracle.harness.fresh_outputs import nan_filled_allocations
from kernel_oracle.harness.problems import batch_info_of, materialize
from kernel_oracle.harness.problem_lora import LoRAProblem

from oracle_tests._sglang_releases import release_target
from oracle_tests.conftest import HAS_CUDA

PAD = 8  # the graph's padded segment count
MAX_LEN = 40  # the capture-time max_len: an upper bound on every replayed segment
ROWS = 64  # token rows of the graph's buffers (routed rows + unrouted padding rows)
CAPTURE = dict(seg_lens=(5, 12, 7), weight_indices=(0, 1, 2))
# replayed batches: name -> (seg_lens, weight_indices); host ints stay the capture's (3, 3, MAX_LEN)
REPLAYS = {
    "more segments": ((1, 9, 3, 8, 2, 7, 5, 6), (0, 1, 2, 0, 1, 2, 0, 1)),
    "rotated slots": ((5, 12, 7), (1, 2, 0)),
    "other lengths within the bound": ((40, 0, 17, 1), (2, 0, 1, 1)),
    "fewer segments": ((33,), (1,)),
}
SEGMENT_DROPPING = {"more segments", "other lengths within the bound"}  # replays with more than 3 segments
BUGGY = {"sglang==0.5.12": "PR #28371: programs and guards from the stale host ints bs / num_segments"}
SPECS = ["triton", "sglang==0.5.23", "sglang==0.5.12"]
OPS = ["step_a_q", "step_b_q", "step_a_v", "step_b_v", "q_side_fused", "v_side_fused"]
DIMS = {"cuda": dict(H=4, qk=48, vd=40, C=64, R=16), "cpu": dict(H=2, qk=16, vd=16, C=32, R=16)}


def _problem(op: str, dtype: str, seg_lens, slots, device: str) -> LoRAProblem:
    return LoRAProblem(op=op, seg_lens=tuple(seg_lens), weight_indices=tuple(slots), lora_ranks=(16, 8, 0),
                       scalings=(1.0, -0.5, 2.0), extra_rows=ROWS - sum(seg_lens), cuda_graph_pad_to=PAD,
                       stale_host_ints=(len(CAPTURE["seg_lens"]), len(CAPTURE["seg_lens"]), MAX_LEN), dtype=dtype,
                       seed=sum(seg_lens) * 31 + len(seg_lens), **DIMS[device])


_BATCH_TENSORS = ("seg_indptr", "seg_lens", "weight_indices", "lora_ranks", "scalings", "permutation")


def _load(static, call) -> None:
    """Write ``call``'s batch into the graph's buffers, in place (what SGLang does before a replay)."""
    for mine, new in zip(static.args, call.args):
        if isinstance(mine, torch.Tensor):
            mine.copy_(new)
        elif hasattr(mine, "seg_indptr"):  # the batch info: device tensors in place, host ints untouched
            for name in _BATCH_TENSORS:
                t = getattr(mine, name, None)
                if t is not None:
                    t.copy_(getattr(new, name))


def replay_verdicts(target, op: str, dtype: str, device: str, *, graph: bool) -> dict:
    """name -> Verdict of each replayed batch (module docstring); ``graph=False`` calls again instead."""
    fn = target.entry(op)
    kw = {"strict": False} if "strict" in inspect.signature(fn).parameters else {}  # no host sync in a capture
    static = materialize(_problem(op, dtype, CAPTURE["seg_lens"], CAPTURE["weight_indices"], device), device)
    host_ints = (batch_info_of(static).bs, batch_info_of(static).num_segments, batch_info_of(static).max_len)
    # rows a kernel leaves unwritten in its own torch.empty output are NaN, never an earlier call's answer
    with nan_filled_allocations():
        out = fn(*static.args, **static.kwargs, **kw)  # compiles outside the capture
    g = None
    if graph:
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g), nan_filled_allocations():
            out = fn(*static.args, **static.kwargs, **kw)
    verdicts = {}
    for name, (seg_lens, slots) in REPLAYS.items():
        p = _problem(op, dtype, seg_lens, slots, device)
        call = materialize(p, device)
        _load(static, call)
        if g is not None:
            g.replay()
            torch.cuda.synchronize()
        else:
            with nan_filled_allocations():
                out = fn(*static.args, **static.kwargs, **kw)
        bi = batch_info_of(static)
        assert (bi.bs, bi.num_segments, bi.max_len) == host_ints  # stale, as in SGLang
        output = static.args[static.inplace] if static.inplace is not None else out
        case = Case(p)
        expected = expected_outcome(case, device, precision=target.precision_for(op), call=call)
        verdicts[name] = judge(case, expected, Observed("ok", output=output.detach().clone()), call=call, device=device)
    return verdicts


def _target(spec: str, device: str):
    t = release_target(spec, device) if spec.startswith("sglang") else resolve_target(spec, device)
    if not t.available:
        pytest.skip(f"target {spec!r} is unavailable here: {t.reason}")
    return t


def _assert_expected(spec: str, op: str, verdicts: dict) -> None:
    bad = {name: v for name, v in verdicts.items() if not v.ok}
    if spec in BUGGY:
        assert set(bad) == SEGMENT_DROPPING and all(v.kind == "mismatch" for v in bad.values()), (
            f"{spec} {op}: expected mismatches exactly on the replays with added segments ({BUGGY[spec]}); "
            f"failed: { {n: v.message.splitlines()[0] if v.message else v.kind for n, v in bad.items()} }")
    else:
        assert not bad, "\n\n".join(f"{spec} {op} replay [{n}]: {v.kind}: {v.message}" for n, v in bad.items())


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA or interpreting(),
                    reason="CUDA graph capture and replay need a CUDA device" if not HAS_CUDA else
                    "the Triton interpreter cannot run inside a CUDA graph capture (TRITON_INTERPRET=1 here)")
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("spec", SPECS)
def test_graph_replays_match_the_oracle(spec, op, dtype):
    target = _target(spec, "cuda")
    if not target.has(op):
        pytest.skip(f"{spec} has no {op} entry point: {target.notes.get(op, 'not provided')}")
    _assert_expected(spec, op, replay_verdicts(target, op, dtype, "cuda", graph=True))


@pytest.mark.skipif(HAS_CUDA, reason="the CPU stand-in of the graph test; on a GPU the real graph runs")
@pytest.mark.parametrize("spec, op", [("triton", "step_b_q"), ("triton", "step_a_v"), ("sglang==0.5.23", "step_a_q"),
                                      ("sglang==0.5.12", "step_a_q")])
def test_replays_without_a_graph_on_the_cpu(spec, op):
    """Same buffers refilled, entry point called again: the plumbing of this file, the stale host ints,
    and 0.5.12's skipped segments are visible without a GPU."""
    target = _target(spec, "cpu")
    _assert_expected(spec, op, replay_verdicts(target, op, "float32", "cpu", graph=False))
