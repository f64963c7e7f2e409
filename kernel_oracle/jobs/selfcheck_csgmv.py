"""The csgmv oracle against its independent formulation, and its contract rows (part of ``kernel-oracle selfcheck``).

Note [csgmv selfcheck]
----------------------
Every csgmv OpInfo's samples (:func:`kernel_oracle.harness.opinfo_csgmv.csgmv_samples`) plus ``cases``
random batches per (op, dtype) (:func:`random_csgmv_samples`) run through

* the float64 oracle (:func:`kernel_oracle.reference.csgmv.shrink_reference` /
  ``expand_reference``) against :func:`kernel_oracle.reference.independent_csgmv.csgmv_independent`
  (a per-token loop of matrix-vector products): the defined regions must be equal and the values within
  the oracle's own bound in float64 (``(terms + 2) * eps * magnitude``): rows with ``dtype="float64"``;
* the drop-in entry point in the sample's dtype against the independent value, under the same bound in
  that dtype: rows with the sample's dtype;
* every error input of the csgmv OpInfos: the exact type and full text (rows with ``dtype="-"``).

The rows have the keys of Note [Selfcheck] in :mod:`kernel_oracle.jobs.selfcheck`, which appends them
to its own; ``err`` is the largest error over the defined region, ``allowed`` the bound there and
``ratio`` the worst ``err / allowed`` entry.
"""

from __future__ import annotations

import random
from typing import Iterator

import torch

__all__ = ["csgmv_rows", "random_csgmv_samples"]

_DTYPE_NAME = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}


def _row(info, dtype: str, case: str, passed: bool, err=None, allowed=None, ratio=None, message: str = "") -> dict:
    return {"op": info.name, "family": info.family, "dtype": dtype, "case": case, "passed": bool(passed),
            "err": err, "allowed": allowed, "ratio": ratio, "message": message}


def random_csgmv_samples(info, dtype: torch.dtype, cases: int, seed: int) -> Iterator:
    """``cases`` random, well-formed csgmv batches for ``info`` (deterministic in ``seed``): 1-3 slots,
    tokens ordered by slot and cut into chunks of ``max_len`` rows, a scattered permutation, unrouted rows."""
    from kernel_oracle.fuzz.strategies_csgmv import chunked
    from kernel_oracle.harness.opinfo_rows import Sample
    from kernel_oracle.harness.problem_csgmv import CsgmvProblem

    rng = random.Random(f"selfcheck-{seed}-{info.name}-{_DTYPE_NAME[dtype]}")
    for i in range(cases):
        slots, R, chunk = rng.randint(1, 3), rng.choice((4, 8)), rng.choice((2, 4, 16))
        lens, segment_slots, _ = chunked([rng.randrange(slots) for _ in range(rng.randint(1, 12))], chunk)
        unrouted = rng.randint(0, 2)
        physical = rng.sample(range(sum(lens) + unrouted), sum(lens))
        num_slices = rng.randint(1, 3)
        offsets = [0]
        for _ in range(num_slices):
            offsets.append(offsets[-1] + rng.randint(1, 12))
        yield Sample(CsgmvProblem(
            op=info.name, seg_lens=tuple(lens), weight_indices=tuple(segment_slots),
            lora_ranks=tuple(rng.choice((0, 1, R // 2, R, R + 2)) for _ in range(slots)),
            scalings=tuple(rng.choice((1.0, 0.5, -1.25, 2.0)) for _ in range(slots)), permutation=tuple(physical),
            num_slices=num_slices, slice_offsets=tuple(offsets), K=rng.choice((8, 16, 24)), R=R, max_len=chunk,
            unrouted_rows=unrouted, dtype=_DTYPE_NAME[dtype], seed=rng.randrange(2**31),
            base=rng.choice(("buffer", "view", "none")) if info.name == "csgmv_expand" else "buffer"),
            f"random-{i}")


def _measure(expected, actual: torch.Tensor) -> tuple[float, float, float]:
    """(largest error, largest allowance, worst ratio) over the defined region of ``expected`` (a CsgmvExpected)."""
    unit = torch.finfo(actual.dtype).eps
    allowed = (expected.terms + 2) * unit * expected.magnitude + torch.finfo(actual.dtype).tiny
    err = (actual.detach().to("cpu", torch.float64) - expected.value).abs()
    d = expected.defined
    if not bool(d.any()):
        return 0.0, 0.0, 0.0
    return float(err[d].max()), float(allowed[d].max()), float((err[d] / allowed[d]).max())


def _check_sample(info, sample, dtype: torch.dtype, device: str) -> list[dict]:
    from kernel_oracle.reference.csgmv import CsgmvExpected
    from kernel_oracle.reference.independent_csgmv import csgmv_independent

    call = sample.call(device)
    value, defined = csgmv_independent(info.name, call.args, call.kwargs)
    oracle = info.oracle(*call.args, **call.kwargs)
    rows = []
    # 1. the float64 oracle against the independent formulation (same defined region, values within its bound)
    why = oracle.mismatch(value) if torch.equal(oracle.defined, defined) else (
        f"defined region differs from the independent formulation: {int((oracle.defined & ~defined).sum())} extra, "
        f"{int((defined & ~oracle.defined).sum())} missing entries")
    err, allowed, ratio = _measure(oracle, value)
    rows.append(_row(info, "float64", f"{sample.name}[{_DTYPE_NAME[dtype]} inputs]", why is None, err, allowed, ratio,
                     why or ""))
    # 2. the drop-in entry point in the sample's dtype, under the oracle's bound around the independent value
    call = sample.call(device)
    out = info.reference(*call.args, **call.kwargs)
    independent = CsgmvExpected(value, defined, oracle.magnitude, oracle.terms)
    why = independent.mismatch(out)
    err, allowed, ratio = _measure(independent, out)
    rows.append(_row(info, _DTYPE_NAME[dtype], sample.name, why is None, err, allowed, ratio, why or ""))
    return rows


def _check_error(info, i: int, err, device: str) -> dict:
    from kernel_oracle.reference.contracts import contract

    call, message = err.build(device)
    want = contract(err.contract_id).exc_type
    case, expected = f"error:{err.contract_id}#{i}", f"expected {want.__name__}({message!r})"
    try:
        info.reference(*call.args, **call.kwargs)
    except Exception as exc:  # noqa: BLE001 - which exception it is, is the point
        if type(exc) is want and str(exc) == message:
            return _row(info, "-", case, True)
        return _row(info, "-", case, False, message=f"{expected}, got {type(exc).__name__}({str(exc)!r})")
    return _row(info, "-", case, False, message=f"{expected}, nothing raised")


def csgmv_rows(device: str, cases: int, seed: int) -> Iterator[dict]:
    """The rows of Note [csgmv selfcheck] on ``device``, each as soon as its check is done; an exception
    inside a check becomes a failed row."""
    from kernel_oracle.harness.opinfo import OP_DB

    for info in (i for i in OP_DB.values() if i.family == "csgmv"):
        for dtype in info.dtypes:
            for sample in [*info.sample_inputs(device, dtype), *random_csgmv_samples(info, dtype, cases, seed)]:
                try:
                    rows = _check_sample(info, sample, dtype, device)
                except Exception as exc:  # noqa: BLE001 - report it as a failed case
                    rows = [_row(info, _DTYPE_NAME[dtype], sample.name, False,
                                 message=f"raised {type(exc).__name__}: {exc}; problem={sample.problem!r}")]
                yield from rows
        for i, err in enumerate(info.error_inputs(device)):
            yield _check_error(info, i, err, device)
