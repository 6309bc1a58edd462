"""``writeup.html``: the kit's write-up on one self-contained page, for students who read in a
browser. The README and every problem page in order, a table of contents, the pictures inlined,
and each hint folded in a ``<details>`` block of its own; rendered with markdown-it-py
(CommonMark and tables), the same parser the repository's docs test reads Markdown with.

Links between the kit's pages become links inside the page; links to other kit files stay
relative (the page lies at the kit's root); a link to anything else fails the build.
"""
from __future__ import annotations

import base64
import html
import posixpath
import re
from pathlib import Path

from markdown_it import MarkdownIt
from markdown_it.token import Token

HTML_PAGE = "writeup.html"
STYLE = Path(__file__).resolve().parent / "templates" / "writeup.css"
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # https:, mailto:
_SVG_SIZE = re.compile(r'<svg\b[^>]*?\bwidth="([\d.]+)"[^>]*?\bheight="([\d.]+)"')


class LinkError(Exception):
    """A page links to something that is neither a page, a heading nor a file of the kit."""

    def __init__(self, page: str, detail: str):
        super().__init__(f"{page}: {detail}")
        self.page, self.detail = page, detail


def folded_hints(problem: str, texts: list[str]) -> str:
    """The hints of ``problem`` as Markdown with raw HTML: one folded, numbered block per hint."""
    blocks = [f'<div class="hints" id="hints-{problem}" data-problem="{problem}">', "",
              f"**Hints for {problem}**, folded: open one, try again, then open the next "
              f"(`make hint P={problem}` prints them in a terminal).", ""]
    for number, text in enumerate(texts, 1):
        blocks += [f'<details class="hint"><summary>Hint {number} of {len(texts)}</summary>', "", text, "",
                   "</details>", ""]
    return "\n".join(blocks + ["</div>"])


