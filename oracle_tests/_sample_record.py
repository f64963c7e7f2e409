"""A small, fully populated record (every section non-empty) for the tests and the docs' demo."""

from __future__ import annotations

from kernel_oracle.harness.schema import add_benchmark, add_finding, add_group, add_note, add_target, new_record

__all__ = ["sample_record"]


def sample_record(kind: str = "main", *, findings: bool = True) -> dict:
    rec = new_record(kind, seeds={"main": 0}, device="cpu")
    add_target(rec, name="reference", available=True, precision="fp32", entry_points=["step_a_q_fwd"])
    add_target(rec, name="triton", available=True, precision="fp32 (interpreter: exact)")
    add_target(rec, name="sglang", available=False, reason="sglang is not installed (pip install sglang)")
    for target in ("reference", "triton"):
        for op, base in (("step_a_q", 0.05), ("vision", 0.2)):
            for dtype, scale in (("float32", 1.0), ("bfloat16", 2.0)):
                ratios = [base * scale * (1 + ((i * 37) % 11) / 5) for i in range(12)]
                add_group(rec, target=target, op=op, dtype=dtype, shape_class="ragged", cases=12, passes=12,
                          ratios=ratios, precision="fp32")
    if findings:
        add_group(rec, target="triton", op="step_b_v", dtype="float16", shape_class="decode", cases=5, passes=3,
                  findings={"mismatch": 1, "contract": 1}, ratios=[0.3, 0.4, 3.5, 0.2, 0.1])
        add_finding(rec, {"id": "triton-step_b_v-0001", "target": "triton", "op": "step_b_v", "dtype": "float16",
                          "shape_class": "decode", "kind": "mismatch",
                          "message": "Tensor-likes are not close!\n\nMismatched elements: 3 / 640 (0.5%)\n"
                                     "Greatest absolute difference: 0.0123 at index (4, 1, 7) (up to 0.0035 allowed)",
                          "figures": {"max_abs": 0.0123, "max_rel": 0.02, "ratio": 3.5,
                                      "where": {"segment": 2, "slot": 1, "head": 1, "token": 4}},
                          "repro": "kernel-oracle repro reports/out/runs/x/findings/triton-step_b_v-0001.json",
                          "problem": {"family": "lora", "op": "step_b_v", "seg_lens": [1, 1, 1]}})
        add_finding(rec, {"id": "triton-step_b_v-0002", "target": "triton", "op": "step_b_v", "dtype": "float16",
                          "shape_class": "decode", "kind": "contract", "contract": "lora.missing_max_len",
                          "message": "expected ValueError('LoRA batch_info must provide max_len or seg_lens.') "
                                     "but the call returned normally",
                          "figures": {}, "repro": "kernel-oracle repro --finding triton-step_b_v-0002 <x & y>"})
    add_note(rec, "sglang target skipped: sglang is not installed")
    add_benchmark(rec, {"target": "triton", "op": "step_a_q", "shape": {"S": 4096, "H": 64, "R": 32},
                        "dtype": "bfloat16", "median_us": 41.0, "bytes": 2.1e7, "flops": 2.1e9,
                        "ceiling_tbps": 4.8, "ceiling_tflops": 989.0,
                        "peers": {"sglang": 52.0, "torch": {"median_us": 120.0}}})
    add_benchmark(rec, {"target": "triton", "op": "vision", "shape": "images_d80", "dtype": "bfloat16",
                        "median_us": 310.0, "flops": 1.5e11, "bytes": 9e7, "ceiling_tbps": 4.8,
                        "ceiling_tflops": 989.0, "peers": {"torch_sdpa": 280.0}})
    rec["summary"] = {"duration_s": 12.5, "time_s": 180}
    return rec
