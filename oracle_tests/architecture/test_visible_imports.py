"""Every dependency is visible: an import by a name in a string is an arrow neither a reader nor the import linter
sees, so the product keeps a counted few, each for a reason no import statement can serve (docs/architecture.md,
Layout), and no family record names a part as a string (Note [Families registry] in harness/family.py).

A new ``import_module`` / ``__import__`` site fails here until it is listed with its reason, or written as an
import statement; a site removed lowers its count.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from kernel_oracle.harness.family import PARTS

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("reference", "kernels", "harness", "fuzz", "reports", "kernel_oracle", "benchmarks")

# file -> (import-by-name sites, why a string)
ALLOWED = {
    "reference/__init__.py": (1, "the package's own names loaded on first use (PEP 562), so importing it is light"),
    "kernel_oracle/__init__.py": (2, "the public API and its submodule loaded on first use (PEP 562)"),
    "kernel_oracle/cli/__init__.py": (1, "each subcommand's module by its name in SUBCOMMANDS, the CLI's own"),
    "kernel_oracle/api.py": (2, "a user's function saved as 'module:qualname' with a call, found again on replay"),
    "fuzz/cluster.py": (1, "an optional extra (dask, distributed, redis), named in the error when missing"),
    "fuzz/targets/adapter.py": (1, "the one guarded import of a target's code: its failure is the target's reason"),
    "fuzz/targets/user_modules.py": (1, "a user's module named by a target spec (package.module[:attr])"),
    "fuzz/targets/module_spec.py": (1, "the same, through user_modules.import_module"),
    "fuzz/targets/sglang.py": (2, "SGLang's installed modules, third-party code, through adapter.import_module"),
    "fuzz/targets/sglang_vision.py": (1, "the standard library's dataclasses, handed to a release's loaded module"),
    "fuzz/targets/triton.py": (4, "our kernels' package or a mutant's copy of it, chosen by package name"),
    "fuzz/targets/mutants.py": (1, "the folder of the kernels package a mutant copies"),
}


def _python_files() -> list[Path]:
    return sorted(p for folder in PRODUCT for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


def import_by_name_sites(source: str) -> int:
    """How many calls of ``import_module`` (any module's) or ``__import__`` ``source`` makes."""
    def name(func: ast.AST) -> str | None:
        return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None

    return sum(1 for n in ast.walk(ast.parse(source))
               if isinstance(n, ast.Call) and name(n.func) in ("import_module", "__import__"))


def parts_named_as_strings(source: str) -> list[str]:
    """``Family(...)`` calls in ``source`` whose part is a string constant: ``"line: part=value"`` each."""
    found = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) == "Family":
            found += [f"{n.lineno}: {k.arg}={k.value.value!r}" for k in n.keywords
                      if k.arg in PARTS and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str)]
    return found


def test_the_scans_find_what_they_look_for():
    source = ("import importlib\nm = importlib.import_module('a')\nn = __import__('b')\nfrom x import import_module\n"
              "o = import_module('c')\nR = Family(name='r', reference='pkg.mod', problem=_problem, ops=('r',))\n")
    assert import_by_name_sites(source) == 3
    assert parts_named_as_strings(source) == ["6: reference='pkg.mod'"]


def test_imports_by_name_are_the_listed_ones():
    sites = Counter({str(p.relative_to(ROOT)): n for p in _python_files() if (n := import_by_name_sites(p.read_text()))})
    assert dict(sites) == {path: count for path, (count, _) in ALLOWED.items()}, (
        "an import by a name in a string that is not listed (or a listed one gone): write it as an import statement, "
        "or list it in ALLOWED with the reason no statement serves")


def test_no_family_record_names_a_part_as_a_string():
    named = {str(p.relative_to(ROOT)): found for p in _python_files() if (found := parts_named_as_strings(p.read_text()))}
    assert not named, f"family records that name a part by an import path, not a loader that imports it: {named}"
