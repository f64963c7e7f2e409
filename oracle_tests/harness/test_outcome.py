"""The one rule from a run's facts to its verdict and exit code (Note [Run outcome] in harness/outcome.py;
docs/semantics.md#exit-codes), and that every command reaches it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kernel_oracle.harness.outcome import EXIT_CODES, Outcome, run_outcome

ROOT = Path(__file__).resolve().parents[2]

# facts -> (verdict, exit code); first match wins: usage > interrupted > findings > regression >
# incomplete > empty > known > clean
RULES = [
    (dict(), "clean", 0),
    (dict(known_findings=2), "known", 0),
    (dict(new_findings=1), "findings", 1),
    (dict(new_findings=1, known_findings=3), "findings", 1),
    (dict(regressions=1), "regression", 1),
    (dict(new_findings=1, regressions=1), "findings", 1),
    (dict(usage_error=True), "usage", 2),
    (dict(usage_error=True, new_findings=4, interrupted=True), "usage", 2),
    (dict(interrupted=True), "interrupted", 3),
    (dict(interrupted=True, new_findings=2), "interrupted", 3),  # a partial run: its findings are saved
    (dict(incomplete=True), "incomplete", 3),
    (dict(incomplete=True, new_findings=1), "findings", 1),
    (dict(incomplete=True, known_findings=1), "incomplete", 3),
    (dict(tested=False), "empty", 3),
    (dict(tested=False, known_findings=1), "empty", 3),
    (dict(tested=False, incomplete=True), "incomplete", 3),
    (dict(tested=False, new_findings=1), "findings", 1),
]


@pytest.mark.parametrize("facts, verdict, code", RULES, ids=[f"{v}-{i}" for i, (_, v, _) in enumerate(RULES)])
def test_rule_table(facts, verdict, code):
    out = run_outcome(**facts)
    assert (out.verdict, out.exit_code) == (verdict, code)
    assert out.reason.endswith(f"(exit {code})") and "\n" not in out.reason
    assert out.ok is (code == 0)


def test_exit_codes_as_documented():
    """docs/semantics.md#exit-codes: 0 clean, 1 findings or regression, 2 usage, 3 interrupted or incomplete."""
    assert EXIT_CODES == {"usage": 2, "interrupted": 3, "findings": 1, "regression": 1, "incomplete": 3,
                          "empty": 3, "known": 0, "clean": 0}
    text = (ROOT / "docs" / "semantics.md").read_text()
    assert "A run that tested nothing\nis never 0." in text or "tested nothing is never 0" in " ".join(text.split())


def test_outcome_is_frozen():
    out = run_outcome()
    with pytest.raises(AttributeError):
        out.exit_code = 1  # type: ignore[misc]
    assert out == Outcome("clean", 0, "clean (exit 0)")


@pytest.mark.parametrize("bad", [dict(new_findings=-1), dict(known_findings=True), dict(regressions=1.5)])
def test_counts_are_checked(bad):
    with pytest.raises(ValueError, match="Expected a non-negative int"):
        run_outcome(**bad)


# the modules that decide a verdict or an exit code: each calls run_outcome and returns no literal exit code
DECIDERS = ["kernel_oracle/cli/fuzz.py", "kernel_oracle/cli/run.py", "kernel_oracle/cli/matrix.py",
            "kernel_oracle/cli/compare.py", "kernel_oracle/cli/mutants.py", "kernel_oracle/cli/selfcheck.py",
            "kernel_oracle/cli/repro.py", "kernel_oracle/cli/report.py", "kernel_oracle/cli/bench.py",
            "kernel_oracle/cli/__init__.py", "kernel_oracle/cli/options.py", "reports/model.py"]


def _literal_exit_codes(source: str) -> list[int]:
    """Line numbers of ``return 0..3`` and ``sys.exit(0..3)`` with a literal code."""
    found = []
    for node in ast.walk(ast.parse(source)):
        value = node.value if isinstance(node, ast.Return) else None
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("sys.exit", "exit", "SystemExit") and node.args:
            value = node.args[0]
        if isinstance(value, ast.Constant) and type(value.value) is int and value.value in (0, 1, 2, 3):
            found.append(node.lineno)
    return found


@pytest.mark.parametrize("path", DECIDERS)
def test_every_verdict_goes_through_run_outcome(path):
    source = (ROOT / path).read_text()
    assert "run_outcome(" in source, f"{path} decides a verdict without harness.outcome.run_outcome"
    assert not _literal_exit_codes(source), f"{path}: literal exit codes at lines {_literal_exit_codes(source)}"
