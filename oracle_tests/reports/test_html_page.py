"""The HTML page: parses, is self-contained, shows every finding with its repro command; and
Chromium renders it to a non-blank screenshot (when Chromium is installed)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import pytest

from kernel_oracle.cli import main as cli_main
from oracle_tests._html import HtmlPage
from oracle_tests._sample_record import sample_record
from oracle_tests.conftest import REQUIRED
from kernel_oracle.reports.model import Result
from kernel_oracle.reports.render_html import render_html
from kernel_oracle.reports.render_md import render_markdown
from kernel_oracle.harness.schema import new_record, save

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


@pytest.fixture(scope="module")
def page() -> tuple[Result, str, HtmlPage]:
    result = Result.from_dict(sample_record())
    text = render_html(result)
    p = HtmlPage()
    p.feed(text)
    p.close()
    return result, text, p


def test_page_parses(page):
    _, text, p = page
    assert text.startswith("<!DOCTYPE html>")
    assert [t for t, _ in p.tags[:3]] == ["html", "head", "meta"]
    assert not p.open, f"unclosed tags: {p.open}"


def test_page_is_self_contained(page):
    _, text, p = page
    external = [(t, u) for t, u in p.hrefs + p.srcs if u.startswith(("http:", "https:", "//", "ftp:"))
                and not (t == "svg" or u.startswith("http://www.w3.org/"))]
    assert not external, external
    assert not [a for t, a in p.tags if t == "script" and a.get("src")]
    assert not [a for t, a in p.tags if t == "link" and "stylesheet" in (a.get("rel") or "")]
    assert not [a for t, a in p.tags if t == "img" and not a.get("src", "").startswith("data:")]
    assert "@import" not in text and "url(http" not in text
    style = text[text.index("<style>"):text.index("</style>")]
    assert "&#34;" not in style and "&quot;" not in style, "the inline CSS was HTML-escaped (fonts break)"
    for tag, url in p.hrefs:  # every in-page link points at an element of the page
        if url.startswith("#"):
            assert url[1:] in p.ids, f"<{tag} href={url!r}> points nowhere"


def test_page_shows_every_finding_with_its_repro(page):
    result, text, p = page
    assert result.findings
    for f in result.findings:
        assert f.anchor in p.ids
        assert ("a", {"href": f"#{f.anchor}"}) in p.tags  # linked from the findings table
        assert (f.repro, f.anchor) in p.codes, f"repro of {f.id} not in a <code> block of its article"
        assert f.first_line in p.articles[f.anchor]


def test_page_has_plots_and_tables(page):
    result, text, p = page
    svgs = [a for t, a in p.tags if t == "svg"]
    assert len(svgs) == 3, "error ratios, speed against peers, roofline"
    assert "sglang target skipped" in text  # notes are shown
    for g in result.groups:
        assert f"<td>{g.shape_class}</td>" in text


def test_markdown_has_every_finding_and_repro():
    result = Result.from_dict(sample_record())
    md = render_markdown(result)
    for f in result.findings:
        assert f'<a id="{f.anchor}"></a>' in md and f"(#{f.anchor})" in md and f.repro in md


def test_empty_record_renders(tmp_path, capsys):
    path = save(new_record("campaign"), tmp_path / "empty.json")
    assert cli_main(["report", str(path), "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "empty.html").read_text()
    assert "No findings." in text and "No error ratios were recorded." in text
    assert (tmp_path / "out" / "empty.md").is_file()


def test_report_cli_usage_error(tmp_path, capsys):
    assert cli_main(["report", str(tmp_path / "absent.json")]) == 2
    assert "no such result file" in capsys.readouterr().err


def _png_is_not_blank(path) -> tuple[int, int, int]:
    """(width, height, distinct colours in a sample of pixels)."""
    Image = pytest.importorskip("PIL.Image", reason="Pillow (a matplotlib dependency) reads the screenshot")
    with Image.open(path) as im:
        im = im.convert("RGB")
        w, h = im.size
        small = im.resize((max(1, w // 8), max(1, h // 8)))
        colours = len(small.getcolors(maxcolors=1 << 24))
    return w, h, colours


def test_chromium_renders_the_page(tmp_path):
    if CHROMIUM is None:
        if "chromium" in REQUIRED:  # .ci/run installs it: absent is a failure
            pytest.fail("KERNEL_ORACLE_REQUIRE names chromium but no chromium on PATH (apt-get install -y chromium)")
        pytest.skip("Chromium is not installed (apt-get install -y chromium) to render the page")
    src = save(sample_record(), tmp_path / "r.json")
    assert cli_main(["report", str(src), "--out", str(tmp_path)]) == 0
    png = tmp_path / "page.png"
    with tempfile.TemporaryDirectory() as profile:
        cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={profile}", f"--screenshot={png}", "--window-size=1280,2000",
               (tmp_path / "r.html").as_uri()]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=90,
                              env={**os.environ, "HOME": profile})
    assert png.is_file() and png.stat().st_size > 10_000, proc.stderr[-2000:]
    w, h, colours = _png_is_not_blank(png)
    assert (w, h) == (1280, 2000)
    assert colours > 20, f"the screenshot looks blank ({colours} colours)"
