"""The references against independent formulations, and every contract (``kernel-oracle selfcheck``).

Note [Selfcheck]
----------------
Before the suite trusts the references as oracles, it checks them: every OpInfo's sample inputs plus
``cases`` random variations per (op, dtype) (its ``random_inputs``) run through

* the float64 oracle, against its family's independent formulation (a formulation sharing no code with
  the reference, which the family's record names: ``Family.independent``, Note [Independent formulations]
  in :mod:`kernel_oracle.reference.independent_lora`): rows with ``dtype="float64"`` (the inputs come from each dtype's samples);
* the drop-in entry point with SGLang's signature in the sample's dtype, against the same float64
  formulation under the tolerance rule (baseline: the oracle's faithful mode): rows with the
  sample's dtype;
* every error input of the OpInfo database (a sample broken by its mutations): the exact
  exception type and full text (rows with ``dtype="-"``).

A family whose record names its own ``selfcheck`` rows (csgmv, whose oracle carries its own bound:
:mod:`kernel_oracle.jobs.selfcheck_csgmv`, Note [csgmv selfcheck]) is checked by them; their rows come
last, in the same format.

:func:`run_selfcheck` returns plain dicts (the main job builds on them), one per check, with keys

``op`` (OpInfo name), ``family`` (``"lora"``/``"vision"``/``"csgmv"``), ``dtype`` (``"float16"``, ...,
``"float64"`` or ``"-"`` for error rows), ``case`` (sample name, ``random-<i>`` or
``error:<contract id>#<i>``), ``passed`` (bool), ``err`` (greatest absolute error over the defined
region, float; None for error rows), ``allowed`` (the error the rule allows; None for error rows),
``ratio`` (``err/allowed`` elementwise worst; <= 1 passes; None for error rows) and ``message``
("" when passed, else what went wrong, reproducible from op/dtype/case/seed).
"""

from __future__ import annotations

import random
from typing import Iterator

import torch

__all__ = ["iter_selfcheck", "random_samples", "run_selfcheck", "summarize"]

_DTYPE_NAME = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32",
               torch.float64: "float64"}


def random_samples(info, dtype: torch.dtype, cases: int, seed: int) -> Iterator:
    """``cases`` random, well-formed problems for ``info`` (deterministic in ``seed``): its OpInfo's
    ``random_inputs``; none for a family with its own selfcheck rows (its record's ``selfcheck``)."""
    from kernel_oracle.harness.opinfo import Sample

    rng = random.Random(f"selfcheck-{seed}-{info.name}-{_DTYPE_NAME[dtype]}")
    if info.random_inputs is None:
        return
    for i in range(cases):
        yield Sample(info.random_inputs(info.name, rng, _DTYPE_NAME[dtype]), f"random-{i}")


def _row(info, dtype: str, case: str, passed: bool, err, allowed, ratio, message: str) -> dict:
    return {"op": info.name, "family": info.family, "dtype": dtype, "case": case, "passed": bool(passed),
            "err": err, "allowed": allowed, "ratio": ratio, "message": message}


def _check_sample(info, entry, sample, dtype: torch.dtype, device: str) -> list[dict]:
    from kernel_oracle.harness.family import FamilyError, get_family
    from kernel_oracle.reference.tolerance import compare

    rows = []
    call = sample.call(device)
    independent = get_family(info.family).resolve("independent")
    if independent is None:
        raise FamilyError(f"family {info.family!r} names no independent formulation to check its reference with; "
                          f"give its record an independent part, or selfcheck rows of its own")
    value, defined = independent(info.name, call.args, call.kwargs)
    # 1. the float64 oracle against the independent formulation (masks must agree too)
    oracle = info.oracle(*call.args, **call.kwargs)
    cmp = compare(oracle.value, value, defined, family=info.family, out_dtype=torch.float64,
                  what=f"{info.name} float64 oracle")
    same_mask = torch.equal(oracle.defined.cpu(), defined.cpu())
    msg = cmp.message if not cmp.ok else ""
    if not same_mask:
        msg = (f"defined region differs from the independent formulation: "
               f"{int((oracle.defined.cpu() & ~defined).sum())} extra, "
               f"{int((defined & ~oracle.defined.cpu()).sum())} missing elements. " + msg)
    rows.append(_row(info, "float64", f"{sample.name}[{_DTYPE_NAME[dtype]} inputs]", cmp.ok and same_mask,
                     cmp.err, cmp.allowed, cmp.ratio, msg))
    # 2. the drop-in entry point in the sample's dtype, under the tolerance rule
    call = sample.call(device)
    baseline = info.oracle(*call.args, faithful=True, **call.kwargs)
    out = entry(*call.args, **call.kwargs)
    out_dtype = call.args[call.inplace].dtype if call.inplace is not None else call.args[0].dtype
    cmp = compare(out, value, defined, family=info.family, baseline=baseline.baselines, out_dtype=out_dtype,
                  what=info.name)
    rows.append(_row(info, _DTYPE_NAME[dtype], sample.name, cmp.ok, cmp.err, cmp.allowed, cmp.ratio,
                     cmp.message))
    return rows


