"""No shared module of the product branches on a kernel family's name (docs/architecture.md, "Adding a kernel
family"): what is one family's own lives in its own files, behind a part of its record, and a new family goes
through the shared path untouched.

A *branch on a family's name* is one of these, with a built-in family's name (``lora``, ``vision``, ``csgmv``)
as a string constant: a comparison of it (``==``, ``!=``, ``in``, ``not in``, alone or in a tuple, list or set of
constants) with anything; a dict display keyed by it (a dispatch table); a subscript by it
(``FAMILY_OPS["lora"]``, ``tiles["vision"]``); a ``.get`` call with it as an argument.  A *family's own file*
is one with the family's name as a folder of its path or a word of its file name (``harness/problem_lora.py``,
``kernels/vision/``, ``fuzz/targets/sglang_csgmv_target.py``, ``kernel_oracle/families/csgmv.py``).  The scan
covers the installed packages; it spares the target adapters of :data:`TARGET_KINDS`, each a target kind's own
file, which loads one upstream's code of the families it registers for and names them (``register_target(...,
families=...)``): a new family brings its own target kind, and passes through none of them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INSTALLED = ("reference", "kernels", "harness", "fuzz", "reports", "kernel_oracle", "benchmarks")
FAMILY_NAMES = ("lora", "vision", "csgmv")
# the adapters of one upstream's code (a target kind's own files, see the module docstring), and why each names
# families
TARGET_KINDS = {
    "fuzz/targets/sglang.py": "SGLang's releases: the kv_b kernels serve lora, the vision wrapper vision, the "
                              "csgmv files csgmv",
    "fuzz/targets/sglang_v2.py": "SGLang's triton_v2 path (a file of its lora folder)",
    "fuzz/targets/sglang_wheel.py": "SGLang's wheels (files of its lora folder first)",
    "fuzz/targets/identity.py": "the code a target runs: a release variant named csgmv, SGLang's lora folder",
    "fuzz/targets/triton.py": "our Triton kernels of lora and vision",
    "fuzz/targets/flashinfer_cudnn.py": "FlashInfer's cuDNN engine: a vision peer",
    "fuzz/targets/torch_varlen.py": "torch's varlen attention: a vision peer",
}


def _constants(node: ast.AST) -> set:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_constants(e) for e in node.elts)) if node.elts else set()
    return set()


def branches(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` of every branch on a family's name in ``source`` (see the module docstring)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            names = set().union(*(_constants(x) for x in (node.left, *node.comparators)))
        elif isinstance(node, ast.Dict):
            names = set().union(*(_constants(k) for k in node.keys if k is not None)) if node.keys else set()
        elif isinstance(node, ast.Subscript):
            names = _constants(node.slice)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            names = set().union(*(_constants(a) for a in node.args)) if node.args else set()
        else:
            continue
        if names & set(FAMILY_NAMES):
            found.append((node.lineno, ast.unparse(node)[:100]))
    return found


def own_file(path: Path) -> bool:
    """Whether ``path`` (relative to the repository) is a family's own file."""
    words = set(path.parts[:-1]) | set(re.split(r"[_.]", path.stem))
    return bool(words & set(FAMILY_NAMES))


def shared_files() -> list[Path]:
    return sorted(p.relative_to(ROOT) for folder in INSTALLED for p in (ROOT / folder).rglob("*.py")
                  if "__pycache__" not in p.parts and not own_file(p.relative_to(ROOT))
                  and str(p.relative_to(ROOT)) not in TARGET_KINDS)


def test_the_built_in_families_are_the_names_scanned_for():
    from kernel_oracle.families import BUILT_IN

    assert tuple(f.name for f in BUILT_IN) == FAMILY_NAMES


def test_no_shared_module_branches_on_a_familys_name():
    found = {str(p): branches((ROOT / p).read_text(encoding="utf-8")) for p in shared_files()}
    assert {p: b for p, b in found.items() if b} == {}


def test_every_target_kind_spared_is_a_file_that_names_families():
    """The spared adapters exist and each still names a family (else it needs no sparing)."""
    for path in TARGET_KINDS:
        assert branches((ROOT / path).read_text(encoding="utf-8")), path


def test_the_scan_finds_each_kind_of_branch_and_spares_a_familys_own_file():
    source = ("if case.family == 'lora':\n    pass\n"
              "ok = family in ('vision', 'x')\n"
              "_TEXTS = {'lora': 1}\n"
              "ops = FAMILY_OPS['csgmv']\n"
              "words = p.get('family', 'lora')\n"
              "fine = family == 'llama'\n")
    assert sorted(line for line, _ in branches(source)) == [1, 3, 4, 5, 6]  # not line 7: no family
    assert own_file(Path("harness/problem_lora.py")) and own_file(Path("kernels/vision/_kernel.py"))
    assert own_file(Path("fuzz/targets/sglang_csgmv_target.py")) and own_file(Path("kernel_oracle/families/csgmv.py"))
    assert not own_file(Path("harness/buckets.py")) and not own_file(Path("harness/problems.py"))
    assert Path("harness/buckets.py") in shared_files() and Path("fuzz/targets/sglang.py") not in shared_files()
