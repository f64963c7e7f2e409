"""Strict validation of data and arguments: dtypes, layouts, and argument errors that name their field.

The contract rows themselves run through ``test_contracts.py`` (OpInfo error inputs); this module
covers what a user passes by hand -- int8 or bool attention inputs, an ``expand``-ed or transposed
q, ``softmax_scale="x"``, ``max_seqlen=None``, a segment length beyond int32 -- on the reference and
on our Triton kernels, which must raise the same exception with the same text (they share the
checks through the reference).  Upstream checks still come first, and inputs that upstream answers
with a bare Python error keep that error's type (the fuzzer compares types there), with a message
that names the field and its value.
"""

from __future__ import annotations

import copy
import re

import pytest
import torch

from kernel_oracle.fuzz.targets import resolve_target
from kernel_oracle.harness.check import Case, expected_outcome
from kernel_oracle.harness.mutations import Mutation
from kernel_oracle.harness.problems import batch_info_of, materialize
from kernel_oracle.harness.problem_lora import LoRAProblem
from kernel_oracle.harness.problem_vision import VisionProblem
from kernel_oracle.reference._helpers import describe_layout, describe_tensor
from kernel_oracle.reference.batch_info import make_lora_batch_info
from kernel_oracle.reference.contracts import expected_message

from oracle_tests.conftest import DEVICE

TARGETS = ("reference", "triton")


def _entry(target: str, op: str, device: str = "cpu"):
    t = resolve_target(target, device)
    assert t.available, t.reason
    return t.entry(op)


def _vision_call(path: str = "kwargs", device: str = "cpu"):
    """Sequences (3, 4): q, k, v (7, 2, 16), 32 elements per token.  Validation tests use CPU tensors
    on every machine (nothing runs); tests that run a kernel pass the machine's DEVICE."""
    return materialize(VisionProblem(lengths=(3, 4), seed=1, path=path), device)


def _raises(fn, *args, **kwargs) -> BaseException:
    with pytest.raises(Exception) as info:
        fn(*args, **kwargs)
    return info.value


# ---- vision: dtypes and layouts ------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [torch.int8, torch.bool, torch.int32])
def test_non_float_attention_inputs_are_rejected(target, dtype):
    c = _vision_call()
    q, k, v = (x.to(dtype) for x in c.args[:3])
    exc = _raises(_entry(target, "vision"), q, k, v, *c.args[3:], **c.kwargs)
    assert type(exc) is ValueError
    assert str(exc) == expected_message(
        "vision.strict.metadata_tensor", field="q",
        expected="a floating-point tensor (float16, bfloat16, float32 or float64)", got=describe_tensor(q),
        fix="pass q, k and v as floating-point tensors, e.g. q.to(torch.float16)")


@pytest.mark.parametrize("target", TARGETS)
def test_stride0_q_names_its_layout(target):
    """Every token of q aliases token 0: today's ZeroDivisionError becomes a layout error."""
    c = _vision_call()
    q = c.args[0][:1].expand_as(c.args[0])
    exc = _raises(_entry(target, "vision"), q, *c.args[1:], **c.kwargs)
    assert type(exc) is ValueError, f"{type(exc).__name__}: {exc}"
    assert str(exc) == expected_message("vision.strict.operand_layout", field="q", got=describe_layout(q),
                                        why="dimension 0 (size 7) has stride 0, so its 7 entries share memory")
    assert "strides (0, 16, 1)" in str(exc)


@pytest.mark.parametrize("target", TARGETS)
def test_transposed_q_is_blamed_on_its_stride(target):
    """q laid out head-major (token stride 16): the error names the stride, not an offset overrun."""
    c = _vision_call()
    q = c.args[0].transpose(0, 1).contiguous().transpose(0, 1)
    assert torch.equal(q, c.args[0]) and q.stride() == (16, 112, 1)
    exc = _raises(_entry(target, "vision"), q, *c.args[1:], **c.kwargs)
    assert type(exc) is ValueError
    assert "runs past" not in str(exc)
    assert str(exc).startswith("q is a float32 tensor of shape (7, 2, 16) on cpu with strides (16, 112, 1): "
                               "one token spans 128 elements but the token stride is 16")


def test_overlapping_heads_are_rejected():
    """Heads overlapping inside a token (head stride 8 < head dim 16): a general overlap, not stride 0."""
    c = _vision_call()
    buf = torch.randn(7 * 32)
    k = buf.as_strided((7, 2, 16), (32, 8, 1))
    exc = _raises(_entry("reference", "vision"), c.args[0], k, *c.args[2:], **c.kwargs)
    assert str(exc).startswith("k is a float32 tensor of shape (7, 2, 16) on cpu with strides (32, 8, 1): "
                               "dimension 1 (size 2, stride 8) steps inside the 16 elements")


