"""A family registered at run time (a toy third one, removed after each test) reaches every consumer that
reads the families registry: the command line's --op lists and defaults, matrix's --op, the main
job's families and warm-up rule, the problems read from files and the mutant table; and a record's own
``cases``, ``selfcheck`` rows and ``mismatch`` comparison are what the strategies, the selfcheck and the
verdict use."""

from __future__ import annotations

import pytest

from kernel_oracle.cli import build_parser, options
from kernel_oracle.harness.family import register_family, unregister_family
from oracle_tests._toy_family import toy_family


@pytest.fixture
def toy():
    record = register_family(toy_family(compiling_targets=("triton",)))
    try:
        yield record
    finally:
        unregister_family(record.name)


def _op_action(command: str):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.choices and command in a.choices).choices[command]
    return next(a for a in sub._actions if "--op" in a.option_strings)


def test_fuzz_op_takes_a_registered_family_and_its_ops(toy):
    for op in ("toy", "toy_op"):
        args = build_parser().parse_args(["fuzz", "--targets", "reference", "--op", op, "--out", "unused"])
        assert args.op == "toy"  # the one op of the family is the family


def test_fuzz_op_refuses_an_unregistered_family(capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["fuzz", "--targets", "reference", "--op", "toy", "--out", "unused"])
    assert exc.value.code == 2 and "names ['toy'], which no family has" in capsys.readouterr().err
    args = build_parser().parse_args(["fuzz", "--targets", "reference", "--op", "step_b_q,step_a_q", "--out", "o"])
    assert args.op == "step_a_q,step_b_q"


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
    with pytest.raises(ValueError, match=r"names \['toy'\], which no family has; the only valid values are the "
                                         r"families \['lora', 'vision', 'csgmv'\]"):
        options.families("toy")
    assert _op_action("run").default == "lora,vision"


def test_matrix_op_takes_a_registered_family_and_its_op(toy):
    assert list(options.op_list("toy")) == ["toy"]
    assert list(options.op_list("toy_op")) == ["toy"]
    assert list(options.op_list("lora,toy")) == ["lora", "toy"]


def test_the_main_job_warms_up_what_a_family_record_names(toy):
    from kernel_oracle.jobs.main_job_campaigns import compiling

    assert compiling("triton", "toy") and compiling("triton", "lora")
    assert not compiling("reference", "toy") and not compiling("triton", "vision")


def test_a_problem_from_a_file_names_a_registered_family(toy):
    from kernel_oracle.harness.problems import problem_from_dict
    from kernel_oracle.harness.problem_vision import VisionProblem

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


def _planted_cases(*, ops, dtypes, declines, categories, limits, big, tiles):
    """A record's ``cases``: records what it was asked and draws one marker."""
    import hypothesis.strategies as st

    return st.just(("planted cases", ops, tuple(dtypes), tuple(declines), tuple(categories), limits, big, tiles))


def _planted_selfcheck(device, cases, seed):
    yield {"op": "toy_op", "family": "toy", "case": f"planted {device} {cases} {seed}", "passed": True}


def _planted_mismatch(baseline, actual, out_dtype, repro=""):
    return "a planted comparison"


def test_a_records_own_cases_are_what_cases_draws():
    """``cases(family)`` hands a family with its own ``cases`` everything asked, and draws what it returns."""
    from hypothesis import find

    from kernel_oracle.fuzz.strategies import cases

    record = register_family(toy_family(cases=lambda: _planted_cases))
    try:
        drawn = find(cases("toy", ops=("toy_op",), dtypes=("float32",), declines=("x",), categories=("valid",),
                           limits="medium", big=True, tiles={"model": "toy"}), lambda _: True)
    finally:
        unregister_family(record.name)
    assert drawn == ("planted cases", ("toy_op",), ("float32",), ("x",), ("valid",), "medium", True, {"model": "toy"})


def test_a_records_own_selfcheck_rows_come_after_the_generic_loop(monkeypatch):
    import kernel_oracle.harness.family as registry
    import kernel_oracle.harness.opinfo as opinfo
    from kernel_oracle.jobs.selfcheck import run_selfcheck

    toy = toy_family(selfcheck=lambda: _planted_selfcheck)
    monkeypatch.setattr(registry, "families", lambda: (toy,))
    monkeypatch.setattr(opinfo, "OP_DB", {})  # no generic rows: only what the record names
    assert [r["case"] for r in run_selfcheck("cpu", cases=3, seed=5)] == ["planted cpu 3 5"]


def test_a_records_own_comparison_judges_its_outputs():
    """The csgmv record's ``mismatch`` is what judges a csgmv output: a record whose comparison always objects
    fails the reference itself, and the real record passes it."""
    import dataclasses

    from kernel_oracle.fuzz.targets import resolve_target
    from kernel_oracle.harness.check import Case, check_case
    from kernel_oracle.harness.family import families, get_family
    from kernel_oracle.harness.problem_csgmv import CsgmvProblem

    problem = CsgmvProblem(op="csgmv_shrink", seg_lens=(3, 2), weight_indices=(0, 1), lora_ranks=(4, 2),
                           scalings=(1.0, 0.5), permutation=(0, 1, 2, 3, 4), num_slices=1, slice_offsets=(0, 8),
                           K=16, R=4, max_len=16, dtype="float32", seed=3)
    target = resolve_target("reference")
    assert check_case(target, Case(problem)).ok
    order = [f.name for f in families()]
    real = unregister_family("csgmv")
    try:
        register_family(dataclasses.replace(real, mismatch=lambda: _planted_mismatch))
        verdict = check_case(target, Case(problem))
    finally:
        unregister_family("csgmv")
        register_family(real)
    assert [f.name for f in families()] == order and get_family("csgmv") is real
    assert not verdict.ok and "a planted comparison" in verdict.message


def test_the_shared_modules_read_each_family_from_its_problem_and_record():
    """materialize, the size bounds, the example size, the shape class, the simplifications and the feature
    variants of a problem are its own methods: a planted problem class is what the shared modules call."""
    from kernel_oracle.harness.check import shape_class
    from kernel_oracle.harness.malformed import case_elements
    from kernel_oracle.harness.problem_dict import _check_sizes
    from kernel_oracle.harness.problems import materialize
    from kernel_oracle.harness.simplify import features, simplifications

    class Planted:
        family = "toy"

        def materialize(self, device, metadata_helper=None):
            return ("called", device, metadata_helper)

        def sizes(self):
            return {"n": -1}, 0

        def example_size(self):
            return 42

        def shape_class(self):
            return "planted"

        def simplifications(self):
            return iter(("smaller",))

        def feature_variants(self):
            return {"permutation": "plainer"}

    p = Planted()
    assert materialize(p, "cpu", "helper") == ("called", "cpu", "helper")
    with pytest.raises(ValueError, match="n=.* is negative"):
        _check_sizes(type("P", (Planted,), {"n": -1})())
    assert case_elements(_CaseLike(p)) == 42
    assert shape_class(_CaseLike(p)) == "planted"
    assert [c.problem for c in simplifications(_CaseLike(p))] == ["smaller"]
    assert [(n, c.problem) for n, c in features(_CaseLike(p))] == [("permutation", "plainer")]


class _CaseLike:
    """What simplify reads of a case: the problem and the mutation, rebuilt by its type."""

    def __init__(self, problem, mutation=None):
        self.problem, self.mutation = problem, mutation
