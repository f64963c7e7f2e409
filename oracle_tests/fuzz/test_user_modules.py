"""A module target is found where the user stands: the current directory first (Note [Modules beside
the user]); an import that finds nothing says where it looked."""

from __future__ import annotations

import sys
import uuid

import pytest

from kernel_oracle.fuzz.targets import resolve_target
from kernel_oracle.fuzz.targets.identity import code_hash
from kernel_oracle.harness.targets import TargetSpec

_MODULE = '''
import torch

def step_a_v_fwd(attn_output, A_buf, batch_info):
    return torch.zeros(attn_output.shape[0], attn_output.shape[1], A_buf.shape[1], dtype=attn_output.dtype)
'''


@pytest.fixture
def beside_user(tmp_path, monkeypatch):
    """A fresh module name written to ``tmp_path``, the current directory; ``sys.path`` without it."""
    name = f"user_kernels_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    yield name
    sys.modules.pop(name, None)


def test_a_module_in_the_current_directory_is_a_target(beside_user):
    target = resolve_target(beside_user, "cpu")
    assert target.available, target.reason
    assert "step_a_v" in target.entries
    assert not code_hash(TargetSpec.parse(beside_user)).startswith("unlocated"), "its files are hashed for resume"


def test_a_plain_name_in_the_current_directory_is_a_module_target(tmp_path, monkeypatch):
    name = f"userkernels{uuid.uuid4().hex[:8]}"  # no '_': only an importable module makes it a module spec
    (tmp_path / f"{name}.py").write_text(_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    try:
        assert resolve_target(name, "cpu").available
    finally:
        sys.modules.pop(name, None)


def test_an_import_that_finds_nothing_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name = f"absent_kernels_{uuid.uuid4().hex[:8]}"
    target = resolve_target(name, "cpu")
    assert not target.available
    assert f"looked in the current directory ({tmp_path})" in target.reason
    assert f"holds {name}.py or {name}/, or add that folder to PYTHONPATH" in target.reason
