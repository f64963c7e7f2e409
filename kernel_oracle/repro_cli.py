"""``kernel-oracle repro``: re-run one saved finding (or a case given as JSON) against a target.

``kernel-oracle repro DIR/cases/<id>.pt --target T`` loads the call's saved tensors (not a
regeneration: the exact bytes the campaign used), computes the expected outcome with the reference,
runs the target in this process and prints the verdict.  ``--case JSON`` rebuilds the call from the
problem's seed instead (the form pytest failures print).  Exit codes: 1 the finding reproduces,
0 the target now passes, 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

__all__ = ["add_arguments", "main", "reproduce"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", nargs="?", help="a saved case, DIR/cases/<id>.pt (or its .json)")
    parser.add_argument("--case", default=None, help="the case as JSON ({'problem': ..., 'mutation': ...})")
    parser.add_argument("--target", required=True, help="the target to run it on")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="default: the saved device when available, else cpu")


def reproduce(*, target: str, path: str | None = None, case_json: str | None = None, device: str | None = None):
    """(verdict, case) of one saved or given case on ``target``."""
    import torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from kernel_oracle.harness.check import case_from_dict, execute, expected_outcome, judge
    from kernel_oracle.harness.problems import Call
    from kernel_oracle.fuzz.targets import resolve_target

    call = None
    if path is not None and path.endswith(".pt"):
        saved = torch.load(path, map_location=device, weights_only=False)
        case = case_from_dict(saved["case"])
        call = Call(saved["entry"], tuple(saved["args"]), dict(saved["kwargs"]), saved.get("inplace"))
    elif path is not None:
        with open(path) as fh:
            case = case_from_dict(json.load(fh))
    elif case_json is not None:
        case = case_from_dict(json.loads(case_json))
    else:
        raise ValueError("pass a saved case path or --case JSON")
    tgt = resolve_target(target, device)
    if not tgt.available:
        raise ValueError(f"target {target!r} is unavailable: {tgt.reason}")
    if call is None:
        from kernel_oracle.harness.check import _prepared_call

        call = _prepared_call(case, device)
    expected = expected_outcome(case, device, precision=tgt.precision_for(case.op), call=call)
    observed = execute(tgt, case, device, call=call)
    return judge(case, expected, observed, call=call, device=device), case


def main(args: argparse.Namespace) -> int:
    if args.path is None and args.case is None:
        print("kernel-oracle repro: error: pass DIR/cases/<id>.pt or --case JSON", file=sys.stderr)
        return 2
    try:
        verdict, case = reproduce(target=args.target, path=args.path, case_json=args.case, device=args.device)
    except (ValueError, OSError, KeyError) as exc:
        print(f"kernel-oracle repro: error: {exc}", file=sys.stderr)
        return 2
    print(f"case: {case!r}")
    print(f"expected: {verdict.expected}")
    if verdict.ok:
        print(f"PASS on {args.target}" + (f" (error ratio {verdict.ratio:.3g})" if verdict.ratio is not None else ""))
        return 0
    print(f"REPRODUCED [{verdict.kind}] on {args.target}:\n{verdict.message}")
    return 1
