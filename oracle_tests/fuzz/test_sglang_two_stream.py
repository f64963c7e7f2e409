"""The fused sides of SGLang's TRT-LLM-style kv_b path as the MLA forward runs them (``deepseek_mla_correction.py``):
target ``sglang-trt==X.Y.Z@lora_opti=on`` (Note [The two-stream kv_b correction]).

* the release's file is loaded standalone and gives ``q_side_fused`` / ``v_side_fused`` only under
  ``lora_opti=on`` (the forward calls it only then); its identity joins the release identity;
* both sides against the float64 oracle: the serial path on the CPU, the two-stream schedule on a GPU;
* a missing wait is a finding of kind ``stream`` named by the schedule that shows it (planted in plain
  torch, and in a copy of the release's file), and a verdict of that kind; SGLang's shape with both waits
  (its side-stream block freed before step B has read it, reused only by users that wait) is none.
"""

from __future__ import annotations

import re

import pytest
import torch

from kernel_oracle.fuzz.targets.sglang import release_identity
from kernel_oracle.fuzz.targets.sglang_two_stream import _EXPOSES, StreamOrderingHazard, two_stream_call
from kernel_oracle.harness.check import Case, check_case
from kernel_oracle.harness.problem_lora import LoRAProblem
from kernel_oracle.harness.targets import Target, TargetSpec

from oracle_tests._sglang_releases import release_target
from oracle_tests.conftest import DEVICE

SPEC = "sglang-trt==0.5.23@lora_opti=on"
CASES = {
    "decode batch, two slots": dict(seg_lens=(1, 1, 1, 1), weight_indices=(0, 1, 1, 0), lora_ranks=(16, 8)),
    "tile edges, permuted": dict(seg_lens=(15, 17), weight_indices=(1, 0), lora_ranks=(16, 16), permute=True),
    "unrouted rows, strided": dict(seg_lens=(3, 2), weight_indices=(0, 1), lora_ranks=(16, 4), extra_rows=3,
                                   strided=True),
}


def test_the_fused_sides_come_only_with_lora_opti():
    on, off = release_target(SPEC, DEVICE), release_target("sglang-trt==0.5.23", DEVICE)
    assert {"q_side_fused", "v_side_fused"} <= set(on.entries)
    assert not {"q_side_fused", "v_side_fused"} & set(off.entries)
    assert "sglang.srt.lora.trtllm_lora_temp.deepseek_mla_correction" in on.reason
    gate = "open for decode batches" if DEVICE.startswith("cuda") else "closed (no CUDA streams here)"
    assert f"two-stream gate {gate}" in on.reason
    # the fused sides' file is part of what the lora_opti=on column runs: 0.5.21 and 0.5.22 differ there only
    assert release_identity("sglang-trt==0.5.21@lora_opti=on", "lora") != \
        release_identity("sglang-trt==0.5.22@lora_opti=on", "lora")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("op", ["q_side_fused", "v_side_fused"])
def test_the_fused_sides_match_the_oracle(op, case, dtype):
    p = LoRAProblem(op=op, dtype=dtype, H=2, qk=16, vd=16, C=32, R=16, scalings=(1.0, -0.5), seed=5, **CASES[case])
    verdict = check_case(release_target(SPEC, DEVICE), Case(p), DEVICE)
    assert verdict.ok, f"{SPEC} {op} {dtype} [{case}]: {verdict.kind}: {verdict.message}"


def test_a_hazard_is_a_finding_of_kind_stream():
    def hazard(*args, **kwargs):
        raise StreamOrderingHazard("q_side_fused: 3 output elements (first at (0, 0, 0)) are NaN ...")

    p = LoRAProblem(op="q_side_fused", seg_lens=(2,), weight_indices=(0,), lora_ranks=(4,), scalings=(1.0,), R=4)
    verdict = check_case(Target("planted", {"q_side_fused": hazard}, strict=False), Case(p), "cpu")
    assert not verdict.ok and verdict.kind == "stream"
    assert verdict.message.startswith("stream-ordering hazard: q_side_fused: 3 output elements")
    assert verdict.bucket.cause == "q_side_fused: step B read a block the side stream reused"


