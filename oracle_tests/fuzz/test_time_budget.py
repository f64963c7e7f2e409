"""One name for the time budget (``time_s``), one table of defaults, one check (Note [Time budget] in
fuzz/time_budget.py), followed from the CLI to the campaign."""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path

import pytest

from kernel_oracle.fuzz.time_budget import (DEFAULT_TIME_S, TimeBudgetError, check_time_s, default_time_s,
                                            parse_time_s, resolve_time_s)

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("reference", "kernels", "harness", "fuzz", "reports", "kernel_oracle", "benchmarks", "tools")


@pytest.mark.parametrize("value", [0, -1, 0.0, float("nan"), float("inf"), -float("inf"), True, "60", None])
def test_check_refuses_what_is_not_a_positive_finite_number(value):
    with pytest.raises(TimeBudgetError, match=r"Expected a positive finite number of seconds but got time_s="):
        check_time_s(value)
    assert issubclass(TimeBudgetError, ValueError)


@pytest.mark.parametrize("value", [1, 0.5, 60.0, 1e6])
def test_check_accepts_positive_finite_seconds(value):
    assert check_time_s(value) == float(value) and isinstance(check_time_s(value), float)


@pytest.mark.parametrize("text, ok", [("60", 60.0), ("0.25", 0.25), ("0", None), ("-3", None), ("nan", None),
                                      ("inf", None), ("ten", None)])
def test_parse_is_the_cli_type(text, ok):
    if ok is not None:
        assert parse_time_s(text) == ok
        return
    with pytest.raises(argparse.ArgumentTypeError, match=f"expected a positive, finite number of seconds but got "
                                                         f"{re.escape(repr(text))}"):
        parse_time_s(text)


def test_defaults_are_one_table():
    assert DEFAULT_TIME_S == {"run": {"cpu": 180.0, "cuda": 300.0}, "matrix": 60.0, "bench": 20.0,
                              "bench_main_job": 120.0}
    assert default_time_s("run", "cpu") == 180.0 and default_time_s("run", "cuda") == 300.0
    assert default_time_s("matrix") == 60.0 and default_time_s("bench") == 20.0
    assert resolve_time_s(None, "run", "cuda") == 300.0 and resolve_time_s(7, "matrix") == 7.0
    with pytest.raises(TimeBudgetError):
        resolve_time_s(math.nan, "run", "cpu")


def test_every_time_option_is_time_s_parsed_once():
    """Every subcommand's ``--time`` lands in ``args.time_s`` through parse_time_s, with its default from
    DEFAULT_TIME_S."""
    from kernel_oracle.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    seen = {}
    for name, p in sub.choices.items():
        for action in p._actions:
            if "--time" in action.option_strings:
                assert action.dest == "time_s" and action.type is parse_time_s, name
                seen[name] = action.default
    assert seen == {"run": None, "fuzz": None, "matrix": None, "bench": None}, seen  # defaults: DEFAULT_TIME_S
    args = parser.parse_args(["run", "--time", "12"])
    assert args.time_s == 12.0


def test_the_campaign_checks_time_s_with_the_same_function(tmp_path):
    from kernel_oracle.fuzz.campaign_config import CampaignConfig, CampaignError

    with pytest.raises(CampaignError, match=r"Expected a positive finite number of seconds but got time_s=0"):
        CampaignConfig(target="reference", op="lora", out_dir=tmp_path, time_s=0)
    assert CampaignConfig(target="reference", op="lora", out_dir=tmp_path, time_s=3).time_s == 3


def _product_sources():
    for folder in PRODUCT:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "__pycache__" not in path.parts:
                yield path, path.read_text()


def test_one_name_and_no_second_default_or_check():
    """No other spelling of the time budget (``time_budget``, ``budget_s``), no second default table, and
    no second finite-seconds check of ``time_s`` outside fuzz/time_budget.py."""
    spellings = re.compile(r"time_budget_s|DEFAULT_BUDGET_S|time_s_per_target|seconds_per_campaign|def _budget\(")
    found = [f"{p.relative_to(ROOT)}:{i}" for p, text in _product_sources() if p.name != "time_budget.py"
             for i, line in enumerate(text.splitlines(), 1) if spellings.search(line)]
    assert not found, f"other names of the time budget: {found}"
    own = [p.relative_to(ROOT) for p, text in _product_sources()
           if re.search(r"DEFAULT_TIME_S\s*[:=]", text) and p.name != "time_budget.py"]
    assert not own, f"a second default table: {own}"
