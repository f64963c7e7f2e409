"""The command line's options (Note [Options] in ``kernel_oracle.cli.options``): one name per concept
in every subcommand (the op family ``--op``, a case count ``--cases``, the results' directory ``--out``,
``--targets``, ``--time``), and no other spelling."""

from __future__ import annotations

import argparse

import pytest

from kernel_oracle.cli import SUBCOMMANDS, build_parser
from kernel_oracle.cli.options import LIMIT_PRESETS
from kernel_oracle.harness.device import DEVICE_CHOICES
from kernel_oracle.harness.targets import TargetSpec


def _subparsers() -> dict:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def _flags(parser: argparse.ArgumentParser) -> dict:
    return {flag: action for action in parser._actions for flag in action.option_strings}


def test_every_subcommand_is_a_module_of_the_cli_package():
    assert set(_subparsers()) == set(SUBCOMMANDS) == {"run", "selfcheck", "fuzz", "mutants", "repro", "report",
                                                       "compare", "bench", "matrix"}


# one concept, one spelling: the old names must not be options of any subcommand
RETIRED = ("--target", "--time-budget", "--seconds", "--no-progress", "--main-budget", "--warm-up-s", "--family",
           "--families", "--budget", "--max-examples", "--warmup-cases")


def test_one_name_per_concept_across_subcommands():
    for name, parser in _subparsers().items():
        flags = _flags(parser)
        assert not set(RETIRED) & set(flags), (name, sorted(set(RETIRED) & set(flags)))
        if "--device" in flags:
            assert tuple(flags["--device"].choices) == DEVICE_CHOICES and flags["--device"].default == "auto", name
        if "--limits" in flags:
            assert tuple(flags["--limits"].choices) == LIMIT_PRESETS, name
    with_device = {n for n, p in _subparsers().items() if "--device" in _flags(p)}
    assert with_device == {"run", "selfcheck", "fuzz", "mutants", "repro", "bench", "matrix"}


def test_the_limit_presets_are_the_strategies_presets():
    from kernel_oracle.fuzz.strategies import LIMITS

    assert set(LIMIT_PRESETS) == set(LIMITS)


def test_targets_are_parsed_once_into_specs():
    args = build_parser().parse_args(["fuzz", "--targets", "triton@vision_fp32=tf32,sglang==0.5.23", "--targets",
                                      "reference", "--op", "lora", "--out", "o"])
    assert args.targets == [TargetSpec.parse("triton@vision_fp32=tf32"), TargetSpec.parse("sglang==0.5.23"),
                            TargetSpec.parse("reference")]


# (subcommand, the rest of a valid command line) of every retired spelling a command had
RETIRED_USES = [("run", ["--time-budget", "60"]), ("run", ["--families", "lora"]),
                ("fuzz", ["--target", "reference", "--op", "lora", "--out", "o"]),
                ("fuzz", ["--targets", "reference", "--op", "lora", "--out", "o", "--budget", "5"]),
                ("fuzz", ["--targets", "reference", "--op", "lora", "--out", "o", "--no-progress"]),
                ("matrix", ["--targets", "sglang==0.5.23", "--budget", "5"]), ("repro", ["x.pt", "--target", "triton"]),
                ("bench", ["--seconds", "5"]), ("bench", ["--warmup-cases", "2"]), ("bench", ["--families", "lora"]),
                ("bench", ["--main-budget", "0"]), ("mutants", ["--max-examples", "5"]), ("mutants", ["--family", "lora"])]


@pytest.mark.parametrize("command, argv", RETIRED_USES, ids=[f"{c}-{next(a for a in v if a in RETIRED)}"
                                                             for c, v in RETIRED_USES])