def _planted(wait_for_current: bool = True, wait_for_side: bool = True):
    """A fused side in plain torch, SGLang's shape: ``prepare`` reads ``x`` on a side stream into a block
    allocated there (never ``record_stream``-ed), ``apply`` adds it into ``out`` on the current stream and
    the handle is dropped; the two waits can be left out.  ``(prepare, apply, serial, out, x)``."""
    side = torch.cuda.Stream()
    x = torch.ones(1 << 16, device="cuda")
    out = torch.zeros(1 << 16, device="cuda")

    def prepare():
        if wait_for_current:
            side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            a = x * 2.0
        return a, side

    def apply(handle):
        if wait_for_side:
            torch.cuda.current_stream().wait_stream(handle[-1])
        return out.add_(handle[0])

    def serial(o):
        return o.add_(x * 2.0)

    return prepare, apply, serial, out, x


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the two-stream schedule needs CUDA streams")
def test_a_freed_side_stream_block_is_no_hazard_when_every_side_user_waits():
    """SGLang's shape, with both waits: the handle's block is freed with step B still to read it, and the
    next side-stream user (which waits for the current stream, as SGLang's do) refills it only after: every
    schedule gives the serial result (Note [The two-stream kv_b correction]), no false hazard."""
    prepare, apply, serial, out, x = _planted()
    result = two_stream_call(prepare, apply, serial, out, "planted", inputs=(x,))
    torch.cuda.synchronize()
    assert torch.equal(result, serial(torch.zeros_like(out)))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the two-stream schedule needs CUDA streams")
@pytest.mark.parametrize("dropped, schedule", [("wait_for_current", "inputs late"), ("wait_for_side", "side late")])
def test_each_missing_wait_is_named_by_its_own_schedule(dropped, schedule):
    """Planted in plain torch: one wait left out is a hazard first seen, and named, by the schedule that
    holds back what that wait orders (the other schedules cannot show it)."""
    prepare, apply, serial, out, x = _planted(**{dropped: False})
    with pytest.raises(StreamOrderingHazard, match=f"NaN under the two-stream schedule '{schedule}' but not on "
                                                   f"the serial path: {re.escape(_EXPOSES[schedule])}"):
        two_stream_call(prepare, apply, serial, out, "planted", inputs=(x,))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the two-stream schedule needs CUDA streams")
@pytest.mark.parametrize("dropped, schedule", [
    ("side_stream.wait_stream(torch.cuda.current_stream())", "inputs late"),
    ("torch.cuda.current_stream().wait_stream(side_stream)", "side late")])
