"""The target cannot change the oracle (Note [The oracle's own code] in harness/oracle_integrity.py): a target
that replaces ``torch.bmm``, registers an ``aten::bmm`` kernel, leaves a torch function mode on, or patches
the harness's ``judge`` -- at import or during a call -- is a finding naming what it replaced, in campaigns
(isolated or not) and in ``assert_matches``.  Each made a kernel 1.25x wrong everywhere come out clean."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import kernel_oracle
from kernel_oracle.harness.problems import materialize
from kernel_oracle.harness.problem_lora import LoRAProblem

from oracle_tests.conftest import DEVICE
from oracle_tests.fuzz.test_faults_campaign import LORA_ARGS, _env, _fuzz_cmd, _package

# each plants one way of reaching the oracle; the target's step_a_q is the reference's (through the planted
# change, so 1.25x wrong wherever the oracle is fooled too) or, for the judge, plainly wrong
_SCALED = "def _scaled(a, b):\n    return (a.unsqueeze(-1) * b.unsqueeze(1)).sum(-2) * 1.25\n"
PLANTS = {
    "torch.bmm": "import torch\n_orig = torch.bmm\ntorch.bmm = lambda a, b: _orig(a, b) * 1.25\n",
    "aten::bmm": f"import torch\n{_SCALED}_LIB = torch.library.Library('aten', 'IMPL')\n"
                 f"for _key in ('CPU', 'CUDA'):\n    _LIB.impl('bmm', _scaled, _key)\n",
    "torch function mode": "import torch\nfrom torch.overrides import TorchFunctionMode\n\n"
                           "class _Scale(TorchFunctionMode):\n"
                           "    def __torch_function__(self, func, types, args=(), kwargs=None):\n"
                           "        out = func(*args, **(kwargs or {}))\n"
                           "        return out * 1.25 if func in (torch.bmm, torch.einsum) else out\n\n"
                           "_Scale().__enter__()\n",
    "kernel_oracle.harness.check.judge": "import kernel_oracle.harness.check as _c\n"
                                         "_c.judge = lambda *a, **k: _c.Verdict(True, expected='a result')\n",
}
_ENTRY = ("from kernel_oracle.reference.lora import step_a_q_fwd as _ref\n\n"
          f"def step_a_q_fwd({LORA_ARGS}):\n    out = _ref({LORA_ARGS}, strict=False)\n    return out{{wrong}}\n")


def _target(tmp_path, plant: str, *, at_call: bool = False) -> str:
    wrong = " * 1.25" if plant.endswith("judge") else ""
    name = "".join(c if c.isalnum() else "_" for c in plant) + ("_call" if at_call else "")
    body = PLANTS[plant] + "\n" + _ENTRY.format(wrong=wrong)
    if at_call:  # the plant runs in the first call instead of at import
        body = (_ENTRY.format(wrong=wrong).replace(f"def step_a_q_fwd({LORA_ARGS}):\n",
                                                   f"_DONE = []\n\ndef step_a_q_fwd({LORA_ARGS}):\n"
                                                   f"    if not _DONE:\n        _DONE.append(1)\n        _plant()\n")
                + "\n\ndef _plant():\n    global _LIB\n" + "".join(f"    {line}\n" for line in PLANTS[plant].splitlines()))
    return _package(tmp_path, name, body)


@pytest.mark.parametrize("isolate", [True, False])
@pytest.mark.parametrize("plant", list(PLANTS))
def test_a_campaign_finds_a_target_that_changes_the_oracle_at_import(tmp_path, plant, isolate):
    spec = _target(tmp_path, plant)
    done = subprocess.run(_fuzz_cmd("--targets", spec, "--op", "step_a_q", "--cases", "8", "--out", tmp_path / "out",
                                    *(() if isolate else ("--no-isolate",))),
                          env=_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    findings = json.loads((tmp_path / "out" / "summary.json").read_text())["findings"]
    named = [f for f in findings if f["message"].startswith("replaced what the oracle runs: ")]
    said = {"torch function mode": "a TorchFunctionMode (torch_function_mode_pkg"}.get(plant, plant)
    assert named and said in named[0]["message"], [f["message"][:160] for f in findings]


@pytest.mark.parametrize("plant", ["torch.bmm", "aten::bmm", "kernel_oracle.harness.check.judge"])
def test_a_campaign_finds_a_target_that_changes_the_oracle_in_a_call(tmp_path, plant):
    spec = _target(tmp_path, plant, at_call=True)
    done = subprocess.run(_fuzz_cmd("--targets", spec, "--op", "step_a_q", "--cases", "8", "--out", tmp_path / "out"),
                          env=_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    findings = json.loads((tmp_path / "out" / "summary.json").read_text())["findings"]
    assert any(f["message"].startswith("replaced what the oracle runs: ") and plant in f["message"]
               for f in findings), [f["message"][:160] for f in findings]


def _call():
    p = LoRAProblem(op="step_a_q", seg_lens=(3, 2), weight_indices=(0, 1), lora_ranks=(8, 4), scalings=(1.0, 0.5),
                    H=2, qk=16, vd=16, C=16, R=8, seed=1)
    return materialize(p, DEVICE)


def test_assert_matches_detects_a_replaced_torch_function_and_says_so(monkeypatch):
    """In the user's own process, kernel_oracle loaded first: a replaced ``torch.bmm`` is named and put back."""
    from kernel_oracle.harness import oracle_integrity

    oracle_integrity.baseline()  # what the first call of kernel_oracle's check does, before the target's import
    orig = torch.bmm
    monkeypatch.setattr(torch, "bmm", lambda a, b: orig(a, b) * 1.25)
    fooled = kernel_oracle.reference.lora.step_a_q_fwd
    with pytest.raises(AssertionError, match=r"replaced what the oracle runs: torch\.bmm was replaced by "):
        kernel_oracle.assert_matches("step_a_q", fooled, *_call().args)
    assert torch.bmm is orig


