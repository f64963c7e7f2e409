"""Turn the bench scripts' JSON output into benchmark rows and result records.

``kernels.bench_lora --json`` writes ``{"info", "rows", "sweep"}`` (one row per shape x side x
variant, with ``us``, ``bytes``, ``tbs`` and the measured copy bandwidth in ``info``);
``kernels.bench_vision --json`` writes ``{"meta", "records"}`` (one record per shape with the
warm/cold/planned times of our kernel and the peers' times).  Both become rows of
:mod:`reports.bench_ingest` so that benchmarks land in the same versioned record as everything
else (``kernel-oracle report`` / ``compare``).  The bench scripts call :func:`rows_from_bench_json`
through their ``--oracle-record PATH`` option; saved JSON can be converted later with
``python -m kernel_oracle.reports.bench_convert BENCH.json [...] --out RECORD.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional, Sequence

from kernel_oracle.reports.bench_ingest import record_from_bench_rows
from kernel_oracle.harness.schema import SchemaError, save

__all__ = ["record_from_bench_data", "record_from_bench_files", "rows_from_bench_json", "save_bench_record", "main"]

# measured on the H200 (KINDS.md / METHOD.md ceilings): bf16 dense matmul roof
BF16_MATMUL_TFLOPS = 790.0


def _lora_rows(data: dict) -> list[dict]:
    info = data.get("info", {})
    rows = []
    for r in data["rows"]:
        rows.append({
            "target": "triton", "op": f"lora-{r['side']}-side-{r['variant']}", "shape": r["shape"],
            "dtype": "bfloat16", "median_us": r["us"], "bytes": r.get("bytes"),
            "ceiling_tbps": info.get("copy_tbs"), "bar_us": r.get("bar_us"), "bar_met": r.get("met"),
        })
    return rows


def _vision_rows(data: dict) -> list[dict]:
    rows = []
    for r in data["records"]:
        peers = {}
        if "varlen_ms" in r:
            peers["torch-varlen"] = 1000.0 * r["varlen_ms"]
        if "sdpa_loop_ms" in r:
            peers["sdpa-loop"] = 1000.0 * r["sdpa_loop_ms"]
        if "flashinfer_cudnn_ms" in r:
            peers["flashinfer-cudnn"] = 1000.0 * r["flashinfer_cudnn_ms"]
        rows.append({
            "target": "triton", "op": "vision", "shape": f"{r['shape']} (H={r['heads']}, D={r['head_dim']})",
            "dtype": str(r.get("dtype", "bfloat16")).replace("torch.", ""),
            "median_us": 1000.0 * r["triton_call_warm_ms"], "flops": r.get("flops"),
            "ceiling_tflops": BF16_MATMUL_TFLOPS, "peers": peers,
            "cold_call_us": 1000.0 * r["triton_call_cold_ms"] if "triton_call_cold_ms" in r else None,
        })
    return rows


def rows_from_bench_json(data: dict) -> list[dict]:
    """Rows for :func:`reports.bench_ingest.record_from_bench_rows` from either bench format."""
    if "rows" in data and "info" in data:
        return _lora_rows(data)
    if "records" in data and "meta" in data:
        return _vision_rows(data)
    raise SchemaError("not a bench output: expected the keys of kernels.bench_lora (info, rows) "
                      "or kernels.bench_vision (meta, records)")


def record_from_bench_data(named: Sequence[tuple[str, dict]]) -> dict:
    """One ``bench`` record from ``(name, bench JSON)`` pairs; the environment is the benchmarked
    machine's (GPU, torch, triton), not the converting one's."""
    rows, sources = [], []
    for name, data in named:
        rows.extend(rows_from_bench_json(data))
        meta = data.get("info") or data.get("meta") or {}
        sources.append({"file": name, "gpu": meta.get("gpu"), "torch": meta.get("torch"),
                        "triton": meta.get("triton"), "commit": meta.get("commit"),
                        "when": meta.get("date") or meta.get("utc"), "command": meta.get("command")})
    rec = record_from_bench_rows(rows, device="cuda")
    env = rec["environment"]
    first = sources[0] if sources else {}
    env.update(gpu=first.get("gpu"), torch=first.get("torch"), triton=first.get("triton"),
               converted_on=env.get("platform"), bench_sources=sources)
    if first.get("commit") and "unknown" not in str(first.get("commit")):
        env["git_commit"] = first["commit"]
    return rec


def record_from_bench_files(paths: Sequence[str | Path]) -> dict:
    return record_from_bench_data([(Path(p).name, json.loads(Path(p).read_text())) for p in paths])


def save_bench_record(data: dict, path: str | Path, name: str = "bench") -> Path:
    """What the bench scripts' ``--oracle-record PATH`` does (a directory gets a timestamped file)."""
    rec = record_from_bench_data([(name, data)])
    p = Path(path)
    if p.is_dir():
        p = p / f"bench-{rec['created'].replace(':', '').replace('-', '')}.json"
    return save(rec, p)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kernel_oracle.reports.bench_convert", description=__doc__.splitlines()[0])
    ap.add_argument("bench_json", nargs="+", help="outputs of kernels.bench_lora / kernels.bench_vision --json")
    ap.add_argument("--out", required=True, help="result record to write (never overwritten)")
    args = ap.parse_args(argv)
    try:
        rec = record_from_bench_files(args.bench_json)
    except (OSError, json.JSONDecodeError, SchemaError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(save(rec, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
