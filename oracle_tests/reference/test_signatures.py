"""The one op description: the signature table matches the code, and everything derives from it.

``reference.signatures.SIGNATURES`` is the only place an entry point's parameters, in-place
argument, batch info and metadata are written; these tests hold it to the functions it describes
(the reference's drop-in entry points and oracles, our Triton kernels) and check that the derived
tables (OpInfo, targets, campaigns, strategies) say the same.
"""

from __future__ import annotations

import inspect
import re

import pytest

import kernel_oracle.kernels.lora as klora
import kernel_oracle.kernels.vision as kvision
from kernel_oracle.fuzz.campaign import FAMILY_OF as CAMPAIGN_FAMILY_OF
from kernel_oracle.fuzz.strategies_lora import LORA_OPS as STRATEGY_LORA_OPS
from kernel_oracle.harness.opinfo import FAMILY_OF, FAMILY_OPS, OP_DB, entry_names
from kernel_oracle.harness.problems import Call, batch_info_of
from kernel_oracle.reference import lora as ref_lora
from kernel_oracle.reference.signatures import SIGNATURES, Signature, ops_of, signature, signature_of_entry

OPS = list(SIGNATURES)
KERNELS = {"lora": klora, "vision": kvision, "csgmv": None}  # csgmv: SGLang's kernels only, none of ours


def _sample_call(op: str, device):
    """A call of ``op``: its OpInfo's first sample, or for csgmv (no samples yet) a small problem's."""
    info = OP_DB[op]
    sample = next(iter(info.sample_inputs(device, info.dtypes[0])), None)
    if sample is not None:
        return sample.call(device)
    from kernel_oracle.harness.problem_csgmv import CsgmvProblem

    return CsgmvProblem(op, seg_lens=(2, 0, 1), weight_indices=(0, 1, 0), lora_ranks=(4, 0), scalings=(1.0, 0.5),
                        permutation=(2, 0, 1), num_slices=2, slice_offsets=(0, 6, 10)).materialize(device)


def _positional(fn) -> tuple[str, ...]:
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return tuple(p.name for p in inspect.signature(fn).parameters.values() if p.kind in kinds)


@pytest.mark.parametrize("op", OPS)
def test_table_matches_the_functions(op):
    """The reference entry point, the oracle and our kernel take the table's positional params
    (the table's keywords are keyword-or-positional params of the reference, after them)."""
    sig = SIGNATURES[op]
    info = OP_DB[op]
    reference_params = _positional(info.reference)
    assert reference_params[:len(sig.params)] == sig.params, f"{sig.entry}: {reference_params}"
    assert reference_params[len(sig.params):] == tuple(k for k in sig.keywords if k in reference_params), (
        f"{sig.entry}: keyword params {reference_params[len(sig.params):]} differ from the table's {sig.keywords}")
    assert _positional(info.oracle)[:len(sig.params)] == sig.params, f"{sig.oracle}"
    if KERNELS[sig.family] is not None:
        kernel = getattr(KERNELS[sig.family], sig.entry)
        assert _positional(kernel)[:len(sig.params)] == sig.params, f"kernels.{sig.family}.{sig.entry}"


@pytest.mark.parametrize("op", OPS)
def test_materialised_calls_follow_the_table(op, device):
    """A sample's call: the entry, the in-place index and the batch info where the table says."""
    info = OP_DB[op]
    call = _sample_call(op, device)
    sig = info.signature
    assert call.entry == sig.entry and call.signature is sig and len(call.args) == len(sig.params)
    assert call.inplace == sig.inplace_index
    if sig.batch_info is not None:
        assert batch_info_of(call) is call.args[sig.params.index("batch_info")]
        assert hasattr(batch_info_of(call), "seg_indptr")
    else:
        with pytest.raises(ValueError, match="takes no LoRA batch info"):
            batch_info_of(call)
    for name in sig.data:
        assert call.arg(name).is_floating_point(), f"{op}: data parameter {name} is not floating point"


