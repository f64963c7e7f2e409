"""Benchmark rows -> a result record of kind ``"bench"`` (what the bench scripts call).

Note [Benchmark rows]
---------------------
A bench script measures and then hands its rows here, one dict per (target, op, shape, dtype)::

    {"target": "triton", "op": "step_a_q", "shape": {"S": 4096, "H": 64, "R": 32} or "prefill_4x256",
     "dtype": "bfloat16", "median_us": 41.0,
     "bytes": 2.1e7, "flops": 2.1e9,               # optional: moved bytes and FLOPs of one call
     "tbps": 0.51, "tflops": 51.2,                 # optional: derived from bytes/flops when absent
     "ceiling_tbps": 4.8, "ceiling_tflops": 989.0, # optional: the device's roofs
     "peers": {"sglang": 52.0, "torch": {"median_us": 120.0}}}   # optional: peer name -> time

Missing throughputs are derived from ``bytes``/``flops`` and ``median_us``; a peer given as a bare
number is a median time in microseconds.  Rows are checked up front, and a bad one is named with the
fix.  :func:`write_bench_record` saves the record (never overwriting) for ``kernel-oracle report``
and ``kernel-oracle compare``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Iterable, Optional

from kernel_oracle.harness.schema import SchemaError, add_benchmark, add_target, new_record, save

__all__ = ["record_from_bench_rows", "write_bench_record"]

_REQUIRED = ("target", "op", "shape", "dtype", "median_us")
_NUMERIC = ("median_us", "bytes", "flops", "tbps", "tflops", "ceiling_tbps", "ceiling_tflops")


def _positive(row_i: int, key: str, value) -> Optional[float]:
    if value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise SchemaError(f"bench row {row_i}: Expected a number for {key} but got {key}={value!r}") from None
    if not math.isfinite(v) or v < 0:
        raise SchemaError(f"bench row {row_i}: Expected a finite non-negative {key} but got {key}={value!r}")
    return v


def _normalise(i: int, row: dict) -> dict:
    if not isinstance(row, dict):
        raise SchemaError(f"bench row {i}: Expected a dict but got {type(row).__name__}")
    missing = [k for k in _REQUIRED if row.get(k) is None]
    if missing:
        raise SchemaError(f"bench row {i}: missing {missing}; every row needs {list(_REQUIRED)}")
    out = dict(row)
    for k in _NUMERIC:
        out[k] = _positive(i, k, row.get(k))
    if out["median_us"] == 0:
        raise SchemaError(f"bench row {i}: median_us=0; pass the measured median time of one call in microseconds")
    if hasattr(out["dtype"], "is_floating_point"):  # a torch.dtype
        out["dtype"] = str(out["dtype"]).replace("torch.", "")
    seconds = out["median_us"] * 1e-6
    if out["tbps"] is None and out["bytes"]:
        out["tbps"] = out["bytes"] / seconds / 1e12
    if out["tflops"] is None and out["flops"]:
        out["tflops"] = out["flops"] / seconds / 1e12
    peers = {}
    for name, p in (row.get("peers") or {}).items():
        if isinstance(p, dict):
            t = _positive(i, f"peers[{name!r}].median_us", p.get("median_us"))
            peers[str(name)] = {**p, "median_us": t}
        else:
            peers[str(name)] = {"median_us": _positive(i, f"peers[{name!r}]", p)}
    out["peers"] = peers
    for k in [k for k, v in out.items() if v is None]:
        del out[k]
    return out


def record_from_bench_rows(rows: Iterable[dict], *, seeds: Optional[dict] = None,
                           device: Optional[str] = None) -> dict:
    """A validated record of kind ``"bench"`` holding ``rows`` (Note [Benchmark rows])."""
    rec = new_record("bench", seeds=seeds, device=device)
    for i, row in enumerate(rows):
        add_benchmark(rec, _normalise(i, row))
    for name in sorted({b["target"] for b in rec["benchmarks"]}):
        add_target(rec, name=str(name), available=True)
    for name in sorted({p for b in rec["benchmarks"] for p in b.get("peers", {})}):
        add_target(rec, name=name, available=True, reason="peer (benchmark comparison)")
    return rec


def write_bench_record(rows: Iterable[dict], path: str | os.PathLike, **kwargs) -> Path:
    """Build the record and save it at ``path`` (an existing directory gets ``bench-<UTC>.json``)."""
    rec = record_from_bench_rows(rows, **kwargs)
    p = Path(path)
    if p.is_dir():
        p = p / f"bench-{rec['created'].replace(':', '').replace('-', '')}.json"
    return save(rec, p)
