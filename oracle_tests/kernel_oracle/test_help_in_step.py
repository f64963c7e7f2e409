"""Every help text names what its option accepts today: the families and their ops of the families
registry, the target kinds and configuration keys of the target registry, the release targets of
``harness.targets.RELEASE_NAMES``.  A family, target or key registered without its help growing fails
here, so ``--help`` never hides a family (csgmv) or a target (sglang-v2) a user can name."""

from __future__ import annotations

import argparse
import re

import pytest

from kernel_oracle.cli import build_parser
from kernel_oracle.fuzz.targets import builtin_targets, target_configuration
from kernel_oracle.harness.family import FAMILY_OPS
from kernel_oracle.harness.targets import RELEASE_NAMES
from kernel_oracle.jobs.matrix import CONFIGURATION_VARIANTS


def _subparsers() -> dict:
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def _help(parser: argparse.ArgumentParser, flag: str) -> str:
    (action,) = [a for a in parser._actions if flag in a.option_strings]
    return " ".join(action.help.split())


def _missing(text: str, words) -> list:
    """The words of ``words`` that ``text`` does not name as a whole word (``sglang`` is not named by
    ``sglang-trt``, ``pdl`` not by ``pdl_x``)."""
    return [w for w in words if not re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", text)]


def _options(flag: str) -> list:
    return [(name, _help(p, flag)) for name, p in _subparsers().items()
            if any(flag in a.option_strings for a in p._actions)]


def test_every_op_option_names_every_family():
    found = _options("--op")
    assert {name for name, _ in found} >= {"run", "fuzz", "mutants", "bench", "matrix"}
    for name, text in found:
        assert not _missing(text, FAMILY_OPS), (name, _missing(text, FAMILY_OPS), text)


@pytest.mark.parametrize("command", ["fuzz", "matrix"])
def test_an_op_option_that_takes_ops_names_every_op(command):
    text = _help(_subparsers()[command], "--op")
    ops = [op for ops in FAMILY_OPS.values() for op in ops]
    assert not _missing(text, ops), (command, _missing(text, ops))


def test_every_targets_option_names_every_target_kind_and_key():
    kinds = [k for k in builtin_targets() if k not in ("mutant", "module")]
    keys = sorted({key for k in builtin_targets() for key in target_configuration(k)})
    found = dict(_options("--targets"))
    assert {"run", "fuzz", "bench", "repro", "matrix"} <= set(found)
    for name, text in found.items():
        if name == "matrix":  # a column per release: the release targets, with --releases and --configurations
            continue
        assert not _missing(text, kinds + keys + ["mutant:NAME", "package.module[:attr]"]), \
            (name, _missing(text, kinds + keys))


def test_the_matrix_names_every_release_target_and_configuration_it_expands():
    matrix = _subparsers()["matrix"]
    for flag in ("--targets", "--releases"):
        assert not _missing(_help(matrix, flag), RELEASE_NAMES), (flag, _missing(_help(matrix, flag), RELEASE_NAMES))
    configurations = _help(matrix, "--configurations")
    expanded = {name for name, variants in CONFIGURATION_VARIANTS.items() if any(variants)}
    keys = {key.split("=")[0] for variants in CONFIGURATION_VARIANTS.values() for v in variants if v
            for key in v.split(",")}
    assert not _missing(configurations, sorted(expanded) + sorted(keys)), \
        _missing(configurations, sorted(expanded) + sorted(keys))

