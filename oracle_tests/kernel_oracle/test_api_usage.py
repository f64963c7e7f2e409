"""assert_matches names arguments in each other's positions, and a failure shows its message first."""

from __future__ import annotations

import re

import pytest

import kernel_oracle
from kernel_oracle.harness.problem_lora import LoRAProblem
from kernel_oracle.reference import lora as ref_lora

pytest_plugins = ["pytester"]

# two LoRA slots, ten token rows: a weight buffer has 2 rows, an activation 10
LORA = dict(seg_lens=(5, 0, 3), weight_indices=(0, 1, 1), lora_ranks=(16, 4), scalings=(1.0, -0.5), permute=True,
            extra_rows=2, seed=3)


def _never_called(*args, **kwargs):
    raise AssertionError("the kernel ran although its arguments are in the wrong positions")


@pytest.mark.parametrize("op, first, second", [("step_a_q", 0, 1), ("step_b_q", 0, 1), ("step_a_v", 0, 1)])
def test_swapped_weight_and_activation_are_named_before_the_kernel_runs(op, first, second):
    args = list(kernel_oracle.materialize(LoRAProblem(op=op, **LORA)).args)
    act_shape, buf_shape = tuple(args[first].shape), tuple(args[second].shape)
    args[first], args[second] = args[second], args[first]
    with pytest.raises(ValueError) as info:
        kernel_oracle.assert_matches(op, _never_called, *args)
    msg = str(info.value)
    assert msg.startswith(f"assert_matches({op!r}, fn, ...): ")
    assert f"(argument {second + 1}) has shape {act_shape}" in msg
    assert "is (L, ...) with L = 2 LoRA slots" in msg
    assert f"(argument {first + 1}, shape {buf_shape}) has L rows" in msg and "swapped?" in msg
    assert "\n" not in msg


def test_a_malformed_buffer_alone_is_judged_not_called_swapped():
    args = list(kernel_oracle.materialize(LoRAProblem(op="step_a_q", **LORA)).args)
    args[1] = args[1][:1].clone()  # one slot where the batch info routes two: the contract check's case
    try:
        kernel_oracle.assert_matches("step_a_q", ref_lora.step_a_q_fwd, *args)
    except ValueError as exc:
        assert "swapped" not in str(exc)
    except AssertionError:
        pass


def test_a_failing_assert_matches_shows_the_message_not_api_source(pytester):
    pytester.makepyfile(test_user='''
        import kernel_oracle
        from kernel_oracle.harness.problem_lora import LoRAProblem
        from kernel_oracle.reference import lora as ref_lora

        def buggy(q_nope, B_buf, batch_info, full_k):
            out = ref_lora.step_a_q_fwd(q_nope, B_buf, batch_info, full_k)
            return out * 2

        def test_kernel():
            call = kernel_oracle.materialize(LoRAProblem(op="step_a_q", seg_lens=(5, 3), weight_indices=(0, 1),
                                                         lora_ranks=(16, 4), scalings=(1.0, -0.5), seed=3))
            kernel_oracle.assert_matches("step_a_q", buggy, *call.args, repro="")
    ''')
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "Tensor-likes are not close!" in text
    assert not re.search(r"kernel_oracle[/\\]api\.py:\d+", text), text
    assert "verdict = _check(op, fn, call" not in text and "raise AssertionError(\"\\n\".join(lines))" not in text
