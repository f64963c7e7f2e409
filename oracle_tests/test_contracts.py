"""Error contracts as data (OpInfo ``ErrorInput`` + one generic test), and the table itself.

Note [Contract tests]
---------------------
Every error row of ``fuzz.opinfo.OP_DB`` plus the rows of :data:`EXTRA_ERROR_INPUTS` below (the
strict contracts that the database does not exercise yet) runs through ONE test,
:func:`test_error_contract`: the reference must raise the contract's exact type and full text.
:func:`test_strict_off` runs the same rows with strict validation off: upstream errors still fire;
strict ones must not.  The remaining tests check the table (no text twice, SPEC.md's upstream
messages verbatim, resolution order) and the ordering rules between checks.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from kernel_oracle.harness.opinfo import OP_DB, ErrorInput, Sample
from kernel_oracle.harness.problems import Call, LoRAProblem, VisionProblem
from kernel_oracle.reference._helpers import describe_tensor
from kernel_oracle.reference.contracts import CONTRACTS, contract, strict_contracts, upstream_contracts

from oracle_tests._checks import reference_entry

REPO_ROOT = Path(__file__).resolve().parents[1]
SPEC = REPO_ROOT.parent / "shared" / "SPEC.md"


# ---- extra error rows: strict contracts the OpInfo database does not exercise (yet) ----------------

def _bi(call: Call):
    return next(a for a in call.args if hasattr(a, "seg_indptr"))


def _lora(op: str, **kw) -> Sample:
    fields = dict(op=op, seg_lens=(3, 4), weight_indices=(0, 1), lora_ranks=(16, 8), scalings=(1.0, 0.5), seed=5)
    fields.update(kw)
    return Sample(LoRAProblem(**fields), "extra")


def _vision(**kw) -> Sample:
    fields = dict(lengths=(3, 5), seed=9, path="kwargs")  # T=8, H=2, D=16, batch padded to 8
    fields.update(kw)
    return Sample(VisionProblem(**fields), "extra")


def _set_bi(name, value):
    def mutate(call: Call) -> None:
        setattr(_bi(call), name, value(_bi(call)) if callable(value) else value)
    return mutate


def _set_arg(index, value):
    def mutate(call: Call) -> None:
        args = list(call.args)
        args[index] = value(call)
        call.args = tuple(args)
    return mutate


def _set_packed(index, value):
    def mutate(call: Call) -> None:
        ind = call.args[3].clone()
        ind[index] = value(call)
        call.args = call.args[:3] + (ind,) + call.args[4:]
    return mutate


def _token(call: Call) -> int:
    return call.args[0].shape[1] * call.args[0].shape[2]


# (op, error input, runs with strict off): metadata rows must run cleanly with strict off; data
# rows (wrong shapes or dtypes) make upstream crash in its own way, so only "no strict error" holds
EXTRA_ERROR_INPUTS = [
    # batch_info.num_segments not an int
    ("step_a_q", ErrorInput(_lora("step_a_q"), "lora.strict.bad_count",
                            dict(field="num_segments", value="2.0", why="pass a non-negative Python int"),
                            _set_bi("num_segments", 2.0)), True),
    # seg_indptr starting below 0
    ("step_b_v", ErrorInput(_lora("step_b_v"), "lora.strict.seg_indptr_start", dict(value=-1),
                            lambda c: (_bi(c).seg_indptr.__setitem__(0, -1), setattr(_bi(c), "seg_lens", None))),
     True),
    # metadata tensor on another device than the data ("meta" stands in for a second GPU)
    ("step_a_v", ErrorInput(_lora("step_a_v"), "lora.strict.metadata_tensor",
                            lambda c: dict(field="seg_indptr", expected=f"on {c.args[0].device} (the data's device)",
                                           got=describe_tensor(_bi(c).seg_indptr),
                                           fix=f"pass seg_indptr.to('{c.args[0].device}')"),
                            _set_bi("seg_indptr", lambda bi: bi.seg_indptr.to("meta"))), False),
    # metadata tensor of the wrong rank
    ("q_side_fused", ErrorInput(_lora("q_side_fused"), "lora.strict.metadata_tensor",
                                lambda c: dict(field="seg_indptr", expected="1-D", got=describe_tensor(_bi(c).seg_indptr),
                                               fix="pass seg_indptr.view(-1)"),
                                _set_bi("seg_indptr", lambda bi: bi.seg_indptr.view(1, -1))), False),
    # base_output with a different head count than the activations
    ("step_b_q", ErrorInput(_lora("step_b_q"), "lora.strict.shape_mismatch",
                            lambda c: dict(field="base_output", got=(7, 3, 64), expected=(7, 2, 64),
                                           why="base_output is (S, H, output dim) of the step"),
                            _set_arg(3, lambda c: torch.randn(7, 3, 64, device=c.args[0].device))), False),
    # attn_output whose last dim is not kv_lora_rank
    ("v_side_fused", ErrorInput(_lora("v_side_fused"), "lora.strict.shape_mismatch",
                                dict(field="attn_output", got=(7, 2, 65), expected=(7, 2, 64),
                                     why="attn_output's last dim is kv_lora_rank"),
                                _set_arg(0, lambda c: torch.randn(7, 2, 65, device=c.args[0].device))), False),
    # an integer LoRA buffer
    ("step_a_v", ErrorInput(_lora("step_a_v"), "lora.strict.tensor_attr",
                            lambda c: dict(field="A_buf", expected="a floating-point torch.Tensor",
                                           got=describe_tensor(c.args[1]), fix="pass fp16, bf16, fp32 or fp64 data"),
                            _set_arg(1, lambda c: c.args[1].to(torch.int32))), False),
    # float packed indptrs (upstream converts them silently)
    ("vision", ErrorInput(_vision(), "vision.strict.metadata_tensor",
                          lambda c: dict(field="packed_indptrs", expected="int32 or int64", got=describe_tensor(c.args[3]),
                                         fix="pass packed_indptrs.to(torch.int32)"),
                          _set_arg(3, lambda c: c.args[3].to(torch.float32))), True),
    # k with another head dim than q
    ("vision", ErrorInput(_vision(), "vision.strict.shape_mismatch",
                          dict(field="k", got=(8, 2, 17), expected=(8, 2, 16),
                               why="q and k share shape (tokens, heads, head_dim)"),
                          _set_arg(1, lambda c: torch.randn(8, 2, 17, device=c.args[0].device))), False),
    # the output of sequence 1 (5 tokens) runs past the 8 output tokens
    ("vision", ErrorInput(_vision(), "vision.strict.offset_range",
                          lambda c: dict(field="o_indptr", index=1, value=4 * _token(c), length=5, start=4, tokens=8,
                                         tensor="the output"),
                          _set_packed(2 * 9 + 1, lambda c: 4 * _token(c))), True),
    # outputs of sequences 0 (tokens 0..2) and 1 (tokens 1..5) overlap
    ("vision", ErrorInput(_vision(), "vision.strict.output_overlap",
                          dict(index=1, start=1, end=5, other=0, other_start=0, other_end=2),
                          _set_packed(2 * 9 + 1, lambda c: 1 * _token(c))), True),
]

# every row, as data: (op, error input, runs cleanly with strict off)
ERROR_ROWS = [
    pytest.param(name, err, True, id=f"{name}-{i}-{err.contract_id}")
    for name, info in OP_DB.items()
    for i, err in enumerate(info.error_inputs("cpu"))
] + [
    pytest.param(name, err, clean, id=f"extra-{name}-{i}-{err.contract_id}")
    for i, (name, err, clean) in enumerate(EXTRA_ERROR_INPUTS)
]


def _run(name: str, call: Call, **extra):
    return reference_entry(OP_DB[name])(*call.args, **call.kwargs, **extra)


@pytest.mark.parametrize("name,err,clean", ERROR_ROWS)
def test_error_contract(name, err, clean, device):
    """The one generic contract test: exact type, exact full text, contract id."""
    call, message = err.build(device)
    row = contract(err.contract_id)
    with pytest.raises(Exception) as info:
        _run(name, call)
    assert type(info.value) is row.exc_type, f"expected {row.exc_type.__name__}, got {info.type.__name__}: {info.value}"
    assert str(info.value) == message
    assert getattr(info.value, "contract_id", None) == err.contract_id


@pytest.mark.parametrize("name,err,clean", ERROR_ROWS)
def test_strict_off(name, err, clean, device):
    """strict=False: upstream contracts still fire; strict ones never do (metadata rows run)."""
    call, message = err.build(device)
    if err.origin == "upstream":
        with pytest.raises(contract(err.contract_id).exc_type, match=re.escape(message)):
            _run(name, call, strict=False)
        return
    try:
        _run(name, call, strict=False)
    except Exception as exc:  # noqa: BLE001 - what matters is which error it is
        cid = getattr(exc, "contract_id", None)
        assert cid is None or contract(cid).origin == "upstream", f"strict error with strict off: {exc}"
        assert not clean, f"metadata that upstream accepts must run with strict off, got {exc!r}"


def test_every_contract_is_exercised():
    used = {p.values[1].contract_id for p in ERROR_ROWS}
    missing = sorted(set(CONTRACTS) - used)
    assert not missing, f"contracts without an error input: {missing}"


# ---- the table --------------------------------------------------------------------------------------

def test_no_message_text_twice():
    seen: dict[str, str] = {}
    for row in CONTRACTS.values():
        assert row.template not in seen, f"{row.id} repeats the text of {seen[row.template]}: {row.template!r}"
        seen[row.template] = row.id


def test_origins_and_types():
    assert all(c.exc_type is ValueError for c in strict_contracts())
    assert {c.exc_type for c in upstream_contracts("vision")} == {RuntimeError}
    orders = [c.order for c in upstream_contracts("vision")]
    assert orders == sorted(orders) and len(set(orders)) == len(orders), "vision rows listed in resolution order"


def _spec_upstream_messages(text: str) -> list[tuple[str, str, int | None]]:
    """(exception type, message, order) for every upstream message SPEC.md documents."""
    found = [(m.group(1), m.group(2), None) for m in re.finditer(r'`(ValueError|RuntimeError)\("([^"]+)"\)`', text)]
    section = re.search(r"Resolution order and exact errors \(all `(\w+)`\).*?\n(.*?)\n\n", text, re.S)
    assert section, "SPEC.md lost its 'Resolution order and exact errors' list"
    exc = section.group(1)
    items = re.split(r"\n(?=\d+\. )", section.group(2).strip())
    for item in items:
        order = int(item.split(".", 1)[0])
        item = " ".join(item.split())
        if item.endswith("`"):
            found.append((exc, item[item[:-1].rindex("`") + 1:-1], order))
    return found


def test_spec_upstream_messages_verbatim():
    if not SPEC.is_file():
        pytest.skip(f"SPEC.md not found at {SPEC} (it lives in the shared folder beside the checkout)")
    documented = _spec_upstream_messages(SPEC.read_text())
    assert len(documented) == 7, f"expected SPEC.md's 7 upstream messages, parsed {documented}"
    table = {c.template: c for c in upstream_contracts()}
    for exc, message, order in documented:
        assert message in table, f"SPEC.md's upstream message is not in the contract table verbatim: {message!r}"
        row = table[message]
        assert row.exc_type.__name__ == exc, f"{row.id}: SPEC.md says {exc}"
        assert row.order == order, f"{row.id}: SPEC.md puts it at step {order}, the table at {row.order}"
    assert len(table) == len(documented), "the table has upstream rows that SPEC.md does not document"


# ---- ordering between checks -------------------------------------------------------------------------

def _pop(name):
    return lambda c: c.kwargs.pop(name, None)


def _listify_indptrs(c: Call) -> None:
    if isinstance(c.args[3], torch.Tensor):
        c.args = c.args[:3] + (c.args[3].tolist(),) + c.args[4:]


def _listify_lengths(c: Call) -> None:
    if isinstance(c.kwargs.get("sequence_lengths"), torch.Tensor):
        c.kwargs["sequence_lengths"] = c.kwargs["sequence_lengths"].tolist()


def _truncate_indptrs(c: Call) -> None:
    c.args = c.args[:3] + (c.args[3][:-1],) + c.args[4:]


def _past_the_end(c: Call) -> None:
    ind = c.args[3].clone()
    ind[1] = (c.args[0].shape[0] - 4) * _token(c)  # sequence 1 (5 tokens) runs one token past q
    c.args = c.args[:3] + (ind,) + c.args[4:]


# upstream vision breakers, applied last-check-first so that they compose
VISION_BREAKERS = {
    8: ("vision.offset_out_of_bounds", _past_the_end),
    7: ("vision.indptr_numel_mismatch", _truncate_indptrs),
    6: ("vision.sequence_lengths_not_tensor", _listify_lengths),
    5: ("vision.indptrs_not_tensor", _listify_indptrs),
    3: ("vision.missing_max_seqlen", _pop("max_seqlen")),
    2: ("vision.missing_sequence_lengths", _pop("sequence_lengths")),
}
PAIRS = [(a, b) for a in VISION_BREAKERS for b in VISION_BREAKERS if a < b]


@pytest.mark.parametrize("first,second", PAIRS, ids=[f"{a}+{b}" for a, b in PAIRS])
def test_vision_upstream_order(first, second, device):
    """An input breaking two upstream checks gets the earlier one's error."""
    call = _vision().call(device)
    for order in (second, first):
        VISION_BREAKERS[order][1](call)
    row = contract(VISION_BREAKERS[first][0])
    assert row.order == first
    with pytest.raises(row.exc_type) as info:
        _run("vision", call)
    assert getattr(info.value, "contract_id", None) == row.id, str(info.value)


