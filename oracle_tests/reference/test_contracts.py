"""Error contracts as data (OpInfo ``ErrorInput`` + one generic test), and the table itself.

Note [Contract tests]
---------------------
Every error row of ``harness.opinfo.OP_DB`` (a valid sample, the mutations that break it, the exact
error) runs through ONE test, :func:`test_error_inputs`, against every target selected with
``--oracle-target`` (default: the reference and our Triton kernels): a target that implements strict
validation must raise the contract's exact type and full text for every row, a target that does
not (third-party code) for the upstream rows.  :func:`test_strict_off` runs the rows on the
reference with strict validation off: upstream errors still fire; strict ones must not.  The
remaining tests check the table (no text twice, the upstream messages of docs/semantics.md verbatim, resolution
order) and the ordering rules between checks, composing the same mutations.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernel_oracle.harness.mutations import Mutation
from kernel_oracle.harness.opinfo import OP_DB, Sample
from kernel_oracle.harness.problem_vision import VisionProblem
from kernel_oracle.reference.contracts import CONTRACTS, contract, strict_contracts, upstream_contracts

REPO_ROOT = Path(__file__).resolve().parents[2]
SEMANTICS = REPO_ROOT / "docs" / "semantics.md"


# every row, as data: (op, error input)
ERROR_ROWS = [
    pytest.param(name, err, id=f"{name}-{i}-{err.name}")
    for name, info in OP_DB.items()
    for i, err in enumerate(info.error_inputs("cpu"))
]


def _run(name: str, call, **extra):
    return OP_DB[name].reference(*call.args, **call.kwargs, **extra)


@pytest.mark.parametrize("name,err", ERROR_ROWS)
def test_error_inputs(name, err, fuzz_target, device):
    """The one generic contract test: exact type and exact full text, on every selected target
    (strict rows on targets with strict validation only); the contract id on the reference."""
    if not fuzz_target.has(name):
        pytest.skip(f"target {fuzz_target.name!r} has no entry point for {name}: "
                    f"{fuzz_target.notes.get(name, 'not exported')}")
    if err.origin == "strict" and not fuzz_target.strict:
        pytest.skip(f"target {fuzz_target.name!r} does not implement strict validation; only upstream rows apply")
    call, message = err.build(device)
    row = contract(err.contract_id)
    with pytest.raises(Exception) as info:
        fuzz_target.entry(name)(*call.args, **call.kwargs)
    assert type(info.value) is row.exc_type, f"expected {row.exc_type.__name__}, got {info.type.__name__}: {info.value}"
    assert str(info.value) == message
    if fuzz_target.name == "reference":
        assert getattr(info.value, "contract_id", None) == err.contract_id


@pytest.mark.parametrize("name,err", ERROR_ROWS)
def test_strict_off(name, err, device):
    """strict=False: upstream contracts still fire; strict ones never do (metadata rows run)."""
    call, message = err.build(device)
    if err.origin == "upstream":
        with pytest.raises(contract(err.contract_id).exc_type) as info:
            _run(name, call, strict=False)
        assert type(info.value) is contract(err.contract_id).exc_type and str(info.value) == message  # "" included
        return
    try:
        _run(name, call, strict=False)
    except Exception as exc:  # noqa: BLE001 - what matters is which error it is
        cid = getattr(exc, "contract_id", None)
        assert cid is None or contract(cid).origin == "upstream", f"strict error with strict off: {exc}"
        assert not err.runs_without_strict, f"metadata that upstream accepts must run with strict off, got {exc!r}"


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
    """(exception type, message, order) for every upstream message docs/semantics.md documents."""
    found = [(m.group(1), m.group(2), None) for m in re.finditer(r'`(ValueError|RuntimeError)\("([^"]+)"\)`', text)]
    section = re.search(r"Resolution order and exact errors \(all `(\w+)`\).*?\n(.*?)\n\n", text, re.S)
    assert section, "docs/semantics.md lost its 'Resolution order and exact errors' list"
    exc = section.group(1)
    items = re.split(r"\n(?=\d+\. )", section.group(2).strip())
    for item in items:
        order = int(item.split(".", 1)[0])
        item = " ".join(item.split())
        if item.endswith("`"):
            found.append((exc, item[item[:-1].rindex("`") + 1:-1], order))
    return found


def test_spec_upstream_messages_verbatim():
    documented = _spec_upstream_messages(SEMANTICS.read_text())
    assert len(documented) == 7, f"expected the 7 upstream messages of docs/semantics.md, parsed {documented}"
    table = {c.template: c for c in (*upstream_contracts("lora"), *upstream_contracts("vision"))}  # csgmv: docs/csgmv.md
    for exc, message, order in documented:
        assert message in table, f"docs/semantics.md's upstream message is not in the contract table verbatim: {message!r}"
        row = table[message]
        assert row.exc_type.__name__ == exc, f"{row.id}: docs/semantics.md says {exc}"
        assert row.order == order, f"{row.id}: docs/semantics.md puts it at step {order}, the table at {row.order}"
    assert len(table) == len(documented), "the table has upstream rows that docs/semantics.md does not document"


# ---- ordering between checks -------------------------------------------------------------------------

def _vision(**kw) -> Sample:
    fields = dict(lengths=(3, 5), seed=9, path="kwargs")  # T=8, H=2, D=16, batch padded to 8
    fields.update(kw)
    return Sample(VisionProblem(**fields), "order")


# upstream vision breakers by resolution order, applied last-check-first so that they compose
VISION_BREAKERS = {
    8: ("vision.offset_out_of_bounds", Mutation("vision", "qk_offset_out_of_bounds", 1, 1)),
    7: ("vision.indptr_numel_mismatch", Mutation("vision", "indptr_numel_mismatch")),
    6: ("vision.sequence_lengths_not_tensor", Mutation("vision", "sequence_lengths_as_list")),
    5: ("vision.indptrs_not_tensor", Mutation("vision", "indptrs_as_list")),
    3: ("vision.missing_max_seqlen", Mutation("vision", "drop_max_seqlen")),
    2: ("vision.missing_sequence_lengths", Mutation("vision", "drop_sequence_lengths")),
}
PAIRS = [(a, b) for a in VISION_BREAKERS for b in VISION_BREAKERS if a < b]


@pytest.mark.parametrize("first,second", PAIRS, ids=[f"{a}+{b}" for a, b in PAIRS])
def test_vision_upstream_order(first, second, device):
    """An input breaking two upstream checks gets the earlier one's error."""
    call = _vision().call(device)
    for order in (second, first):
        VISION_BREAKERS[order][1].apply(call)
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
# breaks an upstream check on top of a strict one: (mutation, the upstream contract it raises)
UPSTREAM_ON_TOP = {
    "lora": (Mutation("lora", "drop_max_len_and_seg_lens"), "lora.missing_max_len"),
    "vision": (VISION_BREAKERS[8][1], VISION_BREAKERS[8][0]),
    "csgmv": (Mutation("csgmv", "x_not_contiguous"), "csgmv.assert"),
}


@pytest.mark.parametrize("name,err", STRICT_ROWS)
def test_upstream_before_strict(name, err, device):
    """Break an upstream check on top of a strict one: upstream's error wins (vision: even the last
    upstream check, 8, comes before every strict one)."""
    call, _ = err.build(device)
    mutation, want = UPSTREAM_ON_TOP[OP_DB[name].family]
    mutation.apply(call)
    with pytest.raises(Exception) as info:
        _run(name, call)
    assert getattr(info.value, "contract_id", None) == want, f"{type(info.value).__name__}: {info.value}"


def test_docs_show_the_current_table():
    from kernel_oracle.jobs.contracts_doc import render_contracts

    doc = REPO_ROOT / "docs" / "reference.md"
    if not doc.is_file():
        pytest.skip(f"{doc} is not in this checkout")
    assert render_contracts() in doc.read_text(), (
        "docs/reference.md shows a stale contract table; regenerate it with `python -m kernel_oracle.jobs.contracts_doc`")
