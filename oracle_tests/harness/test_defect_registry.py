"""One registry of upstream defects (Note [Defect registry] in harness/defects.py): the known issues, the
bug corpus and the index of docs/upstream/ are read from its [[defect]] records, and each corpus entry,
known issue and file of docs/upstream/ is reached from it, once; every path it names exists."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from kernel_oracle.harness.data_files import loads_toml
from kernel_oracle.harness.defects import REGISTRY, DefectError, load_defects, upstream_index
from kernel_oracle.harness.known_issues import KnownIssuesError, load_known_issues
from kernel_oracle.jobs.bug_corpus import CorpusError, load_corpus, load_entry

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFECTS = load_defects()


def test_every_corpus_entry_is_one_defects():
    on_disk = sorted(p.stem for p in (REPO_ROOT / "corpus").glob("*.toml"))
    named = [d.corpus for d in DEFECTS if d.corpus]
    assert sorted(named) == on_disk, "corpus files and the registry's corpus fields differ"
    assert [e.id for e in load_corpus()] == on_disk


def test_corpus_entries_take_title_link_and_status_from_their_defect():
    by_corpus = {d.corpus: d for d in DEFECTS if d.corpus}
    for e in load_corpus():
        d = by_corpus[e.id]
        assert (e.title, e.upstream, e.status) == (d.title, d.upstream, d.status)
        assert bool(e.fixed) == bool(d.fixed)
        text = (REPO_ROOT / "corpus" / f"{e.id}.toml").read_text()
        assert not re.search(r"^(title|upstream|status) =", text, re.M), f"{e.id} repeats its defect's fields"


def test_every_known_issue_is_a_rule_of_one_defect():
    assert "issue" not in loads_toml(REGISTRY.read_text(), str(REGISTRY)), "a known issue outside a [[defect]]"
    rules = Counter(str(i["id"]) for d in DEFECTS for i in d.issues)
    assert rules and max(rules.values()) == 1
    issues = load_known_issues(REGISTRY)
    assert sorted(rules) == sorted(i.id for i in issues)
    of = {str(i["id"]): d for d in DEFECTS for i in d.issues}
    for issue in issues:
        assert (issue.upstream, issue.doc) == (of[issue.id].upstream, of[issue.id].doc_line())


def test_every_file_of_docs_upstream_is_reached_and_every_named_path_exists():
    upstream = REPO_ROOT / "docs" / "upstream"
    on_disk = {f"docs/upstream/{p.name}" for p in upstream.iterdir() if p.suffix in (".md", ".py")}
    named = {p for d in DEFECTS for p in d.paths()}
    assert on_disk - {"docs/upstream/README.md"} <= named, f"orphans: {sorted(on_disk - named)}"
    missing = sorted(p for p in named if not (REPO_ROOT / p).is_file())
    assert not missing, f"the registry names files that do not exist: {missing}"


def test_the_docs_upstream_index_is_generated_from_the_registry():
    assert (REPO_ROOT / "docs" / "upstream" / "README.md").read_text() == upstream_index(), (
        "docs/upstream/README.md is stale: python -m kernel_oracle.harness.defects > docs/upstream/README.md")
    assert all(d.id in upstream_index() for d in DEFECTS)


DEFECT = '[[defect]]\nid = "a-b"\ntitle = "t"\ncomponent = "sglang"\nop = "lora"\n' \
         'upstream = "https://example.org/1"\nintroduced = "0.5.12"\nfixed = ""\ncorpus = "c"\n'
RULE = '[[defect.issue]]\nid = "a-b-rule"\ntitle = "t"\ntarget = "sglang"\nop = "lora"\nkind = "crash"\n' \
       'message = "x"\n'


@pytest.mark.parametrize("text, error", [
    (DEFECT + DEFECT.replace('corpus = "c"', 'corpus = "d"'), "id 'a-b' appears in two [[defect]] records"),
    (DEFECT + DEFECT.replace('id = "a-b"', 'id = "a-c"'), "corpus 'c' appears in two [[defect]] records"),
    (DEFECT.replace('component = "sglang"', 'component = "mine"'), "component='mine'; the only valid values"),
    (DEFECT + RULE.replace('message = "x"', 'message = "x"\nupstream = "https://e.org"'),
     "['upstream'] come from the [[defect]] record 'a-b'"),
])
def test_a_duplicate_or_malformed_record_is_refused(tmp_path, text, error):
    path = tmp_path / "k.toml"
    path.write_text(text)
    with pytest.raises((DefectError, KnownIssuesError), match=re.escape(error)):
        load_known_issues(path)


def test_a_registry_entry_that_repeats_its_defect_is_refused(tmp_path):
    defect = next(d for d in DEFECTS if d.corpus)
    path = tmp_path / f"{defect.corpus}.toml"
    path.write_text('title = "again"\n' + (REPO_ROOT / "corpus" / f"{defect.corpus}.toml").read_text())
    with pytest.raises(CorpusError, match=re.escape(f"['title'] come from the registry's defect {defect.id!r}")):
        load_entry(path, defect)