def test_metadata_without_packed_indptrs_falls_back_to_kwargs(device):
    """Step 1 applies only when forward_metadata.packed_indptrs is not None."""
    call = _vision(path="metadata").call(device)
    call.kwargs["forward_metadata"].packed_indptrs = None
    with pytest.raises(RuntimeError) as info:
        _run("vision", call)
    assert info.value.contract_id == "vision.missing_sequence_lengths"


STRICT_ROWS = [p for p in ERROR_ROWS if p.values[1].origin == "strict"]


@pytest.mark.parametrize("name,err,clean", STRICT_ROWS)
def test_upstream_before_strict(name, err, clean, device):
    """Break an upstream check on top of a strict one: upstream's error wins (vision: even the last
    upstream check, 8, comes before every strict one)."""
    call, _ = err.build(device)
    if OP_DB[name].family == "lora":
        _set_bi("max_len", None)(call)
        _set_bi("seg_lens", None)(call)
        want = "lora.missing_max_len"
    else:
        _past_the_end(call)
        want = "vision.offset_out_of_bounds"
    with pytest.raises(Exception) as info:
        _run(name, call)
    assert getattr(info.value, "contract_id", None) == want, f"{type(info.value).__name__}: {info.value}"


def test_docs_show_the_current_table():
    from kernel_oracle.contracts_doc import render_contracts

    doc = REPO_ROOT / "docs" / "reference.md"
    if not doc.is_file():
        pytest.skip(f"{doc} is not in this checkout")
    assert render_contracts() in doc.read_text(), (
        "docs/reference.md shows a stale contract table; regenerate it with `python -m kernel_oracle.contracts_doc`")
