"""Size limits of the product: no file over 600 lines, no function over 80 lines outside @triton.jit.

Long pieces hide repetition and mix jobs (docs/semantics.md#design-rules: a function that needs more is two
pieces); Triton kernel bodies are exempt, because a kernel is one function by construction.  The
scan covers the installed packages and the tools; tests have their own limit (800 lines a file).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("reference", "kernels", "harness", "fuzz", "reports", "kernel_oracle", "benchmarks", "tools")
MAX_FILE_LINES = 600
MAX_TEST_FILE_LINES = 800
MAX_FUNCTION_LINES = 80


def _python_files(folders) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


def _is_triton_jit(node: ast.AST) -> bool:
    """A Triton (or Gluon) kernel: decorated with ``*.jit``, or decorated and taking ``constexpr``
    parameters (a decorator that applies ``triton.jit`` itself, e.g. twice for two specializations)."""
    decorators = [ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in getattr(node, "decorator_list", ())]
    if any(name == "jit" or name.endswith(".jit") for name in decorators):
        return True
    args = getattr(node, "args", None)
    constexpr = args is not None and any(a.annotation is not None and ast.unparse(a.annotation).endswith("constexpr")
                                         for a in args.args + args.kwonlyargs)
    return bool(decorators) and constexpr


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """(qualified name, lines) of every function longer than ``limit`` lines, Triton kernels excepted."""
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                if not _is_triton_jit(child):
                    length = child.end_lineno - child.lineno + 1
                    if length > limit:
                        found.append((name, length))
                    visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
    visit(ast.parse(source), "")
    return found


def test_the_scan_finds_a_long_function_and_spares_a_kernel():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    method = "\n".join(f"        y{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    source = (f"def long():\n{body}\n\n@triton.jit\ndef kernel():\n{body}\n\n"
              f"@twice(1)\ndef k2(X: tl.constexpr):\n{body}\n\nclass C:\n    def m(self):\n{method}\n")
    assert long_functions(source) == [("long", MAX_FUNCTION_LINES + 1), ("C.m", MAX_FUNCTION_LINES + 1)]


@pytest.mark.parametrize("path", _python_files(PRODUCT), ids=lambda p: str(p.relative_to(ROOT)))
def test_product_file_and_function_sizes(path: Path):
    source = path.read_text()
    lines = source.count("\n") + 1
    assert lines <= MAX_FILE_LINES, f"{path.relative_to(ROOT)} has {lines} lines (at most {MAX_FILE_LINES}): split it"
    assert long_functions(source) == [], (f"{path.relative_to(ROOT)}: functions over {MAX_FUNCTION_LINES} lines "
                                          "outside @triton.jit; split them")


@pytest.mark.parametrize("path", _python_files(("oracle_tests",)), ids=lambda p: str(p.relative_to(ROOT)))
def test_test_file_sizes(path: Path):
    lines = path.read_text().count("\n") + 1
    assert lines <= MAX_TEST_FILE_LINES, f"{path.relative_to(ROOT)} has {lines} lines (at most {MAX_TEST_FILE_LINES})"
