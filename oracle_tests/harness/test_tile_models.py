"""Tile models and the coverage table (Note [Tile coverage], Note [Tile models]): each class at the real blocks,
the table's record round trip and its checks, our kernels' dimensions as their launch plan says, the blocks read
from SGLang's files (kv_b launch keywords, v2 plans, csgmv fixed blocks, defaults and tuned tables), the record
schema and the report."""

from __future__ import annotations

import dataclasses

import pytest

from kernel_oracle.fuzz.targets.sglang_tiles import kv_b_model
from kernel_oracle.harness.problem_csgmv import CsgmvProblem
from kernel_oracle.harness.problem_lora import LoRAProblem
from kernel_oracle.harness.problem_vision import VisionProblem
from kernel_oracle.harness.schema import SchemaError, merge, new_record, validate
from kernel_oracle.harness.tile_coverage import CoverageTable, TiledDim, shortfalls
from kernel_oracle.harness.tiles import tile_hints, tiled_dims, unknown_model
from kernel_oracle.harness.tiles_vision import ours_vision_model
from kernel_oracle.harness.tiles_csgmv import csgmv_blocks, csgmv_dims
from kernel_oracle.kernels.lora import BLOCKS, plan
from kernel_oracle.reference.batch_info import make_lora_batch_info

from oracle_tests._sglang_releases import release_files

# (extent, block) -> the classes of one dimension: a literal table (blocks 0: one block sized to the extent)
CLASS_CASES = [
    (0, 16, {"one": True, "several": False, "tail": False}),
    (16, 16, {"one": True, "several": False, "tail": False}),
    (17, 16, {"one": False, "several": True, "tail": True}),
    (32, 16, {"one": False, "several": True, "tail": False}),
    (33, 16, {"one": False, "several": True, "tail": True}),
    (300, 0, {"one": True, "several": False, "tail": False}),
]


@pytest.mark.parametrize("extent,block,classes", CLASS_CASES)
def test_each_dimension_falls_in_its_block_classes(extent, block, classes):
    got = TiledDim("op", "K=C", extent, block).classes()
    assert {k: got[k] for k in classes} == classes
    assert got["split"] is None  # no split unless the code splits the reduction


def test_a_split_counts_only_with_two_non_empty_parts():
    assert TiledDim("op", "K=K", 300, 256, parts=1).classes()["split"] is False
    assert TiledDim("op", "K=K", 300, 256, parts=2).classes()["split"] is True


def _table() -> CoverageTable:
    table = CoverageTable()
    table.add("t", [TiledDim("op", "K=C", 17, 16), TiledDim("op", "rows", 4, 16)])
    table.add("t", [TiledDim("op", "K=C", 32, 16, parts=2), TiledDim("op", "rows", 40, 32)])
    table.note_unknown("ref", "lora", "no blocks")
    return table


def test_the_table_counts_each_class_and_survives_its_record():
    record = _table().to_record()
    rows = {r["dim"]: r for r in record["rows"]}
    assert rows["K=C"] == {"target": "t", "op": "op", "dim": "K=C", "blocks": [16], "cases": 2, "one": 0,
                           "several": 2, "tail": 1, "split": 1}
    assert rows["rows"]["blocks"] == [16, 32] and rows["rows"]["split"] is None
    assert CoverageTable.from_record(record).to_record() == record
    assert record["unknown"] == {"ref": {"lora": "no blocks"}}
    doubled = CoverageTable.from_record(record).merge(CoverageTable.from_record(record)).to_record()
    assert {r["dim"]: r["cases"] for r in doubled["rows"]} == {"K=C": 4, "rows": 4}


@pytest.mark.parametrize("bad,field", [({"rows": [{"target": "t", "op": "o"}]}, "lacks target, op and dim"),
                                       ({"rows": [{"target": "t", "op": "o", "dim": "d", "cases": 1, "one": 2}]},
                                        "exceeds cases=1"),
                                       ({"rows": [{"target": "t", "op": "o", "dim": "d", "cases": -1}]},
                                        "rows[0].cases=-1"),
                                       ([1], "is not")])
