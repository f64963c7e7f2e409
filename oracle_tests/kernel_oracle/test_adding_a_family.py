"""Adding a kernel family is what docs/architecture.md says it is ("Adding a kernel family").

The doc's table lists the shared files a new family touches (at most 8) and, for each, the registration point a
family outside the product calls instead.  A family of the test tree (RMSNorm over ragged rows,
``oracle_tests/_ragged_norm.py``, its own file, all of it) registers through exactly the points the table names,
and nothing else of the product changes for it: a campaign, the selfcheck and the matrix's column rules then take
it, and a bug planted in its target is one finding.  The table and the points cannot part: a point the family
needs and the table lacks, or one the table names and the family does not call, fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import oracle_tests._ragged_norm as ragged

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
HEADER = "| file | what a built-in family adds there |"
MOST_FILES = 8
# the top-level folders installed under kernel_oracle (the package-dir mapping of pyproject.toml)
_FOLDERS = ("reference", "kernels", "harness", "fuzz", "reports", "benchmarks")


def _file_of(module: str) -> str:
    """The repository path of an installed module (``kernel_oracle.harness.family`` -> ``harness/family.py``)."""
    parts = module.split(".")
    return "/".join(parts[1:] if parts[1] in _FOLDERS else parts) + ".py"


def _doc_rows() -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    """``(file, ((registration point, its file), ...))`` per row of the doc's table."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(HEADER))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows.append((re.fullmatch(r"`([^`]+)`", cells[0]).group(1),
                     tuple(re.findall(r"`(register_\w+)` \(`([^`]+)`\)", cells[-1]))))
    return rows


def _calls(path: Path) -> set[str]:
    """The names of the ``register_*`` functions ``path`` calls."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
            and n.func.id.startswith("register_")}


def _defines(path: Path, name: str) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body)


def test_the_doc_lists_at_most_eight_shared_files_each_once():
    files = [file for file, _ in _doc_rows()]
    assert files and len(files) <= MOST_FILES, f"a new family touches {len(files)} shared files: {files}"
    assert len(set(files)) == len(files)
    assert all((ROOT / f).is_file() for f in files), [f for f in files if not (ROOT / f).is_file()]


def test_each_registration_point_is_where_the_doc_says_and_its_file_reaches_it():
    for file, points in _doc_rows():
        for name, where in points:
            assert _defines(ROOT / where, name), f"{where} defines no {name}"
            assert name in (ROOT / file).read_text(encoding="utf-8"), f"{file} does not reach {name}"


def test_the_test_family_reaches_the_product_through_the_listed_points_only():
    """It calls the doc's registration points, no other, imports each from the module the doc names, and
    assigns nothing into a module of the product (no table edited behind the registry's back)."""
    listed = {name: where for _, points in _doc_rows() for name, where in points}
    family_file = Path(ragged.__file__)
    assert _calls(family_file) == set(listed)
    tree = ast.parse(family_file.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kernel_oracle."):
            for alias in node.names:
                if alias.name.startswith("register_"):
                    assert listed.get(alias.name) == _file_of(node.module), (alias.name, node.module)
    product = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               and (node.module or "").startswith("kernel_oracle") for alias in node.names}
    for node in ast.walk(tree):
        for target in node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]:
            while isinstance(target, (ast.Attribute, ast.Subscript)):
                target = target.value
                assert not (isinstance(target, ast.Name) and target.id in product), ast.unparse(node)
        assert not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr")


@pytest.fixture
def baseline_before():
    """The oracle's fingerprint (Note [The oracle's own code] in harness/oracle_integrity.py) taken before the
    family registers, and put back after the test."""
    from kernel_oracle.harness import oracle_integrity

    prior = oracle_integrity.rebase()
    yield
    oracle_integrity.restore(prior)


@pytest.fixture
def family(monkeypatch):
    """The test tree's family and its target kinds, registered for one test and gone after it."""
    from kernel_oracle.fuzz.targets import builtin_targets, registry
    from kernel_oracle.harness.family import family_names, unregister_family

    assert "reference" in builtin_targets()  # every adapter registered first, into the tables kept after the test
    for table in ("_FACTORIES", "_CONFIGURATION", "_FAMILIES", "_CACHE"):
        monkeypatch.setattr(registry, table, dict(getattr(registry, table)))
    ragged.register()
    try:
        yield ragged
    finally:
        unregister_family(ragged.FAMILY)
    assert ragged.FAMILY not in family_names()