def test_interleaved_v_view_is_accepted():
    """v as a strided view into an interleaved qkv buffer (token stride 3*H*D) is a valid layout."""
    c = materialize(VisionProblem(lengths=(3, 4), seed=1, path="kwargs", layout="v_strided"), "cpu")
    assert c.args[2].stride(0) == 96
    out = _entry("reference", "vision")(*c.args, **c.kwargs)
    assert out.shape == c.args[0].shape


def test_layout_checks_are_strict_only():
    """With strict validation off a stride-0 q runs, as upstream would (its output is unspecified)."""
    c = _vision_call()
    q = c.args[0][:1].expand_as(c.args[0])
    out = _entry("reference", "vision")(q, *c.args[1:], **c.kwargs, strict=False)
    assert out.shape == q.shape


def test_upstream_bounds_check_beats_the_layout_check():
    c = _vision_call()
    q = c.args[0][:1].expand_as(c.args[0])
    ind = c.args[3].clone()
    ind[1] = (7 - 3) * 32  # sequence 1 (4 tokens) runs one token past q
    exc = _raises(_entry("reference", "vision"), q, c.args[1], c.args[2], ind, *c.args[4:], **c.kwargs)
    assert type(exc) is RuntimeError and str(exc) == expected_message("vision.offset_out_of_bounds")


# ---- vision: argument errors name their field ------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("scale, exc_type, text", [
    ("x", TypeError, "Expected softmax_scale to be a number, a 1-element tensor or None but got softmax_scale='x' "
                     "(str); pass a float such as 0.25 (the default)"),
    (torch.tensor([0.5, 0.25]), ValueError,
     "Expected softmax_scale to be a number or a 1-element tensor but got softmax_scale=float32 tensor of shape "
     "(2,) on cpu; pass one scale, e.g. softmax_scale=float(softmax_scale.flatten()[0])"),
], ids=["str", "two-elements"])
def test_bad_softmax_scale_names_the_field(target, scale, exc_type, text):
    c = _vision_call()
    exc = _raises(_entry(target, "vision"), *c.args, **{**c.kwargs, "softmax_scale": scale})
    assert type(exc) is exc_type and str(exc) == text


@pytest.mark.parametrize("target", TARGETS)
def test_one_element_scale_tensor_is_a_scale(target):
    c = _vision_call(device=DEVICE)
    want = _entry("reference", "vision", DEVICE)(*c.args, **{**c.kwargs, "softmax_scale": 0.5})
    got = _entry(target, "vision", DEVICE)(*c.args, **{**c.kwargs, "softmax_scale": torch.tensor([0.5])})
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


_MAX_SEQLEN_FIX = "pass the bucketed longest length (prepare_flashinfer_cudnn_metadata's flashinfer_max_seqlen)"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("path", ["kwargs", "metadata"])
@pytest.mark.parametrize("value, exc_type, shown", [
    (None, TypeError, "None"),
    ("x", ValueError, "'x'"),
    (float("nan"), ValueError, "nan"),
    (float("inf"), OverflowError, "inf"),
    (torch.tensor([4096, 4096]), RuntimeError, "int64 tensor of shape (2,) on cpu"),
], ids=["none", "str", "nan", "inf", "two-elements"])
def test_bad_max_seqlen_names_the_field_keeping_upstreams_type(target, path, value, exc_type, shown):
    """Upstream turns max_seqlen into an int with int() (after .item() on a tensor): the same
    exception type, with the field and value named."""
    c = _vision_call(path)
    if path == "metadata":
        c.kwargs["forward_metadata"].flashinfer_max_seqlen = value
    else:
        c.kwargs["max_seqlen"] = value
    exc = _raises(_entry(target, "vision"), *c.args, **c.kwargs)
    assert type(exc) is exc_type
    assert str(exc) == (f"Expected max_seqlen to be an int or a 0-d/1-element tensor but got max_seqlen={shown}; "
                        f"{_MAX_SEQLEN_FIX}")


def test_max_seqlen_none_stays_a_type_only_expectation():
    """The fuzzer's max_seqlen_none case expects a TypeError by type only (outside the contract
    table), so an upstream target raising int()'s own TypeError still passes."""
    case = Case(VisionProblem(lengths=(3, 5), seed=4, path="kwargs"), Mutation("vision", "max_seqlen_none"))
    out = expected_outcome(case)
    assert (out.kind, out.exc_type, out.contract_id) == ("error", "TypeError", None)
    assert "max_seqlen=None" in out.message


# ---- LoRA -------------------------------------------------------------------------------------------------

