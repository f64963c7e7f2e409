"""``kernel-oracle compare``: injected regressions exit 1, an unchanged run exits 0, bad input 2."""

from __future__ import annotations

import copy
import json

import pytest

from kernel_oracle.cli import main as cli_main
from oracle_tests._sample_record import sample_record
from kernel_oracle.reports.compare import Thresholds, compare_results
from kernel_oracle.reports.model import Finding, Result
from kernel_oracle.harness.schema import SCHEMA_VERSION, add_finding, save


def _pair(tmp_path, change=None):
    base = sample_record()
    cur = copy.deepcopy(base)
    if change is not None:
        change(cur)
    return save(base, tmp_path / "base.json"), save(cur, tmp_path / "cur.json")


def _compare(tmp_path, capsys, change=None, *opts):
    b, c = _pair(tmp_path, change)
    code = cli_main(["compare", str(b), str(c), *opts])
    return code, capsys.readouterr().out


def test_unchanged_run_passes(tmp_path, capsys):
    code, out = _compare(tmp_path, capsys)
    assert code == 0, out
    assert out.startswith("OK: 0 new finding(s), 0 error-ratio growth(s), 0 slowdown(s)")


def _new_finding(rec):
    add_finding(rec, {"id": "triton-vision-0009", "target": "triton", "op": "vision", "dtype": "bfloat16",
                      "shape_class": "ragged", "kind": "validation-gap",
                      "message": "negative sequence length accepted\n(details)", "repro": "kernel-oracle repro x.json"})


def test_new_finding_is_a_regression(tmp_path, capsys):
    code, out = _compare(tmp_path, capsys, _new_finding)
    assert code == 1
    assert "REGRESSION: 1 new finding(s)" in out
    assert "+ [validation-gap] triton vision bfloat16 ragged: negative sequence length accepted" in out
    assert "repro: kernel-oracle repro x.json" in out


def test_fixed_finding_is_reported_and_passes(tmp_path, capsys):
    code, out = _compare(tmp_path, capsys, lambda r: r["findings"].pop(0))
    assert code == 0
    assert "1 fixed" in out and "- [mismatch] triton step_b_v float16 decode" in out


def _grow_ratio(factor):
    def change(rec):
        g = next(g for g in rec["groups"] if (g["target"], g["op"], g["dtype"]) == ("triton", "step_a_q", "float32"))
        g["error_ratio"]["max"] *= factor
    return change


def test_error_ratio_growth_is_a_regression(tmp_path, capsys):
    code, out = _compare(tmp_path, capsys, _grow_ratio(5.0))  # 0.15 -> 0.75
    assert code == 1
    assert "! triton step_a_q float32 ragged: 0.15 -> 0.75 (5.00x)" in out
    # a looser threshold lets it through
    code, out = _compare(tmp_path / "loose", capsys, _grow_ratio(5.0), "--max-ratio-growth", "6")
    assert code == 0, out


def test_ratio_growth_below_the_floor_is_noise(tmp_path, capsys):
    code, out = _compare(tmp_path, capsys, _grow_ratio(1.6))  # 0.15 -> 0.24, below 0.25 and < 2x
    assert code == 0, out
    code, out = _compare(tmp_path / "b", capsys, _grow_ratio(3.0), "--ratio-floor", "0.5")  # 0.45 < 0.5
    assert code == 0, out


def test_crossing_the_tolerance_is_a_regression_even_when_small(tmp_path, capsys):
    def change(rec):
        g = next(g for g in rec["groups"] if (g["target"], g["op"], g["dtype"]) == ("triton", "vision", "float32"))
        g["error_ratio"]["max"] = 1.05  # 0.6 -> 1.05: under 2x, but above the tolerance
    code, out = _compare(tmp_path, capsys, change)
    assert code == 1 and "0.6 -> 1.05" in out


def _slow(factor):
    def change(rec):
        rec["benchmarks"][0]["median_us"] *= factor
    return change


def test_slowdown_is_a_regression(tmp_path, capsys):
    code, out = _compare(tmp_path, capsys, _slow(1.25))
    assert code == 1
    assert "Slowdowns (median time grew > 10 %)" in out and "+25.0 %" in out
    code, out = _compare(tmp_path / "loose", capsys, _slow(1.25), "--max-slowdown", "30%")
    assert code == 0, out


def test_speedup_is_not_a_regression(tmp_path, capsys):
    code, out = _compare(tmp_path, capsys, _slow(0.5))
    assert code == 0 and "Speed-ups:" in out


def test_json_output(tmp_path, capsys):
    b, c = _pair(tmp_path, _new_finding)
    code = cli_main(["compare", str(b), str(c), "--json", "-"])
    data = json.loads(capsys.readouterr().out)
    assert code == 1 and data["regressed"] and data["new_findings"][0]["kind"] == "validation-gap"


def test_usage_errors_exit_2(tmp_path, capsys):
    b, _ = _pair(tmp_path)
    assert cli_main(["compare", str(b), str(tmp_path / "absent.json")]) == 2
    assert "no such result file" in capsys.readouterr().err
    newer = sample_record()
    newer["version"] = SCHEMA_VERSION + 1
    (tmp_path / "newer.json").write_text(json.dumps(newer))
    assert cli_main(["compare", str(b), str(tmp_path / "newer.json")]) == 2
    assert "newer than this suite reads" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        cli_main(["compare", str(b), str(b), "--max-slowdown", "fast"])
    assert exc.value.code == 2


def test_signature_ignores_numbers_and_prefers_the_contract_id():
    def finding(**kw):
        base = {"id": "a", "target": "t", "op": "o", "kind": "mismatch", "dtype": "float16", "shape_class": "s",
                "message": "Mismatched elements: 3 / 640 (0.5%)\nmore", "repro": "r"}
        base.update(kw)
        return Finding.from_dict(base)
    assert finding().signature == finding(id="b", message="Mismatched elements: 7 / 9 (77.7%)").signature
    assert finding().signature == finding(dtype="bfloat16").signature  # one root cause across dtypes
    assert finding().signature != finding(op="p").signature
    assert finding(contract="c.1", message="x").signature == finding(contract="c.1", message="y").signature
    assert finding(contract="c.1").signature != finding(contract="c.2").signature


def test_findings_match_as_multisets():
    base, cur = sample_record(), sample_record()
    _new_finding(base)
    _new_finding(cur)
    _new_finding(cur)  # the same signature once more: one new finding
    result = compare_results(Result.from_dict(base), Result.from_dict(cur), Thresholds())
    assert len(result.new_findings) == 1 and not result.fixed_findings


def test_thresholds_validate():
    with pytest.raises(ValueError, match="must be >= 1"):
        Thresholds(max_ratio_growth=0.5)