def test_a_malformed_coverage_is_refused_naming_the_field(bad, field):
    with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")):
        CoverageTable.from_record(bad)
    record = new_record("campaign")
    record["coverage"] = bad
    with pytest.raises(SchemaError, match="coverage"):
        validate(record)


def test_shortfalls_name_the_classes_below_a_share_but_not_what_the_code_cannot_have():
    table = _table()
    table.add("t", [TiledDim("op", "N=R", 40, 0)])  # sized to the rank: one block by construction
    found = {(dim, cls) for _, _, dim, cls, _ in shortfalls(table, 0.6)}
    assert found == {("K=C", "tail"), ("K=C", "split"), ("rows", "several"), ("rows", "tail")}


def test_merging_records_adds_their_coverage():
    a, b = new_record("main"), new_record("campaign")
    b["coverage"] = _table().to_record()
    merge(a, b)
    merge(a, b)
    assert {r["dim"]: r["cases"] for r in a["coverage"]["rows"]} == {"K=C": 4, "rows": 4}


# ---- our kernels: the dimensions their launch plan tiles ------------------------------------------

_LONG = LoRAProblem(op="step_a_v", seg_lens=(5, 140, 3), weight_indices=(0, 1, 0), lora_ranks=(16, 8),
                    scalings=(1.0, 0.5), H=5, qk=72, vd=130, C=300, R=16)


@pytest.mark.parametrize("op", list(BLOCKS))
def test_our_dimensions_use_the_blocks_of_the_path_the_plan_takes(op):
    p = dataclasses.replace(_LONG, op=op)
    bi = make_lora_batch_info(p.seg_lens, p.weight_indices, p.lora_ranks, p.scalings)
    launch = plan(op, bi, p.S, max(p.seg_lens), num_slots=p.L)
    dims = {d.dim: d for d in tiled_dims({"model": "ours"}, p)}
    assert dims["rows"].block == launch.blocks["BT"]
    key = {"K=qk": "BLOCK_K", "K=C": "BLOCK_K", "N=C": "BLOCK_C", "N=vd": "BLOCK_V", "heads": "BH"}
    for name, d in dims.items():
        if name != "rows":
            assert d.block == launch.blocks[key[name]], (name, d)
            assert d.extent == {"K=qk": 72, "K=C": 300, "N=C": 300, "N=vd": 130, "heads": 5}[name]
        assert d.block in tile_hints({"model": "ours"}, op)[name]  # the strategies draw around this block


def test_a_configured_triton_target_describes_the_blocks_it_launches():
    from kernel_oracle.fuzz.targets import resolve_target

    early = resolve_target("triton@lora_early_reads=on", "cpu").tiles
    assert early["lora"] == {"model": "ours", "early_reads": True}
    assert 16 in tile_hints(early["lora"], "q_side_fused")["rows"]  # its early-read q tiles: 16 rows
    assert 16 not in tile_hints({"model": "ours"}, "q_side_fused")["rows"]
    gluon = resolve_target("triton@vision_kernel=gluon", "cpu").tiles["vision"]
    assert gluon["model"] is None and "Gluon" in gluon["reason"]


def test_our_vision_blocks_are_the_interpreters_on_the_cpu_and_the_configs_on_a_gpu():
    p = VisionProblem(lengths=(40, 3), D=80, dtype="float16")
    cpu = {d.dim: d.block for d in tiled_dims(ours_vision_model(interpreted=True), p)}
    gpu = {d.dim: d.block for d in tiled_dims(ours_vision_model(interpreted=False, tma=True), p)}
    assert cpu == {"queries": 16, "keys": 16}
    assert gpu["queries"] >= 64 and gpu["keys"] >= 32
    assert tiled_dims(unknown_model("why"), p) == []


# ---- SGLang's blocks, read from its code ---------------------------------------------------------