def _lora_call(op: str = "step_b_q", device: str = "cpu"):
    """Segments (3, 4) on slots (0, 1): S=7, H=2, C=64, R=16."""
    return materialize(LoRAProblem(op=op, seg_lens=(3, 4), weight_indices=(0, 1), lora_ranks=(16, 8),
                                   scalings=(1.0, 0.5), seed=5), device)


@pytest.mark.parametrize("lens, text", [
    ([1 << 40], "seg_lens[0]=1099511627776 does not fit the int32 metadata tensor (at most 2147483647); "
                "pass seg_lens within int32"),
    ([2**30, 2**30], "seg_lens add up to 2147483648 rows, beyond what the int32 seg_indptr holds (2147483647); "
                     "split the batch"),
], ids=["one-length", "sum"])
def test_make_lora_batch_info_names_int32_overflow(lens, text):
    with pytest.raises(ValueError) as info:
        make_lora_batch_info(lens, [0] * len(lens), [16], [1.0])
    assert str(info.value) == text


def test_make_lora_batch_info_names_a_slot_beyond_int32():
    with pytest.raises(ValueError, match=re.escape("weight_indices[1]=4294967296 does not fit the int32")):
        make_lora_batch_info([1, 2], [0, 1 << 32], [16], [1.0])


@pytest.mark.parametrize("target", TARGETS)
def test_seg_lens_list_without_max_len_names_the_field(target):
    """Upstream calls seg_lens.max() when max_len is None: a list fails there with AttributeError;
    so does ours, naming the field (before strict validation, which would name its dtype)."""
    c = _lora_call("step_a_v")
    bi = copy.copy(batch_info_of(c))
    bi.max_len, bi.seg_lens = None, [3, 4]
    exc = _raises(_entry(target, "step_a_v"), c.args[0], c.args[1], bi)
    assert type(exc) is AttributeError
    assert str(exc) == ("Expected batch_info.seg_lens to be an int32 tensor but got seg_lens=[3, 4] (list), which "
                        "has no max(); pass torch.tensor(seg_lens, dtype=torch.int32) or give max_len")


@pytest.mark.parametrize("target", TARGETS)
def test_non_numeric_max_len_names_the_field(target):
    c = _lora_call("step_a_v")
    bi = copy.copy(batch_info_of(c))
    bi.max_len = "x"
    exc = _raises(_entry(target, "step_a_v"), c.args[0], c.args[1], bi)
    assert type(exc) is ValueError
    assert str(exc) == ("Expected batch_info.max_len to be an int or None but got max_len='x'; "
                        "pass the longest segment length")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("layout", ["stride0", "overlapping"])
def test_overlapping_base_output_is_rejected(target, layout):
    c = _lora_call("step_b_q")
    base = c.args[3]
    if layout == "stride0":
        bad = base[:1].expand_as(base)
        why = "dimension 0 (size 7) has stride 0, so its 7 entries share memory"
    else:  # rows one head apart: row t's head 1 is row t+1's head 0
        bad = torch.randn(8 * 64).as_strided(base.shape, (64, 64, 1))
        why = ("dimension 1 (size 2, stride 64) steps inside the 448 elements spanned by the dimensions of smaller "
               "stride, so elements overlap")
    exc = _raises(_entry(target, "step_b_q"), *c.args[:3], bad)
    assert type(exc) is ValueError
    assert str(exc) == expected_message(
        "lora.strict.tensor_attr", field="base_output",
        expected="a tensor whose elements do not share memory (it is updated in place)", got=describe_layout(bad),
        fix=f"{why}; pass a tensor that owns its memory, e.g. base_output.clone(), and use the returned one")


@pytest.mark.parametrize("target", TARGETS)
def test_broadcast_lora_input_is_fine(target):
    """Inputs are only read: an expanded (stride-0) activation is a valid torch idiom and gives the
    same result as its contiguous copy."""
    c = _lora_call("step_a_v", DEVICE)
    x = c.args[0][:1].expand_as(c.args[0])
    # the same target on both (on a GPU our fp32 LoRA kernels run TF32: the reference is not the yardstick)
    got = _entry(target, "step_a_v", DEVICE)(x, *c.args[1:])
    want = _entry(target, "step_a_v", DEVICE)(x.contiguous(), *c.args[1:])
    route_rows = batch_info_of(c).seg_indptr[-1].item()
    torch.testing.assert_close(got[:route_rows], want[:route_rows])


@pytest.mark.parametrize("target", TARGETS)
def test_integer_lora_activations_are_rejected(target):
    c = _lora_call("step_a_v")
    x = c.args[0].to(torch.int8)
    exc = _raises(_entry(target, "step_a_v"), x, *c.args[1:])
    assert str(exc) == expected_message("lora.strict.tensor_attr", field="input",
                                        expected="a floating-point torch.Tensor", got=describe_tensor(x),
                                        fix="pass fp16, bf16, fp32 or fp64 data")
