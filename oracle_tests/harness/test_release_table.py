"""The release table (Note [Release table] in harness/releases.py): a defect's releases are its introduced and
fixed releases read against the one table, so a new SGLang release is one line there and every open defect covers
it; a fixed one does not, and no known issue of a defect lists releases by hand."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_oracle.harness import releases
from kernel_oracle.harness.data_files import loads_toml
from kernel_oracle.harness.defects import REGISTRY, DefectError, load_defects, parse_defects, release_table
from kernel_oracle.harness.known_issues import KnownIssuesError, load_known_issues, match_known
from kernel_oracle.harness.releases import SGLANG_RELEASES, releases_from

REPO_ROOT = Path(__file__).resolve().parents[2]
NEW = "0.5.99"  # a release SGLang has not shipped
EMPTY_MAX = "max(): Expected reduction dim to be specified for input.numel() == 0"


def _empty_batch_finding(target: str) -> dict:
    """A finding of the open defect ``sglang-empty-batch-max-len-none``: step_a_q raises on an empty batch."""
    return {"id": "F0001", "target": target, "op": "step_a_q", "kind": "contract",
            "message": f"raised RuntimeError({EMPTY_MAX!r}) on a valid input", "repro": "kernel-oracle repro F0001"}


def _registry_copy(tmp_path) -> Path:
    """The checked-in registry under another path (read afresh, not the cached load)."""
    path = tmp_path / "known_issues.toml"
    path.write_text(REGISTRY.read_text())
    return path


def test_a_release_outside_the_table_is_covered_by_no_defect():
    assert match_known(_empty_batch_finding(f"sglang=={SGLANG_RELEASES[-1]}")).id == "sglang-empty-batch-max-len-none"
    assert match_known(_empty_batch_finding(f"sglang=={NEW}")) is None


def test_a_new_release_in_the_table_is_covered_by_every_open_defect_and_no_fixed_one(tmp_path, monkeypatch):
    monkeypatch.setattr(releases, "SGLANG_RELEASES", (*SGLANG_RELEASES, NEW))  # the one line a new release needs
    path = _registry_copy(tmp_path)
    issues = {i.id: i for i in load_known_issues(path)}
    assert match_known(_empty_batch_finding(f"sglang=={NEW}"), issues=issues.values()).id == \
        "sglang-empty-batch-max-len-none"
    sglang = [d for d in load_defects(path) if release_table(d.component) is releases.SGLANG_RELEASES]
    assert {d.fixed == "" for d in sglang} == {True, False}, "the registry has open and fixed SGLang defects"
    for d in sglang:
        assert (NEW in d.releases) == (d.fixed == ""), d.id
        for raw in d.issues:
            assert issues[raw["id"]].applies_to(NEW) == (d.fixed == ""), raw["id"]


def test_releases_run_from_introduced_up_to_before_fixed():
    table = ("1.0", "1.1", "1.1.post1", "1.2")
    assert releases_from(table, "1.1") == ("1.1", "1.1.post1", "1.2")
    assert releases_from(table, "1.0", "1.1.post1") == ("1.0", "1.1")


@pytest.mark.parametrize("introduced, fixed, error", [
    ("0.9", "", "introduced='0.9' is not in the release table (1.0, 1.1); add the release to harness/releases.py"),
    ("1.0", "2.0", "fixed='2.0' is not in the release table (1.0, 1.1); add the release to harness/releases.py"),
    ("1.1", "1.0", "fixed='1.0' must be a release after introduced='1.1'"),
    ("1.1", "1.1", "fixed='1.1' must be a release after introduced='1.1'"),
])
def test_releases_outside_the_table_or_out_of_order_are_refused(introduced, fixed, error):
    with pytest.raises(ValueError) as exc:
        releases_from(("1.0", "1.1"), introduced, fixed)
    assert str(exc.value) == error


DEFECT = ('[[defect]]\nid = "a-b"\ntitle = "t"\ncomponent = "{component}"\nop = "lora"\n'
          'upstream = "https://example.org/1"\nintroduced = "{introduced}"\nfixed = ""\n')
RULE = ('[[defect.issue]]\nid = "a-b-rule"\ntitle = "t"\ntarget = "{target}"\nop = "lora"\nkind = "crash"\n'
        'message = "x"\n')


def test_a_defect_introduced_in_a_release_outside_the_table_is_refused():
    with pytest.raises(DefectError) as exc:
        parse_defects(loads_toml(DEFECT.format(component="sglang", introduced="0.5.9"), "k.toml"), "k.toml")
    assert str(exc.value) == (f"k.toml [[defect]] #1 ('a-b'): introduced='0.5.9' is not in the release table "
                              f"({', '.join(SGLANG_RELEASES)}); add the release to harness/releases.py")


def test_a_rule_of_a_defect_takes_its_releases_and_lists_none(tmp_path):
    path = tmp_path / "k.toml"
    path.write_text(DEFECT.format(component="sglang", introduced="0.5.22") + RULE.format(target="sglang*"))
    assert load_known_issues(path)[0].releases == ("0.5.22", "0.5.23")
    path.write_text(DEFECT.format(component="sglang", introduced="0.5.22") + RULE.format(target="sglang*")
                    + 'releases = ["0.5.22"]\n')
    with pytest.raises(KnownIssuesError) as exc:
        load_known_issues(path)
    assert str(exc.value) == (f"{path} [[defect]] 'a-b' [[defect.issue]] #1 ('a-b-rule'): releases come from the "
                              f"[[defect]] record 'a-b' (introduced '0.5.22', fixed '', against harness/releases.py); "
                              f"remove them here")


def test_a_rule_on_another_package_than_its_defect_lists_its_releases(tmp_path):
    path = tmp_path / "k.toml"
    path.write_text(DEFECT.format(component="flashinfer-cudnn", introduced="0.6.18") + RULE.format(target="sglang==*"))
    with pytest.raises(KnownIssuesError) as exc:
        load_known_issues(path)
    assert str(exc.value).endswith("missing fields ['releases']")
    path.write_text(path.read_text() + 'releases = ["*"]\n')
    assert load_known_issues(path)[0].releases == ("*",)


def test_the_wheel_script_fetches_the_table(tmp_path):
    (tmp_path / "wheels").mkdir()
    for v in SGLANG_RELEASES:  # every release cached: the script reads the table and fetches nothing
        (tmp_path / "wheels" / f"sglang-{v}-py3-none-any.whl").write_bytes(b"")
    out = subprocess.run(["bash", "scripts/sglang_wheels.sh"], cwd=REPO_ROOT, capture_output=True, text=True,
                         env={**os.environ, "KERNEL_ORACLE_CACHE": str(tmp_path), "PYTHON": sys.executable},
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert tuple(line.split()[1].rstrip(":") for line in out.stdout.splitlines()) == SGLANG_RELEASES