@pytest.mark.parametrize("op", ["q_side_fused", "v_side_fused"])
def test_a_copy_of_the_path_without_one_wait_stream_is_a_stream_finding(tmp_path, op, dropped, schedule):
    """Planted: the release's deepseek_mla_correction.py with one of its waits replaced by ``pass``; the
    release as shipped passes the same case, the copy fails it with a finding of kind ``stream`` naming the
    schedule that shows the missing dependency."""
    import dataclasses

    from kernel_oracle.fuzz.targets.sglang_switches import ReleaseConfiguration
    from kernel_oracle.fuzz.targets.sglang_two_stream import TWO_STREAM_FILE, TwoStreamCorrections, load_two_stream
    from kernel_oracle.fuzz.targets.sglang_wheel import find_wheel, locate_kernels, wheel_release

    release_target(SPEC, "cuda")  # skips without the wheel
    shipped = wheel_release(find_wheel("0.5.23", None))
    text = shipped.read(TWO_STREAM_FILE)
    assert text.count(dropped) == 2, "the release's file has this wait on both sides"
    copy = tmp_path / "deepseek_mla_correction.py"
    copy.write_text(text.replace(dropped, "pass"))
    planted = dataclasses.replace(shipped, loaded={},
                                  read=lambda n: copy.read_text() if n == TWO_STREAM_FILE else shipped.read(n),
                                  disk=lambda n: copy if n == TWO_STREAM_FILE else shipped.disk(n))
    config = ReleaseConfiguration.from_spec(TargetSpec.parse(SPEC))
    p = LoRAProblem(op=op, dtype="float16", H=2, qk=16, vd=16, C=32, R=16, scalings=(1.0, -0.5), seed=5,
                    **CASES["decode batch, two slots"])
    verdicts = {}
    for name, release in (("shipped", shipped), ("planted", planted)):
        fused = TwoStreamCorrections(load_two_stream(release, locate_kernels(release)["trt"], config))
        entries = {"q_side_fused": fused.q_side_fused_fwd, "v_side_fused": fused.v_side_fused_fwd}
        verdicts[name] = check_case(Target(name, entries, strict=False), Case(p), "cuda")
    assert verdicts["shipped"].ok, verdicts["shipped"].message
    assert verdicts["planted"].kind == "stream", verdicts["planted"].message
    assert f"schedule '{schedule}'" in verdicts["planted"].message


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs and streams need a CUDA device")
def test_layers_captured_in_a_graph_match_the_serial_path_on_replay():
    """As SGLang runs decode: several layers' prepare / base BMM / apply captured in one CUDA graph (the side
    stream's step-A outputs come from the graph's pool, freed when each layer's handle goes), replayed on new
    inputs; every layer's output equals the release's serial path on the same inputs."""
    from kernel_oracle.reference.batch_info import make_lora_batch_info

    mod = release_target(SPEC, "cuda").entries["q_side_fused"].__self__.module
    S, H, qk, vd, C, R, L, layers = 16, 4, 32, 32, 64, 16, 2, 3
    gen = torch.Generator(device="cuda").manual_seed(0)
    bi = make_lora_batch_info([4, 4, 4, 4], [0, 1, 1, 0], [16, 8], [1.0, 0.5], cuda_graph_pad_to=4, device="cuda")
    attns = [_attn(torch.randn(L, R, C, generator=gen, device="cuda") / 4,
                             torch.randn(L, H * (qk + vd), R, generator=gen, device="cuda") / 4, bi, qk, vd, H)
             for _ in range(layers)]
    w_kc = torch.randn(H, qk, C, generator=gen, device="cuda") / 8
    q_nope = torch.zeros(S, H, qk, device="cuda")
    outs: list = []

    def forward():
        outs.clear()
        for attn in attns:
            handle = mod.kv_b_lora_q_prepare(attn, q_nope)
            out = torch.bmm(q_nope.transpose(0, 1), w_kc).transpose(0, 1)  # the base BMM, on the current stream
            outs.append(mod.kv_b_lora_q_apply(attn, q_nope, out, handle))

    capture = torch.cuda.Stream()
    with torch.cuda.stream(capture):
        forward()  # warm-up on the capture stream: the side stream and the kernels exist before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=capture):
        forward()
    for step in range(3):
        q_nope.copy_(torch.randn(S, H, qk, generator=gen, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        for i, attn in enumerate(attns):
            base = torch.bmm(q_nope.transpose(0, 1), w_kc).transpose(0, 1)
            serial = mod.apply_q_correction(attn, q_nope, base.clone())
            torch.cuda.synchronize()
            assert torch.equal(outs[i], serial), f"replay {step}, layer {i}: the graph's output differs from serial"


def _attn(A_buf, B_buf, batch_info, qk, vd, heads):
    """The attention module the correction reads (its ``kv_b_proj`` with buffers and batch info)."""
    import types

    layer = types.SimpleNamespace(set_lora=True, A_buffer=A_buf, B_buffer=B_buf,
                                  lora_backend=types.SimpleNamespace(batch_info=batch_info))
    return types.SimpleNamespace(kv_b_proj=layer, qk_nope_head_dim=qk, v_head_dim=vd, num_local_heads=heads)
