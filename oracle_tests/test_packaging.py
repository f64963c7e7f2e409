"""Our top-level packages must be the ones in this checkout.

PyPI has an unrelated package named ``kernels``; an environment that installed it (or a stale
wheel of this project) would make the suite test someone else's code without a word.  Fail loudly.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["kernels", "reference", "fuzz", "reports", "kernel_oracle", "oracle_tests"]


@pytest.mark.parametrize("name", PACKAGES)
def test_package_resolves_to_this_checkout(name):
    module = importlib.import_module(name)
    where = Path(module.__file__ or "").resolve()
    assert where == REPO_ROOT / name / "__init__.py", (
        f"`import {name}` resolved to {where}, not to this checkout ({REPO_ROOT / name}); "
        f"an unrelated or stale package shadows ours: run `pip uninstall {name}` and "
        f"`pip install -e {REPO_ROOT}`")
