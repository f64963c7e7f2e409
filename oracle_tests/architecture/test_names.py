"""One meaning per name: no two classes of the installed product share a name.

A reader who meets ``Outcome`` or ``Call`` in a signature must know which one it is without following the
import; two classes of one name in two modules make every such reading a look-up (docs/architecture.md,
Names).  The scan reads the installed packages' sources (the tools, run as files, are not a namespace).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("reference", "kernels", "harness", "fuzz", "reports", "kernel_oracle", "benchmarks")


def class_names(sources: dict[str, str]) -> dict[str, list[str]]:
    """class name -> ``path:line`` of every class defined with that name in ``sources`` (path -> text)."""
    found: dict[str, list[str]] = defaultdict(list)
    for path, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                found[node.name].append(f"{path}:{node.lineno}")
    return found


def shared_names(sources: dict[str, str]) -> dict[str, list[str]]:
    """The class names defined more than once in ``sources``, each with where."""
    return {name: where for name, where in class_names(sources).items() if len(where) > 1}


def _product_sources() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for folder in PRODUCT for p in sorted((ROOT / folder).rglob("*.py"))
            if "__pycache__" not in p.parts}


def test_the_scan_finds_a_name_defined_twice():
    sources = {"a.py": "class Call:\n    pass\n", "b.py": "def f():\n    class Call:\n        pass\n",
               "c.py": "class Other:\n    pass\n"}
    assert shared_names(sources) == {"Call": ["a.py:1", "b.py:2"]}


def test_no_two_classes_of_the_product_share_a_name():
    shared = shared_names(_product_sources())
    assert not shared, ("classes of one name in several modules; give each its own name: "
                        + "; ".join(f"{n} ({', '.join(w)})" for n, w in sorted(shared.items())))
