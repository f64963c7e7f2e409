"""Writes outside a view are findings (Note [Writes outside a view] in harness/view_gaps.py): a kernel that
computes the right values and then writes the NaN gaps around a strided argument -- its in-place output or
a read-only input -- fails, in ``assert_matches`` and in campaigns, naming the tensor and the first
changed element of its buffer.  Gaps were checked for reads only: such a kernel passed 1,636 cases."""

from __future__ import annotations

import json

import pytest
import torch

import kernel_oracle
from kernel_oracle.harness.check import Case, check_case
from kernel_oracle.harness.problems import materialize
from kernel_oracle.harness.problem_lora import LoRAProblem
from kernel_oracle.harness.problem_vision import VisionProblem
from kernel_oracle.harness.targets import Target
from kernel_oracle.reference import lora as ref_lora
from kernel_oracle.reference.vision import flashinfer_cudnn_attention

from oracle_tests.conftest import DEVICE


def _buffer(t: torch.Tensor) -> torch.Tensor:
    """The whole buffer under the view ``t`` (what a kernel reaches with its base pointer)."""
    storage = t.untyped_storage()
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(storage, 0, (storage.nbytes() // t.element_size(),),
                                                               (1,))


def step_b_q_zeroing_gaps(q_lora_a, A_buf, batch_info, base_output):
    """Right values, then the NaN around its strided base_output zeroed (the probe)."""
    out = ref_lora.step_b_q_fwd(q_lora_a, A_buf, batch_info, base_output, strict=False)
    _buffer(base_output).nan_to_num_(0.0)
    return out


def step_a_v_writing_its_input_gap(attn_output, A_buf, batch_info):
    """Right values; one element of its read-only input's buffer outside the view overwritten."""
    out = ref_lora.step_a_v_fwd(attn_output, A_buf, batch_info, strict=False)
    _buffer(attn_output)[0] = 7.0  # the leading row of an offset view: no element of attn_output
    return out


def vision_writing_qkv(q, k, v, cu_seqlens, bsz, seq_len, softmax_scale=None, forward_metadata=None, **kw):
    """Right values; v's interleaved buffer written where q and k of that layout would be."""
    out = flashinfer_cudnn_attention(q, k, v, cu_seqlens, bsz, seq_len, softmax_scale, forward_metadata, **kw)
    _buffer(v)[0] = 3.0
    return out


def _lora(op, **kw):
    return LoRAProblem(op=op, seg_lens=(3, 2), weight_indices=(0, 1), lora_ranks=(8, 4), scalings=(1.0, 0.5),
                       H=2, qk=16, vd=16, C=16, R=8, seed=3, **kw)


CASES = [
    ("step_b_q", step_b_q_zeroing_gaps, _lora("step_b_q", strided=True), "base_output"),
    ("step_b_q", step_b_q_zeroing_gaps, _lora("step_b_q", offset_views=True), "base_output"),
    ("step_a_v", step_a_v_writing_its_input_gap, _lora("step_a_v", offset_views=True), "attn_output"),
    ("vision", vision_writing_qkv, VisionProblem(lengths=(3, 4), layout="v_strided", seed=1), "v"),
]


@pytest.mark.parametrize("op, fn, problem, name", CASES)
def test_assert_matches_fails_a_write_outside_a_view(op, fn, problem, name):
    call = materialize(problem, DEVICE)
    with pytest.raises(AssertionError, match=rf"wrote outside the view of {name}: wrote \d+ element\(s\) of its "
                                             rf"buffer outside the view, first buffer element \d+: \S+ -> "):
        kernel_oracle.assert_matches(op, fn, *call.args, strict=False, **call.kwargs)


@pytest.mark.parametrize("op, fn, problem, name", CASES)
def test_a_campaign_check_fails_it(op, fn, problem, name):
    verdict = check_case(Target("gap-writer", {op: fn}, strict=False), Case(problem), DEVICE)
    assert not verdict.ok and verdict.kind == "contract"
    assert verdict.bucket.label.endswith(f"wrote outside the view of {name}"), verdict.bucket.label


def test_a_kernel_that_keeps_to_its_views_passes():
    call = materialize(_lora("step_b_q", strided=True, offset_views=True), DEVICE)
    assert kernel_oracle.assert_matches("step_b_q", ref_lora.step_b_q_fwd, *call.args).ok


def test_a_campaign_reports_the_probe(tmp_path, monkeypatch):
    """The probe as a module target in a campaign: one finding naming base_output (it was clean)."""
    from kernel_oracle.cli import main as cli_main

    (tmp_path / "ko_gap_zeroer.py").write_text(
        "import torch\nfrom kernel_oracle.reference.lora import step_b_q_fwd as _ref\n\n"
        "def step_b_q_fwd(q_lora_a, A_buf, batch_info, base_output):\n"
        "    out = _ref(q_lora_a, A_buf, batch_info, base_output, strict=False)\n"
        "    s = base_output.untyped_storage()\n"
        "    torch.empty(0, dtype=base_output.dtype, device=base_output.device).set_(\n"
        "        s, 0, (s.nbytes() // base_output.element_size(),), (1,)).nan_to_num_(0.0)\n"
        "    return out\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "c"
    assert cli_main(["fuzz", "--targets", "ko_gap_zeroer", "--op", "step_b_q", "--cases", "60", "--seed", "2",
                     "--device", DEVICE, "--out", str(out), "--quiet", "--no-isolate", "--limits", "tiny"]) == 1
    findings = json.loads((out / "summary.json").read_text())["findings"]
    assert any("wrote outside the view of base_output" in f["message"] for f in findings), \
        [f["message"][:120] for f in findings]

