"""The families registry (harness.family; the built-in records of kernel_oracle.families): one record per kernel family, looked up by
name, listed in registration order, refused twice."""

from __future__ import annotations

import pytest

from kernel_oracle.harness.family import (FAMILY_OF, FAMILY_OPS, PARTS, Family, FamilyError, default_family_names,
                                          families, family_names, get_family, op_choices, register_family,
                                          unregister_family)
from kernel_oracle.harness.opinfo import OP_DB
from kernel_oracle.reference.contracts import CONTRACTS
from oracle_tests._toy_family import toy_family


def _toy(name: str = "toy", ops: tuple = ("toy_op",)) -> Family:
    return toy_family(name, ops)


@pytest.fixture
def toy():
    """A third family, registered for one test and removed after it."""
    record = register_family(_toy())
    try:
        yield record
    finally:
        unregister_family(record.name)


def test_the_builtin_families_are_lora_vision_then_csgmv():
    assert family_names() == ("lora", "vision", "csgmv")
    assert [f.name for f in families()] == ["lora", "vision", "csgmv"]
    # csgmv is fuzzed where --op names it; run, mutants and bench take the other two unless told
    assert default_family_names() == ("lora", "vision")


@pytest.mark.parametrize("name", ["lora", "vision", "csgmv"])
def test_each_builtin_family_has_the_ops_of_the_op_database(name):
    # the op database grouped by family, in its order: what each family's ops were before the registry
    assert get_family(name).ops == tuple(i.name for i in OP_DB.values() if i.family == name)


def test_the_builtin_records_resolve_their_pieces():
    from kernel_oracle.harness.problem_lora import LoRAProblem
    from kernel_oracle.harness.problem_vision import VisionProblem
    from kernel_oracle.reference import lora, vision

    assert get_family("lora").resolve("reference") is lora
    assert get_family("vision").resolve("reference") is vision
    assert get_family("lora").resolve("problem") is LoRAProblem
    assert get_family("vision").resolve("problem") is VisionProblem
    assert set(get_family("lora").contracts()) == {c.id for c in CONTRACTS.values() if c.api == "lora"}
    assert get_family("vision").contracts() and all(c.startswith("vision.") for c in get_family("vision").contracts())
    from kernel_oracle.harness.problem_csgmv import CsgmvProblem
    from kernel_oracle.reference import csgmv

    assert get_family("csgmv").resolve("reference") is csgmv
    assert get_family("csgmv").resolve("problem") is CsgmvProblem
    assert callable(get_family("csgmv").resolve("strategies"))


def test_a_registered_family_round_trips(toy):
    assert get_family("toy") is toy
    assert families()[-1] is toy and family_names()[-1] == "toy"
    assert FAMILY_OPS["toy"] == ("toy_op",)
    assert FAMILY_OF["toy_op"] == "toy" and FAMILY_OF["toy"] == "toy"
    assert {"toy", "toy_op"} <= set(op_choices())


def test_an_unregistered_family_is_gone():
    register_family(_toy())
    assert unregister_family("toy").name == "toy"
    assert "toy" not in family_names() and "toy" not in FAMILY_OPS and "toy_op" not in FAMILY_OF
    with pytest.raises(FamilyError, match="family='toy' is unknown; the only valid values are"):
        get_family("toy")


def test_a_duplicate_registration_is_refused_naming_the_family(toy):
    with pytest.raises(FamilyError, match=r"family 'toy' is already registered"):
        register_family(_toy())
    with pytest.raises(FamilyError, match=r"family 'lora' is already registered"):
        register_family(get_family("lora"))
    assert families().count(toy) == 1


def test_a_family_reusing_another_familys_op_is_refused(toy):
    with pytest.raises(FamilyError, match=r"family 'toy2' names \['toy_op'\], which family 'toy' already has"):
        register_family(_toy("toy2", ("toy_op",)))
    assert "toy2" not in family_names()


@pytest.mark.parametrize("kwargs, message", [
    (dict(name="Toy"), "lower-case identifier"),
    (dict(ops=()), "non-empty tuple"),
    (dict(ops=("a", "a")), "repeat a name"),
    (dict(problem=None), "problem=None; pass the part's loader"),
])
def test_a_malformed_record_says_why(kwargs, message):
    with pytest.raises(FamilyError, match=message):
        toy_family(**kwargs)


@pytest.mark.parametrize("part", PARTS)
def test_a_record_naming_a_module_as_a_string_is_refused(part):
    """A part named by an import path is an arrow neither a reader nor the import linter sees (Note [Families
    registry]): a record takes the part's loader, a function whose body imports it."""
    with pytest.raises(FamilyError) as exc:
        toy_family(**{part: "kernel_oracle.fuzz.strategies:vision_problems"})
    assert str(exc.value) == (f"Family 'toy': {part}='kernel_oracle.fuzz.strategies:vision_problems'; pass the part's "
                              f"loader, a function that imports the part and returns it (def _{part}(): from "
                              f"package.module import thing; return thing), never an import path")


@pytest.mark.parametrize("name", ["lora", "vision", "csgmv"])
def test_every_part_of_a_builtin_record_is_a_loader(name):
    record = get_family(name)
    for part in PARTS:
        loader = getattr(record, part)
        assert loader is None or (callable(loader) and not isinstance(loader, str)), (name, part, loader)
        assert loader is None or record.resolve(part) is not None, (name, part)


def test_resolve_names_the_parts():
    with pytest.raises(FamilyError, match=r"what='referenc'; the only valid values are \['reference', "):
        get_family("lora").resolve("referenc")
