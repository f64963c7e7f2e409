"""The product's semantics are cited from the product's own documents.

Every statement the code relies on (the kv_b and vision semantics, the error contracts and their order,
the tolerance rule, the CUDA-graph host-int rules, the interpreter's defects, the exit codes) lives in
``docs/semantics.md`` or another page under ``docs/``.  So no tracked file names a document outside
the repository (the developers' brief files), and every ``docs/<page>.md`` path a file cites exists,
with the section its ``#anchor`` names.  The plant tests show the scan catches each kind.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# documents outside the repository; built from parts so that this file does not cite them itself
OUTSIDE = re.compile(r"\b(?:" + "SPEC" + "|" + "STYLE" + r")\.md\b")
# a docs page cited by its repository path, with an optional section
DOCS_PATH = re.compile(r"(?<![\w/.-])(docs/[\w./-]*?\.md)(?:#([\w-]+))?")
# a relative Markdown link inside a docs page: [text](page.md#section)
MD_LINK = re.compile(r"\]\(([\w./-]+\.md)(?:#([\w-]+))?\)")


def tracked_files(root: Path = ROOT) -> list[Path]:
    """The git-tracked files under ``root`` that exist in the working tree."""
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True, check=True).stdout
    return [root / name for name in out.split("\0") if name and (root / name).is_file()]


def _text(path: Path):
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None


def _name(path: Path, root: Path) -> str:
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*$", page.read_text(encoding="utf-8"), re.M)}


def outside_citations(paths, root: Path = ROOT) -> list[str]:
    """``path:line: text`` of every line that names a document outside the repository."""
    found = []
    for path in paths:
        text = _text(path)
        if text is None or not OUTSIDE.search(text):
            continue
        for i, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                found.append(f"{_name(path, root)}:{i}: {line.strip()}")
    return found


def broken_doc_citations(paths, root: Path = ROOT) -> list[str]:
    """``path:line: cited`` of every cited docs page that does not exist, or whose section does not."""
    found, cache = [], {}
    for path in paths:
        text = _text(path)
        if text is None or ".md" not in text:
            continue
        for i, line in enumerate(text.splitlines(), 1):
            cites = [(root / m.group(1), m.group(2), m.group(0)) for m in DOCS_PATH.finditer(line)]
            if path.suffix == ".md" and path.parent.is_relative_to(root / "docs"):
                cites += [((path.parent / m.group(1)).resolve(), m.group(2), m.group(0)) for m in MD_LINK.finditer(line)]
            for page, anchor, cited in cites:
                if not page.is_file():
                    found.append(f"{_name(path, root)}:{i}: {cited} (no such page)")
                elif anchor and anchor not in cache.setdefault(page, anchors(page)):
                    found.append(f"{_name(path, root)}:{i}: {cited} (no such section)")
    return found


def test_no_file_cites_documents_outside_the_repository():
    found = outside_citations(tracked_files())
    assert not found, ("these lines cite documents the product does not contain; cite docs/semantics.md#<section> "
                       "(or the docs page that says it) instead:\n" + "\n".join(found))


def test_every_cited_docs_page_and_section_exists():
    found = broken_doc_citations(tracked_files())
    assert not found, "these lines cite docs pages or sections that do not exist:\n" + "\n".join(found)


def test_semantics_page_has_the_sections_the_code_relies_on():
    have = anchors(ROOT / "docs" / "semantics.md")
    for section in ("kv_b-lora-steps", "routing", "math-and-rounding-points", "cuda-graph-host-ints",
                    "vision-attention", "error-contracts-and-their-order", "strict-validation",
                    "fields-that-may-disagree", "tolerance-rule", "where-sglang-keeps-the-kernels", "exit-codes",
                    "where-the-triton-interpreter-is-wrong", "design-rules"):
        assert section in have, f"docs/semantics.md lost its section #{section}"


@pytest.mark.parametrize("line", [
    "# the contract (" + "SPEC" + ".md part 1)\n",
    '"""see ' + "STYLE" + '.md: one description per thing"""\n',
])
def test_plant_an_outside_citation(tmp_path, line):
    planted = tmp_path / "planted.py"
    planted.write_text("x = 1\n" + line)
    found = outside_citations([planted], root=tmp_path)
    assert found == [f"planted.py:2: {line.strip()}"]


@pytest.mark.parametrize("cited, why", [
    ("docs/" + "no_such_page.md", "no such page"),
    ("docs/semantics.md" + "#no-such-section", "no such section"),
])
def test_plant_a_broken_docs_citation(tmp_path, cited, why):
    planted = tmp_path / "planted.py"
    planted.write_text(f"# see {cited}\n# and docs/semantics.md#exit-codes, which exists\n")
    found = broken_doc_citations([planted])
    assert found == [f"{planted}:1: {cited} ({why})"]


PAGE = "docs" + "/page.md"  # a planted page, in parts so that this file does not cite it


def test_plant_broken_links_between_docs_pages(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "semantics.md").write_text("# Semantics\n\n## Exit codes\n")
    page = tmp_path / "docs" / "page.md"
    page.write_text("[fine](semantics.md#exit-codes), [gone](semantics.md#no-such-section)\n[missing](missing.md)\n")
    assert broken_doc_citations([page], root=tmp_path) == [
        f"{PAGE}:1: ](semantics.md#no-such-section) (no such section)", f"{PAGE}:2: ](missing.md) (no such page)"]
