"""Benchmarks write the same versioned record as campaigns and pytest runs.

The inputs are real outputs of ``kernels.bench_lora --json`` and ``kernels.bench_vision --json`` from
the H200 (docs/benchmarks/data/), so the converter is tested on what the bench scripts emit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_oracle.harness import schema
from kernel_oracle.reports import bench_convert
from kernel_oracle.reports.model import load_result

DATA = Path(__file__).resolve().parents[2] / "docs" / "benchmarks" / "data"
LORA, VISION = DATA / "bench_lora_h200.json", DATA / "bench_vision_h200.json"


def test_bench_outputs_become_one_valid_record(tmp_path):
    rec = bench_convert.record_from_bench_files([LORA, VISION])
    path = schema.save(rec, tmp_path / "bench.json")
    back = schema.load(path)
    assert back["kind"] == "bench"
    lora_rows = json.loads(LORA.read_text())["rows"]
    vision_rows = json.loads(VISION.read_text())["records"]
    assert len(back["benchmarks"]) == len(lora_rows) + len(vision_rows)
    assert back["environment"]["gpu"] == "NVIDIA H200"
    vision = [b for b in back["benchmarks"] if b["op"] == "vision"]
    for b, raw in zip(vision, vision_rows):
        assert b["median_us"] == pytest.approx(1000 * raw["triton_call_warm_ms"])
        assert b["tflops"] == pytest.approx(raw["triton_call_warm_tflops"], rel=1e-6)
        assert set(b["peers"]) == {"torch-varlen", "sdpa-loop"}
    lora = [b for b in back["benchmarks"] if b["op"].startswith("lora-")]
    for b, raw in zip(lora, lora_rows):
        assert b["tbps"] == pytest.approx(raw["bytes"] / (raw["us"] * 1e-6) / 1e12, rel=1e-9)


def test_bench_record_renders_with_every_benchmark(tmp_path):
    path = bench_convert.save_bench_record(json.loads(VISION.read_text()), tmp_path, "bench_vision")
    loaded = load_result(path)
    assert len(loaded.benchmarks) == len(json.loads(VISION.read_text())["records"])
    assert loaded.status == "clean"


def test_unknown_bench_format_is_a_clear_error():
    with pytest.raises(schema.SchemaError, match="not a bench output"):
        bench_convert.rows_from_bench_json({"something": 1})