def test_derived_tables():
    assert tuple(OP_DB) == tuple(SIGNATURES)
    assert FAMILY_OPS["lora"] == ops_of("lora") == ref_lora.LORA_OPS == STRATEGY_LORA_OPS
    assert FAMILY_OPS["vision"] == ops_of("vision") == ("vision",)
    assert entry_names() == {op: s.entry for op, s in SIGNATURES.items()}
    assert CAMPAIGN_FAMILY_OF == FAMILY_OF
    assert FAMILY_OPS["csgmv"] == ops_of("csgmv") == ("csgmv_shrink", "csgmv_expand")
    assert FAMILY_OF == {"lora": "lora", "vision": "vision", "csgmv": "csgmv",
                         **{op: s.family for op, s in SIGNATURES.items()}}
    assert [OP_DB[op].inplace_arg for op in ops_of("lora")] == [None, 3, None, 3, 4, 4]
    assert signature_of_entry("step_b_v_fwd") is SIGNATURES["step_b_v"]


def test_a_row_checks_itself():
    with pytest.raises(ValueError, match="inplace='out' is not one of its positional params"):
        Signature("x", "lora", "x_fwd", "x_oracle", ("a", "batch_info"), inplace="out", batch_info="batch_info",
                  routing_weight="a")
    with pytest.raises(ValueError, match="family='no family'; pass a family's name"):
        Signature("x", "no family", "x_fwd", "x_oracle", ("a",))
    with pytest.raises(ValueError, match="names both its batch_info and routing_weight"):
        Signature("x", "lora", "x_fwd", "x_oracle", ("a", "batch_info"), batch_info="batch_info")
    with pytest.raises(ValueError, match="names the indptrs parameter"):
        Signature("x", "vision", "x_fwd", "x_oracle", ("a",), keywords=("m",), metadata="m")
    with pytest.raises(ValueError, match="a parameter name repeats"):
        Signature("x", "vision", "x_fwd", "x_oracle", ("a", "a"), keywords=("m",), metadata="m", indptrs="a")


def test_the_tables_take_a_familys_rows_only_once_and_only_its_own():
    """Registration (Note [Reference tables] in reference/registry.py) refuses a row of another family, an op or
    entry point another family has, a duplicate contract id and a k that is no positive number, changing nothing."""
    from kernel_oracle.reference.contract_row import Contract
    from kernel_oracle.reference.contracts import CONTRACTS
    from kernel_oracle.reference.registry import ERROR_MULTIPLIER, register_reference, unregister_reference

    before = (dict(SIGNATURES), dict(CONTRACTS), dict(ERROR_MULTIPLIER))
    row = Signature("toy_op", "toy", "toy_fwd", "toy_oracle", ("a",))
    refused = {"is not a Signature of family 'toy'": dict(signatures=(SIGNATURES["vision"],)),
               "family 'lora' already has an op or entry point": dict(signatures=(
                   Signature("toy_op", "toy", "step_a_q_fwd", "toy_oracle", ("a",)),)),
               "is not a Contract of family 'toy'": dict(contract_rows=(CONTRACTS["lora.missing_max_len"],)),
               "duplicate contract id 'lora.missing_max_len'": dict(contract_rows=(
                   Contract("lora.missing_max_len", ValueError, "x", "toy", "upstream"),)),
               "error_multiplier=0 of family 'toy'": dict(signatures=(row,), error_multiplier=0)}
    for words, tables in refused.items():
        with pytest.raises(ValueError, match=re.escape(words)):
            register_reference("toy", **tables)
        assert (dict(SIGNATURES), dict(CONTRACTS), dict(ERROR_MULTIPLIER)) == before
    register_reference("toy", signatures=(row,), error_multiplier=3.0)
    try:
        assert SIGNATURES["toy_op"] is row and signature_of_entry("toy_fwd") is row and ERROR_MULTIPLIER["toy"] == 3.0
        with pytest.raises(ValueError, match="already has reference tables"):
            register_reference("toy")
    finally:
        unregister_reference("toy")
    assert (dict(SIGNATURES), dict(CONTRACTS), dict(ERROR_MULTIPLIER)) == before


def test_binding_by_name():
    sig = SIGNATURES["step_a_v"]
    assert sig.bind({"batch_info": 3, "A_buf": 2, "attn_output": 1}) == (1, 2, 3)
    with pytest.raises(ValueError, match=r"missing \['batch_info'\], unknown \['B_buf'\]"):
        sig.bind({"attn_output": 1, "A_buf": 2, "B_buf": 3})
    with pytest.raises(ValueError, match="takes no keyword"):
        Call.bind(sig, {"batch_info": 3, "A_buf": 2, "attn_output": 1}, {"softmax_scale": 1.0})
    with pytest.raises(ValueError, match="op='nope' is unknown; the only valid values are"):
        signature("nope")
