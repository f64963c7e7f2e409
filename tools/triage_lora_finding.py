"""Explain a LoRA mismatch finding element by element, on the device where it was found.

``python tools/triage_lora_finding.py FINDINGS.jsonl [--target triton] [--device cuda]``

A finding's case is data (problem, seed, mutation), and the tensors are generated on the device, so a
CUDA finding must be triaged on a CUDA machine: the CPU draws other numbers.  For the first finding
in the file this runs the target and the oracle on the same call and prints, for the worst elements
(non-finite disagreements first): the target's value, the float64 reference, the faithful
baseline(s), the reference without its rounding points' range (Note [Range at rounding points] in
reference/lora.py) and the base value.  It shows which side of a dtype's range or
rounding boundary each number lies, and the verdict of the current rule with its message's last line.

``--faithful-seeds N`` instead judges the faithful oracle's own output (what a correct kernel with
SPEC's rounding points computes) on the finding's problem and N-1 more seeds, on any device, the CPU
included: if the rule rejects it, the finding is the rule's false alarm, not the target's bug.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("findings")
    ap.add_argument("--target", default="triton")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--faithful-seeds", type=int, default=0, metavar="N",
                    help="instead: judge the faithful oracle's own output (a correct kernel with SPEC's rounding "
                         "points) on the finding's problem and N-1 more seeds, on any device: a false-alarm screen")
    args = ap.parse_args(argv)
    if args.faithful_seeds:
        return faithful_screen(args.findings, args.device, args.faithful_seeds)

    from kernel_oracle.fuzz.targets import resolve_target
    from kernel_oracle.harness.check import prepared_call, case_from_dict, execute, expected_outcome
    from kernel_oracle.reference import lora as ref_lora
    from kernel_oracle.reference.tolerance import compare

    finding = json.loads(open(args.findings).readline())
    case = case_from_dict(finding["problem"])
    call = prepared_call(case, args.device)
    inplace = call.inplace
    base = call.args[inplace].detach().clone() if inplace is not None else None
    expected = expected_outcome(case, args.device, call=call)
    observed = execute(resolve_target(args.target, args.device), case, args.device, to_host=False)
    if observed.kind != "ok":
        print(f"the target {observed.kind}: {observed.exc_type}: {observed.message}")
        return 1
    keep = ref_lora._Arith.round
    ref_lora._Arith.round = lambda self, t, dtype: t.to(dtype).to(self.compute) if self.faithful else t
    try:
        unranged = expected_outcome(case, args.device, call=prepared_call(case, args.device)).value
    finally:
        ref_lora._Arith.round = keep
    want, defined = expected.value, expected.defined
    got = observed.output.to(want.device).double()
    disagree = (torch.isfinite(got) != torch.isfinite(want)) & defined
    err = torch.where(defined & torch.isfinite(got) & torch.isfinite(want), (got - want).abs(), torch.zeros_like(want))
    print(f"case: {finding.get('id')} {case.op} {case.dtype}, output {tuple(want.shape)}, "
          f"finite in one and not the other (target, float64) {int(disagree.sum())}, worst finite error {float(err.max()):.6g}")
    in_range = defined & torch.isfinite(want.to(observed.output.dtype).double())
    for i, b in enumerate(expected.baseline):
        off = in_range & ~torch.isfinite(b.to(want.device).double())
        far = want[off].abs()
        print(f"baseline {i}: not finite where the reference is in range: {int(off.sum())}"
              + (f", |reference| there {float(far.min()):.6g}..{float(far.max()):.6g}" if far.numel() else ""))
    verdict = compare(observed.output.to(want.device), want, defined, family="lora", baseline=expected.baseline,
                      overflow_alternate=expected.overflow_alternate)
    print(f"verdict of today's rule: ok={verdict.ok} mismatched={verdict.mismatched} "
          f"baseline_err={verdict.baseline_err} allowed={verdict.allowed:.6g}; {verdict.message.splitlines()[-1:]}")
    worst = torch.topk(err.flatten(), min(args.top, err.numel())).indices
    places = [tuple(int(i) for i in idx) for idx in disagree.nonzero()[:args.top]]  # non-finite disagreements first
    places += [tuple(int(i) for i in torch.unravel_index(j, want.shape)) for j in worst]
    for at in places[:args.top]:
        row = {"index": at, "target": float(got[at]), "float64": float(want[at]),
               "faithful": [float(b[at]) for b in expected.baseline], "unranged": float(unranged[at])}
        if base is not None:
            row["base"] = float(base[at])
        print(json.dumps(row))
    return 0


def faithful_screen(findings: str, device: str, seeds: int) -> int:
    """Exit 1 if today's rule rejects the faithful computation -- then the rule, not the target, is wrong --
    on the finding's problem (the seed as found, then the next ones; the numbers differ by device)."""
    import dataclasses

    from kernel_oracle.harness.check import Observed, prepared_call, case_from_dict, expected_outcome, judge

    case = case_from_dict(json.loads(open(findings).readline())["problem"])
    rejected = 0
    for shift in range(seeds):
        c = dataclasses.replace(case, problem=dataclasses.replace(case.problem, seed=case.problem.seed + shift))
        call = prepared_call(c, device)
        expected = expected_outcome(c, device, call=call)
        if expected.kind != "result":
            print(f"seed {c.problem.seed}: no result is expected ({expected.exc_type}); skipped")
            continue
        out = expected.baseline[0].to(expected.out_dtype)
        verdict = judge(c, expected, Observed("ok", output=out), call=call, device=device)
        alt = expected.overflow_alternate
        rejected += not verdict.ok
        print(f"seed {c.problem.seed}: faithful output {'passes' if verdict.ok else 'REJECTED'}; non-finite "
              f"{int((~torch.isfinite(out)).sum())}, overflow alternate inf "
              f"{0 if alt is None else int(torch.isinf(alt).sum())}; {(verdict.message or '').splitlines()[:1]}")
    return 1 if rejected else 0


if __name__ == "__main__":
    sys.exit(main())
