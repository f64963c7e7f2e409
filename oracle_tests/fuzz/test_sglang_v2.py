"""SGLang's third kv_b code, the ``triton_v2`` backend's absorbed-MLA correction (0.5.23), as target ``sglang-v2``.

* the target loads the release's own files standalone (never ``import sglang``), names them, and is
  unavailable in one line where a release has no v2 path;
* its six ops against the float64 oracle on the edge cases of the other kv_b codes, in both phases
  (decode: block 16, prefill: block 64), where the kernels run (the interpreter on the CPU);
* the per-token slots it derives from a ragged batch (permutation, unrouted rows, graph padding);
* it declines the kv_b files' missing-``max_len`` contract, and campaigns never draw that case for it;
* its identity is the code it runs: a changed file of the path changes it, a moved comment does not.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from kernel_oracle.fuzz.strategies import cases
from kernel_oracle.fuzz.targets.sglang_v2 import V2_ENTRY, locate_v2, token_slots, v2_files, v2_identity
from kernel_oracle.fuzz.targets.sglang_wheel import ReleaseFiles
from kernel_oracle.harness.check import Case, check_case
from kernel_oracle.harness.opinfo import FAMILY_OPS
from kernel_oracle.harness.problem_lora import LoRAProblem
from kernel_oracle.reference.batch_info import make_lora_batch_info

from oracle_tests._sglang_releases import release_files, release_target
from oracle_tests.conftest import DEVICE

pytest.importorskip("msgspec", reason="SGLang 0.5.23's v2 files import msgspec (requirements-cpu.txt installs it)")
pytest.importorskip("pydantic", reason="SGLang 0.5.23's v2 files import pydantic (requirements-cpu.txt installs it)")

SPEC = "sglang-v2==0.5.23"
TESTED_DTYPES = ("float32", "float16")  # bf16: excluded under the interpreter (third-party Triton code)

# Edge cases within the SGLang pool's contract (ranks at most R): name -> problem fields
EDGE_CASES = {
    "tile edges 15/16/17 rows": dict(seg_lens=(15, 16, 17), weight_indices=(0, 1, 0), lora_ranks=(16, 8)),
    "empty and 1-row segments": dict(seg_lens=(0, 1, 0, 2), weight_indices=(1, 0, 1, 1), lora_ranks=(16, 16)),
    "rank 0 slot": dict(seg_lens=(3, 4), weight_indices=(0, 1), lora_ranks=(0, 5)),
    "permuted rows, odd dims": dict(seg_lens=(5, 3), weight_indices=(1, 0), lora_ranks=(16, 12), permute=True,
                                    qk=17, vd=15, C=33),
    "strided, offset views, unrouted rows": dict(seg_lens=(4, 2), weight_indices=(0, 1), lora_ranks=(16, 16),
                                                 strided=True, offset_views=True, extra_rows=2),
    "graph replay, stale host ints": dict(seg_lens=(3, 5, 2), weight_indices=(0, 1, 1), lora_ranks=(16, 8),
                                          cuda_graph_pad_to=4, stale_host_ints=(1, 1, 17)),
}


def _problem(op: str, dtype: str, fields: dict, *, prefill: bool) -> LoRAProblem:
    base = dict(H=2, qk=16, vd=16, C=32, R=16, scalings=(1.0, -0.5), seed=11, is_prefill=prefill)
    base.update(fields)
    return LoRAProblem(op=op, dtype=dtype, **base)


def test_the_target_names_the_release_files_and_what_it_declines():
    t = release_target(SPEC, DEVICE)
    rec = t.to_record()
    assert rec["entry_points"] == sorted(FAMILY_OPS["lora"])  # the fused sides and the four split steps
    assert rec["reason"].startswith("sglang 0.5.23: sglang.srt.lora.dense.mla_correction (the triton_v2 backend's ")
    assert "_align_block_size_torch" in rec["reason"]  # the one stand-in that replaces release code, named
    assert rec["release"] == "0.5.23" and not rec["strict"]
    assert set(rec["declines"]) == {"lora.missing_max_len"}
    if DEVICE == "cpu":
        assert "decode plan runs without its side stream" in rec["reason"]


def test_a_release_without_the_v2_path_is_unavailable_in_one_line():
    release_files("0.5.15")  # the wheel is there (or the test skips/fails as the release tests do)
    from kernel_oracle.fuzz.targets import resolve_target

    t = resolve_target("sglang-v2==0.5.15", DEVICE)
    assert not t.available
    assert t.reason == ("sglang 0.5.15 has no triton_v2 kv_b path (no sglang/srt/lora/dense/mla_correction.py: it "
                        "ships from 0.5.23)")


def test_the_loader_reads_the_path_from_the_wheel_without_importing_sglang():
    import sys

    rel = release_files("0.5.23")
    assert locate_v2(rel) == V2_ENTRY
    files = v2_files(rel, V2_ENTRY)
    assert files[:2] == [V2_ENTRY, "sglang/srt/lora/dense/runner.py"]
    for needed in ("sglang/kernels/ops/lora/common/routing.py", "sglang/kernels/ops/lora/common/lora_a.py",
                   "sglang/kernels/ops/lora/common/lora_b.py", "sglang/srt/lora/workspace.py"):
        assert needed in files
    release_target(SPEC, DEVICE)
    assert not any(name == "sglang" or name.startswith("sglang.") for name in sys.modules)


@pytest.mark.parametrize("prefill", [False, True], ids=["decode", "prefill"])
@pytest.mark.parametrize("dtype", TESTED_DTYPES)
@pytest.mark.parametrize("case", sorted(EDGE_CASES))
@pytest.mark.parametrize("op", FAMILY_OPS["lora"])
def test_v2_matches_the_oracle(op, case, dtype, prefill):
    verdict = check_case(release_target(SPEC, DEVICE), Case(_problem(op, dtype, EDGE_CASES[case], prefill=prefill)),
                         DEVICE)
    assert verdict.ok, f"{SPEC} {op} {dtype} [{case}] prefill={prefill}: {verdict.kind}: {verdict.message}"


def test_token_slots_follow_the_segments_permutation_and_padding():
    # logical rows 0..2 -> slot 1, 3..4 -> slot 0; the permutation reverses them; token 5 is unrouted
    bi = make_lora_batch_info([3, 2], [1, 0], [4, 4], [1.0, 1.0], permutation=[4, 3, 2, 1, 0])
    assert token_slots(bi, 6, "cpu").tolist() == [0, 0, 1, 1, 1, -1]
    # under CUDA graph every padded segment is read (zero-length: harmless); bs and num_segments are stale
    graph = make_lora_batch_info([2, 1], [0, 1], [4, 4], [1.0, 1.0], cuda_graph_pad_to=4, stale_host_ints=(1, 1, 2))
    assert token_slots(graph, 4, "cpu").tolist() == [0, 0, 1, -1]
    with pytest.raises(IndexError, match="outside the 2 tokens of the input"):
        token_slots(bi, 2, "cpu")


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(cases("lora", declines=("lora.missing_max_len",)))
def test_a_target_that_declines_the_max_len_contract_gets_no_case_of_it(case):
    p = case.problem
    assert p.with_max_len and p.with_seg_lens
    assert case.mutation is None or case.mutation.kind != "drop_max_len_and_seg_lens"


def test_the_identity_is_the_code_the_path_runs():
    rel = release_files("0.5.23")
    base = v2_identity(rel, V2_ENTRY)

    def variant(edit) -> str:
        changed = ReleaseFiles(rel.version, rel.origin + " (edited)", rel.names,
                               lambda name: edit(name, rel.read(name)), rel.disk)
        return v2_identity(changed, V2_ENTRY)

    routing = "sglang/kernels/ops/lora/common/routing.py"
    assert variant(lambda n, t: t + "\n# a comment\n") == base
    assert variant(lambda n, t: t.replace("_SMALL_ROUTE_MAX_PAIRS = 512", "_SMALL_ROUTE_MAX_PAIRS = 256")
                   if n == routing else t) != base


def test_the_problem_field_reaches_the_batch_info():
    p = dataclasses.replace(_problem("q_side_fused", "float32", EDGE_CASES["rank 0 slot"], prefill=True))
    from kernel_oracle.harness.problems import batch_info_of, materialize

    assert batch_info_of(materialize(p, "cpu")).is_prefill is True
    assert make_lora_batch_info([1], [0], [4], [1.0]).is_prefill is False  # SGLang's default
    assert torch.equal(token_slots(make_lora_batch_info([], [], [4], [1.0]), 0, "cpu"), torch.empty(0, dtype=torch.int32))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs and the decode side stream need a CUDA device")
def test_decode_layers_captured_in_a_graph_match_the_oracle_on_replay():
    """As SGLang's decode graph runs it: the batch bound before capture (graph mode), several layers of prepare
    (shrink on the side stream) / base BMM / apply captured in one graph, replayed for new inputs and new
    per-token slots written into the bound buffer; every layer equals the float64 oracle's q side."""
    from kernel_oracle.reference import lora

    corr = release_target(SPEC, "cuda").entries["q_side_fused"].__self__
    S, H, qk, vd, C, R, L, layers = 16, 4, 32, 32, 64, 16, 3, 3
    gen = torch.Generator(device="cuda").manual_seed(0)
    bi = make_lora_batch_info([4, 4, 4, 4], [0, 1, 2, 0], [16, 8, 0], [1.0, 0.5, 2.0], cuda_graph_pad_to=4,
                              device="cuda")
    bufs = [(torch.randn(L, R, C, generator=gen, device="cuda") / 4,
             torch.randn(L, H * (qk + vd), R, generator=gen, device="cuda") / 4) for _ in range(layers)]
    q_nope = torch.zeros(S, H, qk, device="cuda")
    base = torch.zeros(S, H, C, device="cuda")
    capture = torch.cuda.Stream()
    with torch.cuda.stream(capture):
        runner = corr._runner(bi, S, L)  # bound before capture, as the backend binds a batch before replay
        attns = [corr._attn(runner, A, B, qk, vd) for A, B in bufs]
        outs: list = []

        def forward():
            # SGLang's decode graph runner clears the per-forward route cache at the start of every forward it
            # warms up or captures (``reset_routing_cache``), so the route is built inside the graph from the
            # bound slot buffer; without it the capture would bake in the warm-up's route
            runner.reset_routes()
            outs.clear()
            for attn in attns:
                prepared = corr._prepare(attn, q_nope, "q")
                outs.append(corr._apply(prepared, base.clone()))

        forward()  # warm-up: the workspace's graph buffers and the side stream exist before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=capture):
        forward()
    for step, slots in enumerate(([0, 1, 2, 0], [2, 2, 1, 1], [1, 0, 0, 2])):
        live = make_lora_batch_info([4, 4, 4, 4], slots, [16, 8, 0], [1.0, 0.5, 2.0], device="cuda")
        runner._token_slots.copy_(token_slots(live, S, "cuda"))  # the backend rewrites the bound buffer
        q_nope.copy_(torch.randn(S, H, qk, generator=gen, device="cuda"))
        base.copy_(torch.randn(S, H, C, generator=gen, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        for i, (A, B) in enumerate(bufs):
            want = lora.q_side_fused_fwd(q_nope.double(), B.double(), A.double(), live, base.double().clone(), qk + vd)
            err = (outs[i].double() - want).abs().max()
            assert float(err) < 5e-2, f"replay {step}, layer {i}: max error {float(err)} (TF32 products)"
