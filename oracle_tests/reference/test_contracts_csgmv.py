"""The csgmv rows of the contract table (reference/contracts_csgmv.py): every row raises its exact type and
full text from the oracle, the upstream rows are what the release wheels raise, and strict validation is
what makes the malformed rows raise (a planted gap in it fails these checks).

The error sample (harness/opinfo_csgmv.py): ``x`` (6, 16), ``weights`` (2, 16, 16) for the shrink or
(2, 16, 8) for the expand, segments of 3 and 2 rows on slots 0 and 1, permutation (4, 0, 2, 1, 3), slices
at (0, 10, 16).
"""

from __future__ import annotations

import dataclasses
import functools
import zipfile

import pytest
import torch

from kernel_oracle.fuzz.targets.sglang_csgmv import CSGMV_FILES, load_csgmv
from kernel_oracle.harness.opinfo import OP_DB
from kernel_oracle.harness.problem_csgmv import CsgmvProblem
from kernel_oracle.reference import csgmv as csgmv_ref
from kernel_oracle.reference.contracts import CONTRACTS, Contract, ContractError, contract
from kernel_oracle.reference.contracts_csgmv import CSGMV_ROWS
from kernel_oracle.reference.csgmv import shrink_reference

from oracle_tests._sglang_releases import release_files, wheel_or_skip

CSGMV_OPS = ("csgmv_shrink", "csgmv_expand")
ROWS = [pytest.param(op, err, id=f"{op}-{i}-{err.name}")
        for op in CSGMV_OPS for i, err in enumerate(OP_DB[op].error_inputs("cpu"))]


def _mismatch(op: str, err, entry=None) -> str | None:
    """None when ``entry`` (default: the reference) raises ``err``'s exact type and full text (and, for the
    reference, its contract id), else what it did instead."""
    call, message = err.build("cpu")
    want = contract(err.contract_id).exc_type
    try:
        (entry or OP_DB[op].reference)(*call.args, **call.kwargs)
    except Exception as exc:  # noqa: BLE001 - which exception it is, is the point
        if type(exc) is not want or str(exc) != message:
            return f"raised {type(exc).__name__}({str(exc)!r}); expected {want.__name__}({message!r})"
        if entry is None and getattr(exc, "contract_id", None) != err.contract_id:
            return f"raised the text of {err.contract_id} under contract id {getattr(exc, 'contract_id', None)}"
        return None
    return f"nothing raised; expected {want.__name__}({message!r})"


def test_every_csgmv_row_is_registered_and_exercised():
    """The module's rows are in the table under api 'csgmv', and each has an error input of a csgmv op."""
    assert all(CONTRACTS[row.id] is row and row.api == "csgmv" for row in CSGMV_ROWS)
    used = {p.values[1].contract_id for p in ROWS}
    assert used == {row.id for row in CSGMV_ROWS}


@pytest.mark.parametrize("op,err", ROWS)
def test_each_row_raises_its_exact_type_and_full_text(op, err):
    assert _mismatch(op, err) is None


def test_upstream_rows_are_the_bare_assert_and_the_split_k_text():
    assert (contract("csgmv.assert").exc_type, contract("csgmv.assert").template) == (AssertionError, "")
    assert (contract("csgmv.split_k").exc_type, contract("csgmv.split_k").template) == \
        (ValueError, "split_k must be positive")
    assert {r.id for r in CSGMV_ROWS if r.origin == "upstream"} == {"csgmv.assert", "csgmv.split_k"}


@pytest.mark.parametrize("version", ["0.5.22", "0.5.23"])
def test_split_k_text_is_in_the_release_shrink_verbatim(version):
    """The release's shrink file (read from the wheel) raises ValueError with exactly the row's text."""
    with zipfile.ZipFile(wheel_or_skip(version)) as wheel:
        source = wheel.read(CSGMV_FILES["shrink"][0]).decode()
    assert 'raise ValueError("split_k must be positive")' in source


