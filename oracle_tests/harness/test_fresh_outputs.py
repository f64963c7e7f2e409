"""harness.fresh_outputs: rows a kernel we do not own leaves unwritten are NaN, never a stale answer."""

from __future__ import annotations

import pytest
import torch

from kernel_oracle.harness.check import Case, check_case
from kernel_oracle.harness.fresh_outputs import nan_filled_allocations
from kernel_oracle.harness.problem_lora import LoRAProblem
from kernel_oracle.harness.targets import Target
from kernel_oracle.reference.lora import step_a_q_fwd


def test_uninitialised_floating_allocations_are_nan_and_the_factories_come_back():
    factories = (torch.empty, torch.empty_like, torch.empty_strided, torch.Tensor.new_empty)
    like = torch.ones(3, 4)
    with nan_filled_allocations():
        made = [torch.empty(3, 4), torch.empty_like(like), torch.empty_strided((3, 4), (4, 1)), like.new_empty(3, 4),
                torch.empty(2, dtype=torch.complex64)]
        ints = torch.empty(5, dtype=torch.int32)
        assert torch.zeros(2).eq(0).all()  # initialised factories keep their values
    for t in made:
        assert torch.isnan(t).all(), t
    assert ints.dtype == torch.int32  # integer tensors are left as allocated
    assert (torch.empty, torch.empty_like, torch.empty_strided, torch.Tensor.new_empty) == factories


def test_the_factories_come_back_after_an_exception():
    before = torch.empty
    with pytest.raises(RuntimeError, match="inside"):
        with nan_filled_allocations():
            raise RuntimeError("inside")
    assert torch.empty is before


_FREED: list = []  # what a caching allocator hands back: the block of the last freed tensor of a size


def _skips_the_last_row(q_nope, B_buf, batch_info, full_K_per_head, **kw):
    """step_a_q computed right, freed, then copied into a fresh ``torch.empty`` output except the
    last routed row."""
    right = step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head)
    _FREED[:] = [right.clone()]
    out = torch.empty(right.shape, dtype=right.dtype)
    last = int(batch_info.seg_indptr[batch_info.num_segments or batch_info.bs]) - 1
    out[:last] = right[:last]
    out[last + 1:] = right[last + 1:]
    return out


def test_a_row_left_unwritten_in_an_own_empty_output_is_a_mismatch(monkeypatch):
    """An allocator that returns the freed block of the right answer (CUDA's caching allocator does, and
    so does the CPU's at some sizes: the graph-replay test once passed a row-skipping kernel that way):
    without the patch the skipped row holds the right value and the check passes; with it, NaN."""
    real_empty = torch.empty

    def stale_empty(*size, **kw):
        shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)) else size
        if _FREED and tuple(_FREED[0].shape) == shape:
            return _FREED.pop().clone()
        return real_empty(*size, **kw)

    monkeypatch.setattr(torch, "empty", stale_empty)
    case = Case(LoRAProblem(op="step_a_q", seg_lens=(5, 3), weight_indices=(0, 1), lora_ranks=(4, 4),
                            scalings=(1.0, 1.0), H=2, qk=16, vd=16, C=32, R=16, dtype="float32", seed=3))
    target = Target("skips-a-row", {"step_a_q": _skips_the_last_row}, strict=False)
    verdict = check_case(target, case, "cpu")
    assert not verdict.ok and verdict.kind == "mismatch", verdict
