"""A crash is a finding of its case only once a fresh process reproduces it (Note [Confirmed crashes] in
fuzz/crashes.py), and a lenient target's crash on malformed metadata is a validation gap that stops being
drawn (Note [Malformed consequences]).

The targets are tiny modules that raise what CUDA raises when a context breaks (``torch.AcceleratorError``)
and, like a broken context, keep raising it in that process: the crash is planted on the CPU.
"""

from __future__ import annotations

from pathlib import Path

from kernel_oracle.fuzz.campaign import CampaignConfig, run_campaign

_HEAD = '''
import os, torch
from kernel_oracle.reference.lora import step_a_q_fwd as _right

_BROKEN, _SEEN = [], []

def _break():
    _BROKEN.append(1)  # the context stays broken for the rest of this process
    raise torch.AcceleratorError("CUDA error: misaligned address")
'''

# crashes on every batch of more than one segment (the case's own crash)
OWN = _HEAD + '''
KERNEL_ORACLE_STRICT = True

def step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head):
    if _BROKEN or int(batch_info.seg_indptr.numel()) > 2:
        _break()
    return _right(q_nope, B_buf, batch_info, full_K_per_head)
'''

# crashes when the head count differs from the call before it in the same process (a cache keyed on too little)
AFTER = _HEAD + '''
KERNEL_ORACLE_STRICT = True

def step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head):
    heads = int(q_nope.shape[1])
    if _BROKEN or (_SEEN and _SEEN[-1] != heads):
        _break()
    _SEEN.append(heads)
    return _right(q_nope, B_buf, batch_info, full_K_per_head)
'''

# crashes once in the whole campaign, whatever the case (a machine's hiccup): MARK is a file path
ONCE = _HEAD + '''
KERNEL_ORACLE_STRICT = True
MARK = {mark!r}

def step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head):
    if _BROKEN or (len(_SEEN) == 2 and not os.path.exists(MARK)):
        open(MARK, "w").close()
        _break()
    _SEEN.append(1)
    return _right(q_nope, B_buf, batch_info, full_K_per_head)
'''

# no strict validation: right on valid batches, the context broken by any metadata the reference rejects
LENIENT = _HEAD + '''
def step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head):
    if _BROKEN:
        _break()
    try:
        return _right(q_nope, B_buf, batch_info, full_K_per_head)
    except (ValueError, IndexError, RuntimeError) as exc:
        if "must provide max_len or seg_lens" in str(exc):
            raise
        _break()
'''


def _campaign(root: Path, name: str, source: str, monkeypatch, **kw) -> dict:
    (root / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(root))  # the spawned worker inherits sys.path
    kw.setdefault("upstream_contracts_only", True)
    return run_campaign(CampaignConfig(target=name, op="step_a_q", seed=0, device="cpu", out_dir=root / "out",
                                       progress=False, shrink_allowance=4, limits="tiny", **kw))


def test_a_crash_a_fresh_process_reproduces_is_the_cases_finding(tmp_path, monkeypatch):
    rec = _campaign(tmp_path, "ko_crash_own", OWN, monkeypatch, budget=25)
    (crash,) = [f for f in rec["findings"] if f["kind"] == "crash"]
    assert "left the CUDA context broken" in crash["message"] and "after_case" not in crash
    assert rec["summary"]["crash_confirms"] == 1 and rec["summary"]["unconfirmed_crashes"] == []


def test_a_crash_only_after_an_earlier_case_is_a_finding_of_the_pair(tmp_path, monkeypatch):
    rec = _campaign(tmp_path, "ko_crash_after", AFTER, monkeypatch, budget=25)
    (crash,) = [f for f in rec["findings"] if f["kind"] == "crash"]
    assert "crashes only after the case before it" in crash["message"], crash["message"]
    before, after = crash["after_case"]["problem"], crash["problem"]["problem"]
    assert before["H"] != after["H"], (before, after)  # the pair that crashes, recorded


def test_a_crash_no_replay_reproduces_is_no_finding_but_is_kept(tmp_path, monkeypatch):
    rec = _campaign(tmp_path, "ko_crash_once", ONCE.replace("{mark!r}", repr(str(tmp_path / "crashed"))),
                    monkeypatch, budget=12)
    assert rec["findings"] == [], [f["message"] for f in rec["findings"]]
    (kept,) = rec["summary"]["unconfirmed_crashes"]
    assert "misaligned address" in kept["message"] and kept["problem"]["problem"]["family"] == "lora"
    assert any("unconfirmed_crashes" in n for n in rec["notes"]), rec["notes"]


def test_malformed_metadata_that_breaks_the_context_is_a_gap_and_stops_being_drawn(tmp_path, monkeypatch):
    rec = _campaign(tmp_path, "ko_crash_lenient", LENIENT, monkeypatch, budget=120, upstream_contracts_only=False)
    assert not [f for f in rec["findings"] if f["kind"] == "crash"], [f["message"] for f in rec["findings"]]
    broken = [g for g in rec["validation_gaps"] if g.get("consequence") == "breaks the CUDA context"]
    assert broken, rec["validation_gaps"]
    skipped = rec["summary"]["known_skipped"]
    assert any(k.startswith("breaks the CUDA context: step_a_q ") for k in skipped), (skipped, broken)
    assert all(g["count"] <= 2 for g in broken), broken  # two breaks of a kind, then it is no longer run