@functools.lru_cache(maxsize=None)
def _kernels(version: str):
    return load_csgmv(release_files(version))


UPSTREAM = [p for p in ROWS if p.values[1].origin == "upstream"]


@pytest.mark.parametrize("version", ["0.5.10", "0.5.23"])
@pytest.mark.parametrize("op,err", UPSTREAM)
def test_upstream_rows_are_what_the_releases_raise(version, op, err):
    """Each upstream row's error input, run through the release's own entry point (it raises before any
    launch), raises the same type and text as the oracle; 0.5.10's shrink has no split_k keyword."""
    if err.contract_id == "csgmv.split_k" and version == "0.5.10":
        pytest.skip("0.5.10's shrink takes no split_k (0.5.22+)")
    k = _kernels(version)
    assert _mismatch(op, err, k.shrink if op == "csgmv_shrink" else k.expand) is None


STRICT = [p for p in ROWS if p.values[1].origin == "strict"]


@pytest.mark.parametrize("op,err", STRICT[:3] + STRICT[-4:])
def test_a_gap_in_strict_validation_is_caught(op, err, monkeypatch):
    """Planted defect: strict validation that checks nothing.  The malformed inputs then no longer raise
    their row, which the check above reports."""
    monkeypatch.setattr(csgmv_ref, "check_batch_info", lambda *args: None)
    monkeypatch.setattr(csgmv_ref, "check_slices", lambda *args: None)
    assert _mismatch(op, err) is not None


def test_a_wrong_text_is_caught():
    """Planted defect: the split_k row's text with a changed word is reported, not passed."""
    err = next(p.values[1] for p in UPSTREAM if p.values[1].contract_id == "csgmv.split_k")

    def wrong(*args, **kwargs):
        raise ValueError("split_k must be > 0")

    assert _mismatch("csgmv_shrink", err, wrong) == ("raised ValueError('split_k must be > 0'); expected "
                                                     "ValueError('split_k must be positive')")


def test_a_row_of_an_unknown_api_is_refused():
    """A row names a family's name, and the table takes a family's own rows only (Note [Reference tables])."""
    from kernel_oracle.reference.registry import register_reference

    with pytest.raises(ContractError) as info:
        Contract("csgmv.other", ValueError, "y", "no api", "strict")
    assert str(info.value) == ("contract 'csgmv.other': api='no api'; pass the name of the family whose entry points "
                               "raise it, such as 'lora'")
    with pytest.raises(ValueError, match="is not a Contract of family 'csgmv2' \\(its api\\)"):
        register_reference("csgmv2", contract_rows=(Contract("csgmv.other", ValueError, "y", "nope", "strict"),))


def test_strict_off_cuts_a_long_segment_to_max_len_rows():
    """Strict validation off, a segment of 5 rows with max_len 4 (x (5, 16), weights (1, 8, 16)): the
    kernels' row tile computes rows 0..3 only, so row 4 is undefined in the shrink."""
    p = CsgmvProblem(op="csgmv_shrink", seg_lens=(5,), weight_indices=(0,), lora_ranks=(8,), scalings=(1.0,),
                     permutation=(0, 1, 2, 3, 4), K=16, R=8, max_len=16)
    call = p.materialize()
    bi = dataclasses.replace(call.args[2], max_len=4)
    got = shrink_reference(call.args[0], call.args[1], bi, 1, strict=False)
    assert got.defined.all(1).tolist() == [True, True, True, True, False]
    with pytest.raises(ValueError) as info:
        shrink_reference(call.args[0], call.args[1], bi, 1)
    assert str(info.value) == ("a segment has 5 rows but max_len (the kernels' row tile, BLOCK_M) is 4: the rows past "
                               "it are never computed; cut segments to at most max_len rows, as SGLang's chunking does")
    assert torch.equal(got.value[:4], shrink_reference(call.args[0], call.args[1], call.args[2], 1).value[:4])
