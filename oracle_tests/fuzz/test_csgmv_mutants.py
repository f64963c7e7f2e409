"""The csgmv mutants (Note [csgmv mutants] in fuzz/targets/mutants_csgmv.py): bugs planted in a patched copy
of the newest release's csgmv files are each killed in their own op, by a case the real release passes (so
the kill is the patch's); ``kernel-oracle mutants --op csgmv`` reports them all killed; the copy differs
from the release by the patch alone, and a stale anchor makes an unavailable target naming it."""

from __future__ import annotations

import difflib
import json

import pytest

from kernel_oracle.cli import main as cli_main
from kernel_oracle.fuzz.mutant_check import check_mutant
from kernel_oracle.fuzz.targets import TargetSpec, resolve_target
from kernel_oracle.fuzz.targets.mutant_data import Mutant, Patch
from kernel_oracle.fuzz.targets.mutants import MUTANTS
from kernel_oracle.fuzz.targets.mutants_csgmv import (CSGMV_MUTANTS, MUTANT_RELEASE, csgmv_mutant_target,
                                                      patched_release)
from kernel_oracle.fuzz.targets.sglang_csgmv import locate_csgmv
from kernel_oracle.harness.check import Case, check_case
from kernel_oracle.harness.problems import problem_from_dict

from oracle_tests._sglang_releases import release_files
from oracle_tests.conftest import DEVICE

pytestmark = pytest.mark.skipif(DEVICE != "cpu", reason="the CPU interpreter run")
NAMES = [m.name for m in CSGMV_MUTANTS]


def test_the_table_holds_the_csgmv_mutants_each_of_one_op():
    assert [m.name for m in MUTANTS if m.family == "csgmv"] == NAMES and len(NAMES) >= 6
    assert all(m.source == "sglang-csgmv" and m.ops in (("csgmv_shrink",), ("csgmv_expand",)) for m in CSGMV_MUTANTS)
    assert {m.ops for m in CSGMV_MUTANTS} == {("csgmv_shrink",), ("csgmv_expand",)}


@pytest.mark.parametrize("name", NAMES)
def test_each_mutant_is_killed_in_its_own_op_by_a_case_the_release_passes(name):
    release_files(MUTANT_RELEASE)  # skips without the wheel
    mutant = next(m for m in CSGMV_MUTANTS if m.name == name)
    result = check_mutant(name, max_examples=100, device="cpu")
    assert result.error is None and result.killed, (result.error, result.examples, mutant.description)
    assert result.examples <= 30 and result.seconds < 30, (result.examples, result.seconds)
    problem = problem_from_dict(json.loads(result.case)["problem"])
    assert problem.op == mutant.ops[0]
    real = resolve_target(f"sglang-csgmv=={MUTANT_RELEASE}", "cpu")
    verdict = check_case(real, Case(problem), "cpu")
    assert verdict.ok, f"the case that killed {name} fails the real release too: {verdict.message}"
    if name == "csgmv_shrink_graph_grid_from_host_ints":  # only a replay with stale host ints shows it
        assert problem.use_cuda_graph and problem.stale_host_ints is not None


def test_the_command_reports_every_csgmv_mutant_killed(tmp_path, capsys):
    release_files(MUTANT_RELEASE)
    out = tmp_path / "kills.json"
    code = cli_main(["mutants", "--op", "csgmv", "--device", "cpu", "--json", str(out)])
    table = json.loads(out.read_text())
    assert code == 0, capsys.readouterr().err
    assert [(r["name"], r["family"], r["killed"]) for r in table] == [(n, "csgmv", True) for n in NAMES]


def test_the_copy_differs_from_the_release_by_the_patch_alone():
    release = release_files(MUTANT_RELEASE)
    mutant = next(m for m in CSGMV_MUTANTS if m.name == "csgmv_expand_scaling_missing")
    copy = patched_release(mutant, release)
    expand = locate_csgmv(release)["expand"]
    diff = [line for line in difflib.unified_diff(release.read(expand).splitlines(), copy.read(expand).splitlines(),
                                                  lineterm="", n=0) if line[:1] in "+-" and line[:3] not in "+++---"]
    assert diff == ["-    partial_sum *= scaling"]
    assert copy.read(locate_csgmv(release)["shrink"]) == release.read(locate_csgmv(release)["shrink"])
    assert copy.disk(expand) != release.disk(expand) and "partial_sum *= scaling" in release.disk(expand).read_text()
    assert copy.origin == f"mutant csgmv_expand_scaling_missing of the {release.origin}"


def test_a_stale_anchor_is_an_unavailable_target_naming_it():
    release_files(MUTANT_RELEASE)
    stale = Mutant("csgmv_stale", "csgmv", "anchor gone", (Patch("chunked_sgmv_expand.py", "no such line", "x"),),
                   source="sglang-csgmv")
    t = csgmv_mutant_target(stale, TargetSpec.parse("mutant:csgmv_stale"))
    assert not t.available
    assert t.reason == ("mutant 'csgmv_stale': anchor not found in the sglang-csgmv release's chunked_sgmv_expand.py "
                        "(the kernel changed; update the mutant's anchor): 'no such line'")


def test_a_repro_script_of_a_mutant_names_no_release_module():
    """The patched files exist only inside kernel-oracle: a script must not tell the user to import them
    from an installed release."""
    from kernel_oracle.jobs.repro_script import _target_path

    release_files(MUTANT_RELEASE)
    spec = "mutant:csgmv_expand_scaling_missing"
    path, note = _target_path(resolve_target(spec, "cpu"), spec, "csgmv_expand")
    assert path is None
    assert note.startswith(f"target {spec!r} exists only inside kernel-oracle (") and note.endswith(
        "chunked_sgmv_lora_expand_forward); pass --targets module:function of the kernel to test")
