"""Our ``LoRABatchInfo`` mirrors SGLang's, release by release: every field of each release's own class
(read from its ``sglang/srt/lora/utils.py`` with :mod:`ast`) is a field of ours, with the same default
where the release gives one."""

from __future__ import annotations

import ast
import dataclasses

import pytest

from kernel_oracle.reference.batch_info import LoRABatchInfo

from oracle_tests._sglang_releases import RELEASES, release_files

UTILS = "sglang/srt/lora/utils.py"


def release_fields(version: str) -> dict:
    """field -> its default as source text (None: no default) of ``LoRABatchInfo`` in ``version``."""
    tree = ast.parse(release_files(version).read(UTILS))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "LoRABatchInfo")
    return {n.target.id: (ast.unparse(n.value) if n.value is not None else None)
            for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}


def _ours() -> dict:
    out = {}
    for f in dataclasses.fields(LoRABatchInfo):
        out[f.name] = None if f.default is dataclasses.MISSING else repr(f.default)
    return out


@pytest.mark.parametrize("version", RELEASES)
def test_every_field_of_the_release_is_ours_with_its_default(version):
    theirs, ours = release_fields(version), _ours()
    missing = sorted(set(theirs) - set(ours))
    assert not missing, f"sglang {version}'s LoRABatchInfo has {missing}, which ours lacks"
    for name, default in theirs.items():  # a field the release requires may have a later release's default
        if default is not None:
            assert ours[name] == default, f"{name}: sglang {version} defaults to {default}, ours to {ours[name]}"


def test_0_5_23_has_is_prefill():
    """The field the triton_v2 path plans by (docs/sglang_releases.md): new in 0.5.23, false by default."""
    assert release_fields("0.5.23")["is_prefill"] == "False"
    assert "is_prefill" not in release_fields("0.5.15")