@pytest.mark.parametrize("plant, says", [("torch.bmm", "torch.bmm is __main__.<lambda>, not torch's"),
                                         ("aten::bmm", "aten::bmm has a CPU kernel registered at ")])
def test_assert_matches_detects_a_change_made_before_kernel_oracle_was_loaded(plant, says):
    """The user's process may load the target first: a callable of torch's that is not torch's and a
    dispatcher kernel registered from outside torch are found whatever the order (a fresh process)."""
    script = (PLANTS[plant] + "\nimport kernel_oracle\n"
              "from kernel_oracle.harness.problems import materialize\nfrom kernel_oracle.harness.problem_lora import LoRAProblem\n"
              "p = LoRAProblem(op='step_a_q', seg_lens=(3,), weight_indices=(0,), lora_ranks=(8,), scalings=(1.0,),"
              " H=2, qk=16, vd=16, C=16, R=8)\n"
              "try:\n    kernel_oracle.assert_matches('step_a_q', kernel_oracle.reference.lora.step_a_q_fwd,"
              " *materialize(p).args)\nexcept AssertionError as exc:\n    print(str(exc).splitlines()[0])\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert f"replaced what the oracle runs: {says}" in done.stdout, \
        done.stdout + done.stderr


def test_a_right_kernel_changes_nothing():
    assert kernel_oracle.assert_matches("step_a_q", kernel_oracle.reference.lora.step_a_q_fwd, *_call().args).ok


def test_a_caller_patch_during_an_in_process_campaign_is_not_put_back_after_it(tmp_path, monkeypatch):
    """An in-process campaign takes the baseline again with its caller's patches in place (a test's
    monkeypatch is the caller's, not the target's), and gives the caller's baseline back when it ends: else
    the undone patch reads as a replacement and later checks put the patched object back."""
    import kernel_oracle.harness.check as check
    from kernel_oracle.fuzz.campaign import CampaignConfig, run_campaign
    from kernel_oracle.harness import oracle_integrity

    oracle_integrity.baseline()
    original = check.judge
    with monkeypatch.context() as patch:
        patch.setattr(check, "judge", lambda *a, **k: original(*a, **k))
        run_campaign(CampaignConfig(target="reference", op="step_a_q", budget=2, device=DEVICE,
                                    out_dir=tmp_path / "out", progress=False, isolate=False))
    assert check.judge is original
    assert oracle_integrity.replaced() == []  # the caller's baseline: nothing replaced
    assert check.judge is original