PLANTED_KV_B = '''
_BLOCK_S = 16
_STEP_A_BLOCK_K = 64

def step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head):
    block_n = triton.next_power_of_2(rank)
    _step_a_q_kernel[grid](q_nope, BLOCK_S=_BLOCK_S, BLOCK_N=block_n, BLOCK_K=_STEP_A_BLOCK_K)

def step_b_v_fwd(x, B_buf, batch_info, base_output, qk, vd):
    _STEP_B_BLOCK_K = 32
    _step_b_v_kernel[grid](x, BLOCK_S=8, BLOCK_N=128, BLOCK_K=_STEP_B_BLOCK_K)
'''


def test_the_kv_b_reader_resolves_each_launch_keyword():
    model = kv_b_model(PLANTED_KV_B)
    assert model["ops"] == {"step_a_q": {"rows": 16, "N=R": 0, "K=qk": 64},
                            "step_b_v": {"rows": 8, "N=vd": 128, "K=R": 32}}
    fused = kv_b_model(PLANTED_KV_B, fused=True)["ops"]
    assert fused["v_side_fused"] == {"rows": 8, "N=vd": 128, "K=R": 32}
    assert kv_b_model("x = 1")["model"] is None


def test_the_0_5_23_kv_b_blocks_are_the_files_constants():
    from kernel_oracle.fuzz.targets.sglang_wheel import locate_kernels

    release = release_files("0.5.23")
    ops = kv_b_model(release.read(locate_kernels(release)["default"]))["ops"]
    assert ops["step_a_v"] == {"rows": 16, "N=R": 16, "K=C": 64}
    assert ops["step_b_q"] == {"rows": 16, "N=C": 64, "K=R": 16}


def _csgmv_model(version: str, device_name: str = "cpu") -> dict:
    from kernel_oracle.fuzz.targets.sglang_csgmv import locate_csgmv
    from kernel_oracle.fuzz.targets.sglang_csgmv_target import csgmv_tile_model
    from kernel_oracle.fuzz.targets.sglang_csgmv import CsgmvConfiguration

    release = release_files(version)
    return csgmv_tile_model(release, locate_csgmv(release), "cpu", {}, CsgmvConfiguration(device_name=device_name))


def test_csgmv_blocks_come_from_the_releases_launch_code_and_tuned_tables():
    old = _csgmv_model("0.5.10")
    assert (old["shrink"], old["expand"], old["tuned"]) == ({"BLOCK_N": 16, "BLOCK_K": 256},
                                                           {"BLOCK_N": 64, "BLOCK_K": 16}, [])
    cpu, h200 = _csgmv_model("0.5.23"), _csgmv_model("0.5.23", "NVIDIA H200")
    assert csgmv_blocks(cpu, "shrink", 1024, 64, 2, 16) == (16, 256)  # no table names the CPU: the defaults
    assert csgmv_blocks(h200, "shrink", 1024, 64, 2, 16) == (64, 64)  # lora_shrink,K=1024,R=64,S=2,device=NVIDIA_H200
    assert csgmv_blocks(h200, "shrink", 1024, 64, 2, 100) == csgmv_blocks(h200, "shrink", 1024, 64, 2, 128)
    assert csgmv_blocks(h200, "shrink", 4096, 16, 1, 16) == (16, 256)


def test_csgmv_split_parts_follow_the_call_and_the_switch():
    model = {"model": "csgmv", "shrink": {"BLOCK_N": 16, "BLOCK_K": 256}, "expand": {"BLOCK_N": 64, "BLOCK_K": 16},
             "split_kernel": True, "split_switch": True, "deterministic": False}
    p = CsgmvProblem(op="csgmv_shrink", seg_lens=(3,), weight_indices=(0,), lora_ranks=(32,), scalings=(1.0,),
                     permutation=(0, 1, 2), K=4096, R=32, dtype="bfloat16", split_k=None)
    assert {d.dim: d.parts for d in csgmv_dims(model, p)}["K=K"] == 8  # the switch's rule: K 4096 -> 8 ways
    assert {d.dim: d.parts for d in csgmv_dims(model, dataclasses.replace(p, K=300, split_k=4))}["K=K"] == 2
    assert {d.dim: d.parts for d in csgmv_dims({**model, "deterministic": True}, p)}["K=K"] == 1
    assert {d.dim: d.parts for d in csgmv_dims({**model, "split_kernel": False}, p)}["K=K"] is None
