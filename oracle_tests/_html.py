"""Reading a rendered HTML report in tests: its tags, ids, links and the text of each block."""

from __future__ import annotations

import html.parser

__all__ = ["HtmlPage"]


class HtmlPage(html.parser.HTMLParser):
    """Collects tags, ids, links, and the text inside each <code> / <article>."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.ids, self.hrefs, self.srcs = [], set(), [], []
        self.codes, self.articles = [], {}
        self._code_depth, self._article = 0, None
        self._code_buf = []
        self.open = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag not in ("meta", "br", "img", "link", "input", "hr", "col", "path", "use", "rect", "line", "circle"):
            self.open.append(tag)
        if "id" in a:
            self.ids.add(a["id"])
        for key in ("href", "xlink:href"):
            if key in a:
                self.hrefs.append((tag, a[key]))
        if "src" in a:
            self.srcs.append((tag, a["src"]))
        if tag == "code":
            self._code_depth += 1
            self._code_buf = []
        if tag == "article":
            self._article = a.get("id")
            self.articles[self._article] = ""

    def handle_startendtag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if "id" in a:
            self.ids.add(a["id"])
        for key in ("href", "xlink:href"):
            if key in a:
                self.hrefs.append((tag, a[key]))

    def handle_endtag(self, tag):
        if self.open and self.open[-1] == tag:
            self.open.pop()
        if tag == "code" and self._code_depth:
            self._code_depth -= 1
            self.codes.append(("".join(self._code_buf), self._article))
        if tag == "article":
            self._article = None

    def handle_data(self, data):
        if self._code_depth:
            self._code_buf.append(data)
        if self._article is not None:
            self.articles[self._article] += data
