"""A finding's headline says what the target did (harness/headline.py): a write to a read-only input, a
replaced oracle, a csgmv output whose values differ, an argument whose memory it freed.  They were headed
"raises the wrong error or none", "the output's shape, dtype or return value is wrong" and a bare SIGSEGV
"crash"."""

from __future__ import annotations

import json
import subprocess

from oracle_tests.fuzz.test_faults_campaign import LORA_ARGS, _env, _fuzz_cmd, _package

_REF = "from kernel_oracle.reference.lora import step_a_q_fwd as _ref\n\n"


def _step_a_q(tmp_path, name: str, then: str) -> str:
    """A module target whose step_a_q is the reference's (a copy, ``out``), then does ``then`` (one line)."""
    return _package(tmp_path, name, _REF + f"def step_a_q_fwd({LORA_ARGS}):\n"
                                           f"    out = _ref({LORA_ARGS}, strict=False).clone()\n"
                                           f"    {then}\n    return out\n")


def _findings(tmp_path, spec: str, op: str = "step_a_q", cases: int = 4, *extra) -> list:
    done = subprocess.run(_fuzz_cmd("--targets", spec, "--op", op, "--cases", cases, "--limits", "tiny", "--out",
                                    tmp_path / "out", "--upstream-contracts-only", *extra),
                          env=_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    return json.loads((tmp_path / "out" / "summary.json").read_text())["findings"]


def test_a_write_to_a_read_only_input_is_headed_by_the_write(tmp_path):
    spec = _step_a_q(tmp_path, "writes_input", "q_nope.mul_(2)  # the caller's activations")
    (f,) = _findings(tmp_path, spec)
    assert f["headline"].startswith("step_a_q: wrote its read-only input q_nope: first changed index "), f["headline"]
    assert "raises the wrong error" not in f["headline"]


def test_a_replaced_oracle_is_headed_by_what_it_replaced(tmp_path):
    spec = _package(tmp_path, "replaces_bmm", "import torch\n_orig = torch.bmm\n"
                                              "torch.bmm = lambda a, b: _orig(a, b) * 1.25\n\n" + _REF
                    + f"def step_a_q_fwd({LORA_ARGS}):\n    return _ref({LORA_ARGS}, strict=False)\n")
    named = [f for f in _findings(tmp_path, spec) if f["message"].startswith("replaced what the oracle runs")]
    assert named and named[0]["headline"].startswith("step_a_q: replaced what the oracle runs: torch.bmm was "
                                                     "replaced by "), [f["headline"] for f in named]


def test_a_csgmv_value_mismatch_is_headed_by_its_values(tmp_path):
    spec = _package(tmp_path, "csgmv_scaled", "from kernel_oracle.reference.csgmv import "
                                              "chunked_sgmv_lora_shrink_forward as _ref\n\n"
                                              "def chunked_sgmv_lora_shrink_forward(x, weights, batch_info, num_slices,"
                                              " split_k=None):\n"
                                              "    return _ref(x, weights, batch_info, num_slices, split_k, "
                                              "strict=False) * 1.25\n")
    (f,) = [f for f in _findings(tmp_path, spec, "csgmv_shrink", 6) if f["kind"] == "mismatch"]
    assert f["headline"].startswith("csgmv_shrink: some values differ from the reference ("), f["headline"]
    assert f["bucket"]["cause"] == "values"


def test_a_target_that_frees_its_input_says_so_and_nothing_reads_it(tmp_path):
    """The probe: ``untyped_storage().resize_(0)`` on an input; the harness read the freed memory afterwards
    and the worker died (SIGSEGV), a crash with no word of what the target did."""
    spec = _step_a_q(tmp_path, "frees_input", "q_nope.untyped_storage().resize_(0)")
    findings = _findings(tmp_path, spec)
    assert [f["kind"] for f in findings] == ["contract"], [f["message"][:200] for f in findings]
    assert findings[0]["headline"].startswith("step_a_q: freed the memory of q_nope: its storage holds 0 bytes, its "
                                              "view needs "), findings[0]["headline"]
    assert findings[0]["bucket"]["cause"] == "freed q_nope"


def test_a_returned_tensor_whose_memory_was_freed_is_never_read(tmp_path):
    spec = _step_a_q(tmp_path, "frees_output", "out.untyped_storage().resize_(0)")
    (f,) = _findings(tmp_path, spec)
    assert f["kind"] == "mismatch" and f["message"].startswith("target returned a tensor whose memory was freed "
                                                                "(its storage holds 0 bytes, its view needs ")