def _check_error(info, entry, i: int, err, device: str) -> dict:
    from kernel_oracle.reference.contracts import contract

    call, message = err.build(device)
    want = contract(err.contract_id).exc_type
    case = f"error:{err.contract_id}#{i}"
    try:
        entry(*call.args, **call.kwargs)
    except Exception as exc:  # noqa: BLE001 - the point is to see which exception it is
        if type(exc) is want and str(exc) == message:
            return _row(info, "-", case, True, None, None, None, "")
        return _row(info, "-", case, False, None, None, None,
                    f"expected {want.__name__}({message!r}), got {type(exc).__name__}({str(exc)!r})")
    return _row(info, "-", case, False, None, None, None, f"expected {want.__name__}({message!r}), nothing raised")


def run_selfcheck(device: str = "auto", cases: int = 2, seed: int = 0) -> list[dict]:
    """Run the references against the independent formulations and every error input.

    ``device``: ``"cpu"``, ``"cuda"`` or ``"auto"``; ``cases``: random variations per (op, dtype)
    on top of the OpInfo sample inputs; ``seed``: makes the variations reproducible.  Returns one
    dict per check (keys documented in the module docstring); an exception inside a check becomes
    a failed row, never an abort.
    """
    return list(iter_selfcheck(device, cases, seed))


def iter_selfcheck(device: str = "auto", cases: int = 2, seed: int = 0) -> Iterator[dict]:
    """:func:`run_selfcheck`'s rows, in the same order, each as soon as its check is done (a caller
    with a deadline stops between two checks, :func:`kernel_oracle.jobs.main_job_selfcheck.run_selfcheck_part`).
    Bad arguments raise at the call, before any check."""
    if isinstance(cases, bool) or not isinstance(cases, int) or cases < 0:
        raise ValueError(f"Expected cases to be a non-negative int but got cases={cases!r}")
    from kernel_oracle.harness.device import resolve_device

    return _rows(resolve_device(device), cases, seed)


def _rows(device: str, cases: int, seed: int) -> Iterator[dict]:
    from kernel_oracle.harness.opinfo import OP_DB

    from kernel_oracle.harness.family import families

    own = [f for f in families() if f.selfcheck is not None]  # a family whose record names its own rows
    for info in OP_DB.values():
        if info.family in {f.name for f in own}:
            continue
        entry = info.reference
        for dtype in info.dtypes:
            samples = [*info.sample_inputs(device, dtype), *random_samples(info, dtype, cases, seed)]
            for sample in samples:
                try:
                    rows = _check_sample(info, entry, sample, dtype, device)
                except Exception as exc:  # noqa: BLE001 - report it as a failed case
                    rows = [_row(info, _DTYPE_NAME[dtype], sample.name, False, None, None, None,
                                 f"raised {type(exc).__name__}: {exc}; problem={sample.problem!r}")]
                yield from rows
        for i, err in enumerate(info.error_inputs(device)):
            yield _check_error(info, entry, i, err, device)
    for family in own:  # csgmv: Note [csgmv selfcheck] in kernel_oracle/jobs/selfcheck_csgmv.py
        yield from family.resolve("selfcheck")(device, cases, seed)


def summarize(rows: list[dict]) -> str:
    """A plain-text table: op, dtype, cases, passed, max error ratio; then the failures."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["op"], r["dtype"]), []).append(r)
    header = f"{'op':<14} {'dtype':<9} {'cases':>6} {'passed':>7} {'max ratio':>10}"
    lines = [header, "-" * len(header)]
    for (op, dtype), rs in groups.items():
        ratios = [r["ratio"] for r in rs if r["ratio"] is not None]
        shown = f"{max(ratios):.3g}" if ratios else "-"
        lines.append(f"{op:<14} {dtype:<9} {len(rs):>6} {sum(r['passed'] for r in rs):>7} {shown:>10}")
    failed = [r for r in rows if not r["passed"]]
    lines.append("")
    lines.append(f"{len(rows) - len(failed)} / {len(rows)} checks passed")
    for r in failed:
        lines.append(f"FAILED {r['op']} {r['dtype']} {r['case']}: {r['message']}")
    return "\n".join(lines)
