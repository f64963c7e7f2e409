"""A family registered at run time (a toy third one, removed after each test) reaches every consumer that
reads the families registry: the command line's --op choices and defaults, matrix's --op, the main
job's families and warm-up rule, the problems read from files and the mutant table."""

from __future__ import annotations

import pytest

from kernel_oracle.cli import build_parser, options
from kernel_oracle.harness.families import Family, register_family, unregister_family


@pytest.fixture
def toy():
    record = register_family(Family(name="toy", ops=("toy_op",), label="toy",
                                    reference="kernel_oracle.reference.vision",
                                    problem="kernel_oracle.harness.problems:VisionProblem",
                                    strategies="kernel_oracle.fuzz.strategies:vision_problems",
                                    compiling_targets=("triton",)))
    try:
        yield record
    finally:
        unregister_family(record.name)


def _op_action(command: str):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.choices and command in a.choices).choices[command]
    return next(a for a in sub._actions if "--op" in a.option_strings)


def test_fuzz_op_choices_list_a_registered_family_and_its_ops(toy):
    choices = _op_action("fuzz").choices
    assert "toy" in choices and "toy_op" in choices
    args = build_parser().parse_args(["fuzz", "--targets", "reference", "--op", "toy_op", "--out", "unused"])
    assert args.op == "toy_op"


def test_fuzz_op_choices_lack_an_unregistered_family():
    assert "toy" not in _op_action("fuzz").choices
    assert set(_op_action("fuzz").choices) >= {"lora", "vision", "step_a_q", "v_side_fused", "csgmv", "csgmv_expand"}


def test_a_family_off_by_default_is_taken_only_where_named():
    """csgmv (by_default=False) is a --op choice everywhere but no command's default."""
    assert options.families("lora,csgmv") == ["lora", "csgmv"]
    for command in ("run", "mutants", "bench"):
        assert "csgmv" not in _op_action(command).default.split(","), command


def test_an_op_list_takes_a_registered_family(toy):
    assert options.families("lora,toy") == ["lora", "toy"]
    for command in ("run", "mutants", "bench"):
        assert _op_action(command).default == "lora,vision,toy", command


def test_an_op_list_refuses_an_unregistered_family():
    with pytest.raises(ValueError, match=r"\['toy'\] unknown; the only valid values are \['lora', 'vision', 'csgmv'\]"):
        options.families("toy")
    assert _op_action("run").default == "lora,vision"


def test_matrix_op_takes_a_registered_family_and_its_op(toy):
    from kernel_oracle.jobs.matrix import op_families

    assert op_families("toy") == ["toy"]
    assert op_families("toy_op") == ["toy"]
    assert op_families("lora,toy") == ["lora", "toy"]


def test_the_main_job_warms_up_what_a_family_record_names(toy):
    from kernel_oracle.jobs.main_job_campaigns import compiling

    assert compiling("triton", "toy") and compiling("triton", "lora")
    assert not compiling("reference", "toy") and not compiling("triton", "vision")


def test_a_problem_from_a_file_names_a_registered_family(toy):
    from kernel_oracle.harness.problems import VisionProblem, problem_from_dict

    assert isinstance(problem_from_dict({"family": "toy", "lengths": [3]}), VisionProblem)


def test_a_problem_from_a_file_refuses_an_unregistered_family():
    from kernel_oracle.harness.problems import problem_from_dict

    with pytest.raises(ValueError, match="family='toy' is unknown; the only valid values are 'lora', 'vision'"):
        problem_from_dict({"family": "toy", "lengths": [3]})


def test_the_mutant_table_takes_a_registered_family(toy):
    from kernel_oracle.fuzz.targets.mutants import MUTANTS, Mutant, MutantError

    patches = MUTANTS[0].patches
    assert Mutant("toy_mutant", "toy", "a toy family's planted bug", patches).family == "toy"
    with pytest.raises(MutantError, match="family='nope'; the only valid values are lora, vision, csgmv, toy"):
        Mutant("nope_mutant", "nope", "no such family", patches)
