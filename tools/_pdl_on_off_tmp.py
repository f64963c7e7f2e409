import sys
from kernel_oracle.fuzz.targets import resolve_target
from kernel_oracle.harness.check import Case, check_case
from kernel_oracle.harness.problems import LoRAProblem
for conf in ("lora_opti=on,pdl=off", "lora_opti=on,pdl=on"):
    t = resolve_target(f"sglang-trt==0.5.23@{conf}", "cuda")
    for op in ("q_side_fused", "v_side_fused"):
        for kw in (dict(seg_lens=(1, 1, 1, 1), weight_indices=(0, 1, 1, 0), lora_ranks=(16, 8)),
                   dict(seg_lens=(15, 17), weight_indices=(1, 0), lora_ranks=(16, 16), permute=True)):
            res = []
            for seed in range(3):
                p = LoRAProblem(op=op, dtype="float16", H=2, qk=16, vd=16, C=32, R=16, scalings=(1.0, -0.5), seed=seed, **kw)
                v = check_case(t, Case(p), "cuda")
                res.append("ok" if v.ok else f"{v.kind}:{v.message[:150]}")
            print(conf, op, kw["seg_lens"], res, flush=True)
