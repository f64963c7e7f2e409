"""The csgmv family in the release matrix (Note [csgmv run identity] in fuzz/targets/sglang_csgmv_identity.py):
``--targets sglang-csgmv --releases ...`` is one column per distinct csgmv code, the switches of 0.5.22+ are
columns of their own where the release reads them, and each configuration has its own identity, so the
matrix and a resumed campaign never take one configuration's results for another's."""

from __future__ import annotations

import pytest

from kernel_oracle.cli import build_parser
from kernel_oracle.cli.matrix import _specs
from kernel_oracle.fuzz.targets import TargetSpec
from kernel_oracle.fuzz.targets.identity import code_hash
from kernel_oracle.fuzz.targets.sglang import configuration_applies, release_has_code, release_identity
from kernel_oracle.jobs.matrix import plan_columns, run_matrix

from oracle_tests._sglang_releases import ALL_RELEASES, release_files

CONFIGS = ("", "@split_k=on", "@deterministic=on")


def _args(*argv):
    return build_parser().parse_args(["matrix", "--op", "csgmv", *argv])


def test_every_release_expands_and_only_0_5_22_on_take_the_switches():
    for v in ALL_RELEASES:
        release_files(v)  # skips without the wheels
    specs = _specs(_args("--targets", "sglang-csgmv", "--releases", ",".join(ALL_RELEASES),
                         "--configurations", "all"), "cpu")
    plain = [f"sglang-csgmv=={v}" for v in ALL_RELEASES]
    switched = [f"sglang-csgmv=={v}{c}" for v in ("0.5.22", "0.5.23") for c in CONFIGS[1:]]
    assert sorted(specs) == sorted(plain + switched)
    assert specs[:len(plain) - 2] == plain[:-2]  # the releases in order, each followed by its configurations
    assert specs[-6:] == ["sglang-csgmv==0.5.22", *switched[:2], "sglang-csgmv==0.5.23", *switched[2:]]


def test_releases_all_finds_every_cached_release_with_csgmv_code():
    """``--releases all`` keeps the releases whose csgmv code the matrix can identify: every cached one."""
    for v in ALL_RELEASES:
        release_files(v)
    specs = _specs(_args("--targets", "sglang-csgmv", "--releases", "all"), "cpu")
    assert set(specs) >= {f"sglang-csgmv=={v}" for v in ALL_RELEASES}
    assert all(release_identity(s, "csgmv").startswith("csgmv ") for s in specs)


def test_the_columns_are_the_four_codes_and_the_configured_lanes():
    for v in ALL_RELEASES:
        release_files(v)
    specs = [f"sglang-csgmv=={v}" for v in ALL_RELEASES] + [f"sglang-csgmv==0.5.23{c}" for c in CONFIGS[1:]] \
        + [f"sglang-csgmv==0.5.22{c}" for c in CONFIGS[1:]]
    columns = plan_columns(specs, ["csgmv"], lambda s, f: release_identity(s, f))
    assert [(c.label, c.same_as) for c in columns] == [
        ("sglang-csgmv==0.5.10", None), ("sglang-csgmv==0.5.11-0.5.13.post1", None),
        ("sglang-csgmv==0.5.14-0.5.21", None), ("sglang-csgmv==0.5.22-0.5.23", None),
        ("sglang-csgmv==0.5.22-0.5.23@split_k=on", None), ("sglang-csgmv==0.5.22-0.5.23@deterministic=on", None)]
    assert len({c.identity for c in columns}) == 6


@pytest.mark.parametrize("version", ["0.5.21", "0.5.23"])
def test_each_configuration_has_its_own_identity_where_the_release_reads_it(version):
    """0.5.23 reads both switches: three configurations, three identities and three code hashes; 0.5.21
    reads neither: a configuration is the same code, and the matrix adds no column for it."""
    release_files(version)
    specs = [f"sglang-csgmv=={version}{c}" for c in CONFIGS]
    identities = [release_identity(s, "csgmv") for s in specs]
    hashes = [code_hash(TargetSpec.parse(s)) for s in specs]
    assert all(i and i.startswith("csgmv ") for i in identities) and all(h.startswith("csgmv:") for h in hashes)
    distinct = 3 if version == "0.5.23" else 1
    assert (len(set(identities)), len(set(hashes))) == (distinct, distinct)
    assert [configuration_applies(s) for s in specs] == [True, distinct == 3, distinct == 3]
    if version == "0.5.23":
        assert identities[1].endswith("SGLANG_ENABLE_LORA_CSGMV_SPLIT_K=1,SGLANG_ENABLE_DETERMINISTIC_INFERENCE=0")


def test_a_csgmv_release_has_csgmv_code_and_no_other_family():
    release_files("0.5.10")
    assert release_has_code("sglang-csgmv==0.5.10", "csgmv") is True
    assert release_has_code("sglang-csgmv==0.5.10", "lora") is False
    assert release_identity("sglang-csgmv==0.5.10", "lora") is None


@pytest.mark.parametrize("spec", ["sglang==0.5.23", "sglang-trt==0.5.23", "sglang-v2==0.5.23"])
def test_a_kv_b_release_spec_has_no_csgmv_code(spec):
    """One matrix over every target and family (``--op lora,vision,csgmv``): the kv_b specs get no csgmv column."""
    release_files("0.5.23")
    assert release_has_code(spec, "csgmv") is False


def test_the_matrix_runs_one_campaign_per_distinct_code(tmp_path):
    """0.5.14 and 0.5.15 run the same csgmv code: two campaigns for three releases, each column counted, and
    the csgmv corpus entry judged per column (it fails before 0.5.14, as it says)."""
    from kernel_oracle.jobs.bug_corpus import load_corpus

    for v in ("0.5.13.post1", "0.5.14", "0.5.15"):
        release_files(v)
    entries = [e for e in load_corpus() if e.id in ("sglang-csgmv-pr-28371", "sglang-pr-28371")]
    record = run_matrix(["sglang-csgmv==0.5.15", "sglang-csgmv==0.5.13.post1", "sglang-csgmv==0.5.14"],
                        entries=entries, op="csgmv", budget=2, device="cpu", out=tmp_path, quiet=True)
    m = record["release_matrix"]
    assert [(c["spec"], c["members"]) for c in m["releases"]] == [
        ("sglang-csgmv==0.5.13.post1", ["sglang-csgmv==0.5.13.post1"]),
        ("sglang-csgmv==0.5.14-0.5.15", ["sglang-csgmv==0.5.14", "sglang-csgmv==0.5.15"])]
    assert record["summary"]["campaigns"] == 2 and all(c["available"] and c["cases"] for c in m["releases"]), \
        (m["releases"], record.get("notes"))
    assert m["rows"] == []
    (pr,) = m["corpus"]  # the kv_b entry is another target's
    assert pr["id"] == "sglang-csgmv-pr-28371" and pr["results"] == {
        "sglang-csgmv==0.5.13.post1": {"outcome": "fails: mismatch", "expected": "fails", "as_expected": True},
        "sglang-csgmv==0.5.14-0.5.15": {"outcome": "passes", "expected": "passes", "as_expected": True}}
