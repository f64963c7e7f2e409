"""Entry points whose parameter lists are not their op's are usage errors before any case runs."""

from __future__ import annotations

import os

import pytest

from kernel_oracle.cli import main as cli_main
from kernel_oracle.harness.entry_signatures import EntrySignatureError, check_entries, raise_for, signature_problem
from kernel_oracle.reference.signatures import SIGNATURES

STEP_A_Q = SIGNATURES["step_a_q"]


def step_a_v_fwd(attn_output, A_buf, batch_info):
    pass


def test_the_table_s_own_parameter_list_and_harmless_variants_pass():
    def exact(q_nope, B_buf, batch_info, full_K_per_head):
        pass

    def defaults(q_nope, B_buf, batch_info, full_K_per_head, extra=1, *, strict=None):
        pass

    def positional_only(a, b, c, d, /):
        pass

    def star(*args, **kwargs):
        pass

    for fn in (exact, defaults, positional_only, star):
        assert signature_problem(fn, STEP_A_Q) is None, fn.__name__


@pytest.mark.parametrize("source, why", [
    ("def step_a_q_fwd(q_nope, B_buf, batch_info): pass", "lacks 'full_K_per_head'"),
    ("def step_a_q_fwd(x, B_buf, batch_info, full_K_per_head): pass", "names parameter 1 'x', not 'q_nope'"),
    ("def step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head, scale): pass", "requires 'scale'"),
    ("def step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head, *, stream): pass", "requires 'stream'"),
])
def test_a_wrong_parameter_list_is_named(source, why):
    scope: dict = {}
    exec(source, scope)
    problems = check_entries("mykernels", {"step_a_q": scope["step_a_q_fwd"], "step_a_v": step_a_v_fwd})
    assert list(problems) == ["step_a_q"]
    with pytest.raises(EntrySignatureError) as info:
        raise_for(problems, ("step_a_v", "step_a_q"))
    text = str(info.value)
    assert text.startswith("mykernels.step_a_q_fwd(") and why in text
    assert text.endswith("expected step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head, ...)")
    assert "\n" not in text


def test_fuzz_refuses_a_module_with_a_wrong_signature_before_any_case(tmp_path, monkeypatch, capsys):
    pkg = tmp_path / "ko_sig_targets"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "bad.py").write_text("def step_a_q_fwd(x, w):\n    raise AssertionError('never called')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    out = tmp_path / "out"
    rc = cli_main(["fuzz", "--targets", "ko_sig_targets.bad", "--op", "step_a_q", "--cases", "50",
                   "--device", "cpu", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert err == ["kernel-oracle fuzz: error: ko_sig_targets.bad.step_a_q_fwd(x, w) does not take the parameters "
                   "of step_a_q (names parameter 1 'x', not 'q_nope'): "
                   "expected step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head, ...)"]
    assert not (out / "findings.jsonl").exists() or not (out / "findings.jsonl").read_text().strip()