def github_slug(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def _unique(slug: str, seen: dict[str, int]) -> str:
    """``slug``, or ``slug-1``, ``slug-2`` ... when taken, as GitHub numbers repeated headings."""
    count = seen.get(slug, 0)
    seen[slug] = count + 1
    return slug if count == 0 else f"{slug}-{count}"


def _heading_text(inline: Token) -> str:
    return "".join(child.content for child in inline.children or [] if child.type in ("text", "code_inline"))


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    # A wide table scrolls in a box of its own instead of widening the page.
    md.add_render_rule("table_open", lambda *args: '<div class="table-scroll"><table>\n')
    md.add_render_rule("table_close", lambda *args: "</table></div>\n")
    md.add_render_rule("code_inline", _code_inline)
    return md


def _code_inline(renderer, tokens: list[Token], index: int, *args) -> str:
    """Inline code that a narrow column or window may break after ``_``, ``.`` or ``/``
    (``test_pipe_matches_sequential``), never inside a word."""
    text = html.escape(tokens[index].content)
    return "<code>" + re.sub(r"([_./])(?=\w)", r"\1<wbr>", text) + "</code>"


class _Document:
    """The pages parsed, their headings given ids unique in the whole document."""

    def __init__(self, pages: dict[str, str]):
        self.md = _parser()
        self.tokens = {path: self.md.parse(text) for path, text in pages.items()}
        self.page_ids = {path: "page-" + github_slug(posixpath.splitext(path)[0].replace("/", "-")) for path in pages}
        taken = {page_id: 1 for page_id in self.page_ids.values()}
        self.anchors: dict[tuple[str, str], str] = {}
        self.headings: dict[str, list[tuple[int, str, str]]] = {}  # page -> (level, text, id)
        for path, tokens in self.tokens.items():
            local: dict[str, int] = {}
            self.headings[path] = []
            for index, token in enumerate(tokens):
                if token.type == "heading_open":
                    text = _heading_text(tokens[index + 1])
                    slug = _unique(github_slug(text), local)
                    anchor = _unique(slug, taken)
                    token.attrSet("id", anchor)
                    self.anchors[(path, slug)] = anchor
                    self.headings[path].append((int(token.tag[1]), text, anchor))

    def href(self, page: str, href: str, files: set[str]) -> str:
        """``href`` as written on ``page``, as a link from the one-page write-up."""
        if _EXTERNAL.match(href) or href.startswith("//"):
            return href
        path, _, fragment = href.partition("#")
        target = posixpath.normpath(posixpath.join(posixpath.dirname(page), path)) if path else page
        if target.startswith("../") or target == "..":
            raise LinkError(page, f"link {href!r} leaves the kit")
        if target in self.tokens:
            if not fragment:
                return "#" + self.page_ids[target]
            if (target, fragment) not in self.anchors:
                raise LinkError(page, f"link {href!r}: {target} has no heading #{fragment}")
            return "#" + self.anchors[(target, fragment)]
        if target in files:
            return target + (f"#{fragment}" if fragment else "")
        raise LinkError(page, f"link {href!r}: no {target} in the kit")

    def rewrite_links(self, pictures: dict[str, str], files: set[str]) -> None:
        for page, tokens in self.tokens.items():
            for token in tokens:
                for child in token.children or []:
                    if child.type == "link_open":
                        child.attrSet("href", self.href(page, str(child.attrs["href"]), files))
                    elif child.type == "image":
                        child.attrSet("src", _inlined(page, str(child.attrs["src"]), pictures))

    def contents(self) -> str:
        """A table of contents: the README's sections, each page with its sub-problems."""
        items = []
        for path, headings in self.headings.items():
            top = min((level for level, _, _ in headings), default=0)
            if path == "README.md":
                items += [f'<li><a href="#{anchor}">{html.escape(text)}</a></li>'
                          for level, text, anchor in headings if level == top + 1]
                continue
            subs = "".join(f'<li><a href="#{anchor}">{html.escape(text)}</a></li>'
                           for level, text, anchor in headings if level == top + 1)
            title = next((text for level, text, _ in headings if level == top), path)
            items.append(f'<li><a href="#{self.page_ids[path]}">{html.escape(title)}</a>'
                         + (f"<ul>{subs}</ul>" if subs else "") + "</li>")
        return '<nav class="contents" aria-label="Contents"><h2>Contents</h2><ul>' + "".join(items) + "</ul></nav>"

    def article(self, path: str) -> str:
        body = self.md.renderer.render(self.tokens[path], self.md.options, {})
        return f'<article id="{self.page_ids[path]}">\n{body}</article>'


def _inlined(page: str, src: str, pictures: dict[str, str]) -> str:
    """A picture a page shows, as a ``data:`` URI: the page stands alone."""
    target = posixpath.normpath(posixpath.join(posixpath.dirname(page), src))
    if target not in pictures:
        raise LinkError(page, f"picture {src!r}: no {target} among the write-up's figures")
    return "data:image/svg+xml;base64," + base64.b64encode(_scalable(pictures[target]).encode()).decode("ascii")


def _scalable(svg: str) -> str:
    """``svg`` with a viewBox from its width and height, so that a narrow window scales the
    picture down instead of cutting it off."""
    size = _SVG_SIZE.match(svg)
    if size is None or "viewBox" in svg[:size.end()]:
        return svg
    return svg.replace("<svg ", f'<svg viewBox="0 0 {size[1]} {size[2]}" ', 1)


def render(pages: dict[str, str], pictures: dict[str, str], files: set[str]) -> str:
    """The one-page write-up of ``pages`` (kit path -> Markdown; the README first), with
    ``pictures`` (kit path -> SVG) inlined; ``files``, every kit path a page may link."""
    document = _Document(pages)
    document.rewrite_links(pictures, files)
    readme = document.headings.get("README.md", [])
    title = readme[0][1] if readme else "Homework"
    articles = "\n".join(document.article(path) for path in pages)
    articles = articles.replace("</h1>\n", "</h1>\n" + document.contents() + "\n", 1)  # under the title
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{html.escape(title)}</title>\n<style>\n{STYLE.read_text()}</style>\n</head>\n<body>\n<main>\n"
            f"{articles}\n</main>\n</body>\n</html>\n")
