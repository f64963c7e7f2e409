"""Redundant metadata that disagrees within the contract (docs/semantics.md#fields-that-may-disagree): the
reference reads the field upstream reads, so a valid batch whose copies disagree has the output of the
same batch with agreeing copies; strict validation rejects only what upstream would get wrong."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from kernel_oracle.harness.opinfo import OP_DB
from kernel_oracle.harness.problem_lora import LoRAProblem, materialize_lora
from kernel_oracle.reference.batch_info import make_lora_batch_info
from kernel_oracle.reference.contracts import expected_message

BASE = LoRAProblem(op="step_b_v", seg_lens=(3, 0, 5), weight_indices=(0, 1, 1), lora_ranks=(16, 8),
                   scalings=(1.0, -0.5), extra_rows=2, seed=3)

# (what disagrees, the problem's fields): every one a valid batch with BASE's routing
DISAGREEING = [
    ("more segments than requests (bs 1 < 3)", {"eager_counts": (1, 3)}),
    ("fewer segments than requests (bs 5 > 3: two stale segments past them)", {"eager_counts": (5, 3)}),
    ("num_segments 0: bs is read", {"eager_counts": (3, 0)}),
    ("max_len 16 above the longest segment (5)", {"max_len_slack": 11}),
    ("seg_lens in a stale order", {"seg_lens_drift": "rolled"}),
    ("seg_lens one longer each, no max_len", {"seg_lens_drift": "longer", "with_max_len": False}),
    ("seg_lens one shorter each beside max_len", {"seg_lens_drift": "shorter"}),
    ("all at once", {"eager_counts": (7, 3), "max_len_slack": 3, "seg_lens_drift": "rolled"}),
]


@pytest.mark.parametrize("op", ["step_a_q", "step_b_v", "v_side_fused"])
@pytest.mark.parametrize("what,fields", DISAGREEING, ids=[w for w, _ in DISAGREEING])
def test_disagreeing_copies_give_the_agreeing_output(op, what, fields):
    agree = dataclasses.replace(BASE, op=op)
    oracle = OP_DB[op].oracle
    want = oracle(*materialize_lora(agree, "cpu").args)
    got = oracle(*materialize_lora(dataclasses.replace(agree, **fields), "cpu").args)  # strict (the default)
    assert torch.equal(got.defined, want.defined)
    assert torch.equal(got.value[got.defined], want.value[want.defined])


def test_the_copies_do_disagree():
    """The builder really writes disagreeing copies (else the test above would prove nothing)."""
    bi = make_lora_batch_info((3, 0, 5), (0, 1, 1), (16, 8), (1.0, 1.0), eager_counts=(5, 3), max_len_slack=11,
                              seg_lens_drift="rolled")
    assert (bi.bs, bi.num_segments, bi.max_len) == (5, 3, 16)
    assert bi.seg_indptr.tolist() == [0, 3, 3, 8, 9, 10]  # two stale one-row segments past the real three
    assert bi.seg_lens.tolist() == [5, 3, 0, 1, 1]


def test_seg_lens_that_miss_a_segment_without_max_len_are_rejected():
    """max_len None: max(seg_lens) is the tile count, and seg_lens (3, 3) would drop segment 1's fourth row."""
    call = materialize_lora(LoRAProblem(op="step_a_q", seg_lens=(3, 4), weight_indices=(0, 1), lora_ranks=(16, 8),
                                        scalings=(1.0, 0.5), with_max_len=False), "cpu")
    call.args[2].seg_lens = torch.tensor([3, 3], dtype=torch.int32)
    msg = expected_message("lora.strict.seg_lens_mismatch", index=1, value=3, next_index=2, expected=4, longest=3)
    with pytest.raises(ValueError) as info:
        OP_DB["step_a_q"].oracle(*call.args)
    assert str(info.value) == msg


@pytest.mark.parametrize("kwargs,match", [
    ({"eager_counts": (2, 2)}, r"eager_counts=\(2, 2\) process num_segments or bs = 2 segments, but the batch has 3"),
    ({"eager_counts": (3, -1)}, r"eager_counts=\(3, -1\)"),
    ({"eager_counts": (3, 3), "cuda_graph_pad_to": 4}, "eager_counts describe eager mode"),
    ({"seg_lens_drift": "shorter", "with_max_len": False}, "seg_lens_drift='shorter' needs max_len"),
    ({"seg_lens_drift": "sideways"}, "seg_lens_drift='sideways' is unknown"),
    ({"max_len_slack": -1}, "max_len_slack=-1"),
])
def test_builder_names_the_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_lora_batch_info((3, 0, 5), (0, 1, 1), (16, 8), (1.0, 1.0), **kwargs)


# ---- a replayed CUDA graph whose padded tail holds an earlier batch's segments ----------------------------------

def _tail_problem(op: str) -> "LoRAProblem":
    from kernel_oracle.harness.problem_lora import LoRAProblem

    return LoRAProblem(op=op, seg_lens=(3, 2), weight_indices=(1, 0), lora_ranks=(8, 8), scalings=(1.0, 0.5), R=8,
                       cuda_graph_pad_to=4, graph_tail=True, extra_rows=2, stale_host_ints=(1, 1, 3), seed=3)


def test_the_stale_tail_routes_padding_rows_only():
    from kernel_oracle.harness.problems import batch_info_of, materialize

    p = _tail_problem("step_b_q")
    bi = batch_info_of(materialize(p))
    assert bi.seg_indptr.tolist() == [0, 3, 5, 6, 7] and bi.weight_indices.tolist() == [1, 0, 0, 1]
    assert list(p.tail_rows) == [5, 6]


def test_a_kernel_that_moves_a_stale_segment_onto_a_live_row_fails_one_that_skips_the_tail_passes():
    from kernel_oracle.harness.check import Case, check_case
    from kernel_oracle.harness.targets import Target
    from kernel_oracle.reference import lora

    def skips_tail(q_lora_a, A_buf, bi, base):  # processes the live segments only: right on every defined row
        live = copy.copy(bi)
        live.use_cuda_graph, live.bs, live.num_segments = False, 2, 2
        return lora.step_b_q_fwd(q_lora_a, A_buf, live, base)

    def shifts_tail(q_lora_a, A_buf, bi, base):  # the tail's segments land on rows 0 and 1: live rows change
        out = skips_tail(q_lora_a, A_buf, bi, base)
        moved = copy.copy(bi)
        moved.use_cuda_graph, moved.bs, moved.num_segments = False, 2, 2
        moved.seg_indptr = torch.tensor([0, 1, 2], dtype=torch.int32)
        moved.weight_indices = bi.weight_indices[2:]
        return lora.step_b_q_fwd(q_lora_a, A_buf, moved, out)

    case = Case(_tail_problem("step_b_q"))
    assert check_case(Target("skips", {"step_b_q": skips_tail}, strict=False), case, "cpu").ok
    bad = check_case(Target("shifts", {"step_b_q": shifts_tail}, strict=False), case, "cpu")
    assert not bad.ok and bad.kind == "mismatch", bad