def test_a_campaign_takes_the_family_and_finds_the_planted_bug_once(family, tmp_path):
    from kernel_oracle.fuzz.campaign import CampaignConfig, run_campaign

    def campaign(target):
        return run_campaign(CampaignConfig(target=target, op=family.FAMILY, out_dir=tmp_path / target, budget=60,
                                           device="cpu", progress=False, isolate=False, seed=1))

    clean = campaign(family.TARGET)
    assert clean["campaign"]["executed"] >= 40 and clean["findings"] == []
    buggy = campaign(family.BUGGY_TARGET)
    assert [(f["kind"], f["op"]) for f in buggy["findings"]] == [("mismatch", family.OP)]
    # the hooks it has no part for answer "not mine": no row structure (the region "everywhere"), no features
    # (no needs), no words of its own (its example listed field by field)
    from kernel_oracle.harness.headline import example_text

    finding = buggy["findings"][0]
    assert finding["bucket"]["where"] == "everywhere" and finding["bucket"]["needs"] == []
    assert "lengths [" in example_text(finding) and " D " in example_text(finding)


def test_a_family_registered_after_the_oracles_fingerprint_is_no_change_to_the_oracle(baseline_before, family):
    """Its rows join the tables the oracle reads by the registry's hand: a case checked afterwards is judged with
    them, and nothing reads as a replaced table."""
    from kernel_oracle.fuzz.targets import resolve_target
    from kernel_oracle.harness.check import Case, check_case

    case = Case(family.RaggedNormProblem(lengths=(2, 3), extra_rows=1))
    clean = check_case(resolve_target(family.TARGET), case)
    assert clean.ok and clean.state_changes == [], clean.message
    buggy = check_case(resolve_target(family.BUGGY_TARGET), case)
    assert not buggy.ok and buggy.kind == "mismatch" and buggy.state_changes == []


def test_the_selfcheck_checks_the_family_through_its_record(family, monkeypatch):
    import kernel_oracle.harness.opinfo as opinfo
    from kernel_oracle.jobs.selfcheck import run_selfcheck

    monkeypatch.setattr(opinfo, "OP_DB", {family.OP: opinfo.OP_DB[family.OP]})  # its rows alone: quick

    def rows():
        return [r for r in run_selfcheck("cpu", cases=2, seed=0) if r["family"] == family.FAMILY]

    got = rows()
    assert {r["dtype"] for r in got} == {"float16", "bfloat16", "float32", "float64", "-"}
    assert all(r["passed"] for r in got), [r["message"] for r in got if not r["passed"]]
    assert [r["case"] for r in got if r["dtype"] == "-"] == ["error:ragged_norm.weight_rows#0"]

    real = family.independent

    def off_by_a_bit(op, args, kwargs=None):  # the record's independent part, planted wrong
        value, defined = real(op, args, kwargs)
        return value * (1 + 1e-3), defined

    monkeypatch.setattr(family, "independent", off_by_a_bit)
    assert not any(r["passed"] for r in rows() if r["dtype"] == "float64")


def test_the_matrix_column_rules_take_the_family(family):
    from kernel_oracle.fuzz.targets import TargetSources
    from kernel_oracle.harness.family import op_groups
    from kernel_oracle.jobs.matrix import _applies, plan_columns
    from kernel_oracle.jobs.matrix_columns import is_current

    specs = [family.TARGET, family.BUGGY_TARGET, "torch-varlen", "reference"]
    families = list(op_groups(f"{family.FAMILY},vision"))
    columns = plan_columns(specs, families, lambda spec, fam: None,
                           applies=lambda spec, fam: _applies(spec, fam, TargetSources(), True))
    by_family = {fam: [c.members for c in columns if c.family == fam] for fam in families}
    assert by_family == {family.FAMILY: [[family.TARGET], [family.BUGGY_TARGET], ["reference"]],
                         "vision": [["reference"], ["torch-varlen"]]}
    assert all(is_current(c.members, None) for c in columns)  # no release: each column is searched
