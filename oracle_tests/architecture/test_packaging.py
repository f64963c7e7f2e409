"""Our packages must be the ones in this checkout, and only under ``kernel_oracle.*``.

The repository keeps the design card's top-level folders (``reference/``, ``kernels/``, ...);
pyproject's package-dir table installs them as ``kernel_oracle.reference``, ``kernel_oracle.kernels``
and so on.  Two ways this goes wrong without a word:

* a stale wheel or an unrelated install shadows ours, and the suite tests someone else's code;
* a module imports a folder by its old top-level name (``import reference``): it works in the
  checkout (the repository root is on ``sys.path`` under pytest) and breaks once installed, or, worse,
  loads Hugging Face's ``kernels`` or PyPI's ``reference`` instead of ours.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
_SETUPTOOLS = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
PACKAGE_DIRS = _SETUPTOOLS["package-dir"]  # import name -> folder of this checkout
OLD_TOP_LEVEL = ("reference", "kernels", "fuzz", "reports", "harness", "benchmarks")

# Imports every module of the installed layout with the checkout root first on sys.path (as under
# pytest) -- each package of the wheel ($KO_PACKAGES) and its modules -- then prints the modules
# loaded from the package folders of this checkout ($KO_FOLDERS) under a name outside kernel_oracle.*.
_IMPORT_EVERYTHING = r"""
import importlib, json, os, pkgutil, sys
root = sys.argv[1]
sys.path.insert(0, root)
os.environ.setdefault("TRITON_INTERPRET", "1")  # kernel modules on a machine without a GPU
for extra in sys.argv[2:]:
    importlib.import_module(extra)
import kernel_oracle
names = []
for package in json.loads(os.environ["KO_PACKAGES"]):  # every package of the wheel, then its modules
    names.append(package)
    path = importlib.import_module(package).__path__
    names += [info.name for info in pkgutil.iter_modules(path, package + ".") if not info.ispkg]
for name in names:
    if not name.endswith("__main__"):  # running the CLI is not importing it
        importlib.import_module(name)
for attr in kernel_oracle.__all__:
    getattr(kernel_oracle, attr)
folders = tuple(os.path.realpath(os.path.join(root, f)) + os.sep for f in json.loads(os.environ["KO_FOLDERS"]))
stray = sorted(n for n, m in list(sys.modules.items())
               if n.split(".")[0] != "kernel_oracle"
               and os.path.realpath(getattr(m, "__file__", None) or "/").startswith(folders))
print(json.dumps({"imported": len(names), "stray": stray}))
"""


@pytest.mark.parametrize("name", sorted(PACKAGE_DIRS))
def test_package_resolves_to_this_checkout(name):
    module = importlib.import_module(name)
    where = Path(module.__file__ or "").resolve()
    expected = REPO_ROOT / PACKAGE_DIRS[name] / "__init__.py"
    assert where == expected, (
        f"`import {name}` resolved to {where}, not to this checkout ({expected}); a stale or unrelated "
        f"install shadows ours: run `pip uninstall kernel-oracle` and `pip install -e {REPO_ROOT}`")


def test_public_api_is_typed():
    assert (REPO_ROOT / "kernel_oracle" / "py.typed").is_file()
    assert "py.typed" in _SETUPTOOLS["package-data"]["kernel_oracle"]


def _import_everything(*extra: str) -> dict:
    env = {**os.environ, "KO_FOLDERS": json.dumps(sorted(set(PACKAGE_DIRS.values()))),
           "KO_PACKAGES": json.dumps(_SETUPTOOLS["packages"])}
    proc = subprocess.run([sys.executable, "-c", _IMPORT_EVERYTHING, str(REPO_ROOT), *extra],
                          capture_output=True, text=True, timeout=600, cwd=REPO_ROOT.parent, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_importing_everything_loads_no_old_top_level_name():
    result = _import_everything()
    assert result["imported"] > 40, result  # the walk really reached the subpackages
    assert result["stray"] == [], (
        f"these modules of this checkout were imported under a name outside kernel_oracle.*: "
        f"{result['stray']}; import them as kernel_oracle.<folder>... (pyproject's package-dir table)")


def test_the_stray_import_check_can_fail():
    """An old-style ``import reference`` is caught (the check above is not vacuous)."""
    result = _import_everything("reference.tolerance")
    assert "reference" in result["stray"] and "reference.tolerance" in result["stray"], result
