"""The command line's options (Note [Options] in ``kernel_oracle.cli.options``): one name per concept
in every subcommand, and the old spellings still accepted with a one-line hint."""

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
RETIRED = ("--target", "--time-budget", "--seconds", "--no-progress", "--main-budget", "--warm-up-s", "--family")


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


# (subcommand, argv with the old spelling, the same with the new one, the hint on stderr)
ALIASES = [
    ("run", ["--time-budget", "60"], ["--time", "60"], "--time-budget is deprecated; pass --time"),
    ("fuzz", ["--target", "reference", "--op", "lora", "--out", "o"], ["--targets", "reference", "--op", "lora",
                                                                       "--out", "o"],
     "--target is deprecated; pass --targets"),
    ("fuzz", ["--targets", "reference", "--op", "lora", "--out", "o", "--no-progress"],
     ["--targets", "reference", "--op", "lora", "--out", "o", "--quiet"], "--no-progress is deprecated; pass --quiet"),
    ("matrix", ["--target", "sglang==0.5.12", "--target", "sglang==0.5.23"], ["--targets", "sglang==0.5.12,sglang==0.5.23"],
     "--target is deprecated; pass --targets"),
    ("matrix", ["--targets", "sglang==0.5.23", "--no-progress"], ["--targets", "sglang==0.5.23", "--quiet"],
     "--no-progress is deprecated; pass --quiet"),
    ("repro", ["x.pt", "--target", "triton"], ["x.pt", "--targets", "triton"], "--target is deprecated; pass --targets"),
    ("bench", ["--seconds", "5"], ["--time", "5"], "--seconds is deprecated; pass --time"),
    ("bench", ["--warm-up-s", "0"], ["--warm-up", "0"], "--warm-up-s is deprecated; pass --warm-up"),
    ("bench", ["--main-budget", "0"], ["--main-time", "0"], "--main-budget is deprecated; pass --main-time"),
    ("mutants", ["--family", "lora"], ["--families", "lora"], "--family is deprecated; pass --families"),
]


@pytest.mark.parametrize("command, old, new, hint", ALIASES,
                         ids=[f"{c}-{o[0] if o[0].startswith('--') else o[1]}{'-' + o[-1] if 'progress' in o[-1] else ''}"
                              for c, o, _, _ in ALIASES])
def test_an_old_spelling_still_works_with_a_one_line_hint(capsys, command, old, new, hint):
    parser = build_parser()
    want = parser.parse_args([command, *new])
    assert capsys.readouterr().err == ""
    got = parser.parse_args([command, *old])
    assert capsys.readouterr().err == f"kernel-oracle {command}: {hint}\n"
    assert vars(got) == vars(want)


def test_an_old_spelling_is_left_out_of_help_and_usage_errors(capsys):
    help_text = _subparsers()["fuzz"].format_help()
    assert "--targets" in help_text and "--target " not in help_text and "--no-progress" not in help_text
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["fuzz", "--op", "lora", "--out", "o"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("kernel-oracle fuzz: error: the following arguments are required: --targets ")
    assert "--target " not in err and err.count("\n") == 1