def test_a_retired_spelling_is_an_unknown_option(capsys, command, argv):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([command, *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    # refused: unknown, or (without the option it replaced) a required option missing; never a prefix match
    assert err.count("\n") == 1 and ("unrecognized arguments" in err or "required: --targets" in err), err


@pytest.mark.parametrize("command, argv, dest, value", [
    ("fuzz", ["--targets", "reference", "--op", "lora", "--out", "o", "--cases", "5"], "cases", 5),
    ("matrix", ["--targets", "sglang==0.5.23", "--cases", "5"], "cases", 5),
    ("selfcheck", ["--cases", "3"], "cases", 3),
    ("mutants", ["--cases", "7"], "cases", 7),
    ("bench", ["--cases", "2"], "cases", 2),
    ("run", ["--op", "lora"], "op", "lora"),
    ("bench", ["--op", "vision"], "op", "vision"),
    ("mutants", ["--op", "lora"], "op", "lora"),
    ("matrix", ["--targets", "sglang==0.5.23", "--op", "lora,vision"], "op", "lora,vision"),
    ("bench", ["--out", "reports/out"], "out", "reports/out"),
    ("run", ["--time", "9"], "time_s", 9.0),
    ("bench", ["--time", "9"], "time_s", 9.0),
    ("fuzz", ["--targets", "reference", "--op", "lora", "--out", "o", "--time", "9"], "time_s", 9.0),
])
def test_one_spelling_per_concept(command, argv, dest, value):
    assert getattr(build_parser().parse_args([command, *argv]), dest) == value


def test_help_and_usage_errors_name_the_one_spelling(capsys):
    help_text = _subparsers()["fuzz"].format_help()
    assert "--targets" in help_text and "--target " not in help_text and "--no-progress" not in help_text
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["fuzz", "--op", "lora", "--out", "o"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("kernel-oracle fuzz: error: the following arguments are required: --targets ")
    assert "--target " not in err and err.count("\n") == 1


def test_compare_takes_a_directory_as_report_does(tmp_path, capsys):
    """``report`` and ``compare`` name a result the same way: a record file, or the directory holding one
    (a campaign's summary.json, the main job's latest.json)."""
    from kernel_oracle.cli import main as cli_main
    from kernel_oracle.harness.schema import save
    from oracle_tests._sample_record import sample_record

    campaign, job = tmp_path / "campaign", tmp_path / "job"
    campaign.mkdir()
    job.mkdir()
    save(sample_record("campaign", findings=False), campaign / "summary.json")
    save(sample_record("main", findings=False), job / "latest.json")
    assert cli_main(["compare", str(campaign), str(campaign / "summary.json")]) == 0, capsys.readouterr().err
    assert cli_main(["compare", str(job), str(job)]) == 0, capsys.readouterr().err
    assert cli_main(["compare", str(tmp_path), str(job)]) == 2
    assert "holds no summary.json (a campaign) or latest.json (the main job)" in capsys.readouterr().err


def test_the_main_jobs_summary_counts_selfcheck_rows_apart_from_fuzz_cases(capsys):
    """The main job printed "23437 cases": 11120 selfcheck rows added to 12317 fuzz cases; and a validation
    gap is neither a passed nor a failed case."""
    from kernel_oracle.cli.run import _report
    from kernel_oracle.harness.schema import SELFCHECK_TARGET, add_group
    from kernel_oracle.reports.model import Result
    from oracle_tests._sample_record import sample_record

    rec = sample_record("main", findings=False)  # 96 fuzz cases, all passed
    add_group(rec, target="triton", op="step_a_q", dtype="float16", shape_class="malformed", cases=10, passes=6, gaps=4)
    add_group(rec, target=SELFCHECK_TARGET, op="step_a_q", dtype="float32", shape_class="sample", cases=7, passes=7)
    _report({"record": rec, "json": "j", "md": "m", "html": "h", "history": "y"})
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("106 fuzz cases (102 passed, 4 validation gaps), 7 selfcheck rows (7 passed), 0 findings")
    model = Result.from_dict(rec)
    assert (model.fuzz_cases, model.selfcheck_rows, model.gaps) == (106, 7, 4)
    from kernel_oracle.reports.render_md import render_markdown

    md = render_markdown(model)
    assert "| cases | passed | validation gaps | selfcheck rows | findings |" in md
    assert "| 106 | 102 | 4 | 7 (7 passed) | 0 |" in md


def _one_letter_apart(a: str, b: str) -> bool:
    """``a`` and ``b`` differ by one letter added, dropped or changed."""
    if abs(len(a) - len(b)) > 1 or a == b:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b)) == 1
    short, long_ = sorted((a, b), key=len)
    return any(long_[:i] + long_[i + 1:] == short for i in range(len(long_)))


def test_no_two_options_differ_by_one_letter():
    """``--seed`` beside ``--seeds`` (or ``--case`` beside ``--cases``) is one typo from the other option."""
    flags = sorted({f for p in _subparsers().values() for f in _flags(p) if f.startswith("--")})
    close = [(a, b) for i, a in enumerate(flags) for b in flags[i + 1:] if _one_letter_apart(a, b)]
    assert not close, close


def test_a_typo_of_an_option_names_the_option(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["fuzz", "--targets", "reference", "--op", "lora", "--out", "o", "--seeds", "2"])
    err = capsys.readouterr().err
    assert "unrecognized arguments: --seeds 2; did you mean --seed?" in err and err.count("\n") == 1, err


@pytest.mark.parametrize("command, argv, op", [
    ("fuzz", ["--targets", "reference", "--out", "o"], "step_b_q,step_a_q"),
    ("run", [], "lora,vision"), ("mutants", [], "lora,vision"), ("bench", [], "lora,vision"),
    ("matrix", ["--targets", "sglang==0.5.23"], "lora,vision")])
def test_op_is_a_comma_list_in_every_command(command, argv, op):
    """One grammar for ``--op`` (harness.family.op_groups): a comma list wherever a command has the option."""
    from kernel_oracle.cli import options

    args = build_parser().parse_args([command, *argv, "--op", op])
    assert options.op_list(args.op) == options.op_list(op)
    assert "--op" in _flags(_subparsers()[command]) and "[,OP...]" in _flags(_subparsers()[command])["--op"].metavar
