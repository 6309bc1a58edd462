"""The kit's write-up as a student meets it: a short README that links one page per problem, no
hint in any text read front to back (the hints come one at a time from ``python -m
minitorch.hint``, or folded in ``writeup.html``), and a build that refuses hints it cannot place
and links that lead nowhere. The page in a real browser: tests/kit/test_writeup_browser.py."""
import base64
import re
import textwrap
from pathlib import Path

import pytest
from browser import DomReader

from grader.layout import REPOSITORY as REPO
from kit import writeup

KIT = REPO / "handout"
RUBRIC = REPO / "grader" / "rubric.toml"
PROBLEM_PAGES = ["problems/2-pipeline.md", "problems/3-tensor-parallel.md", "problems/4-pipeline-memory.md",
                 "problems/5-planning.md"]


def normalised(text: str) -> str:
    return " ".join(text.split())


def front_to_back() -> dict[str, str]:
    """Every Markdown file of the kit a student reads from the top down: all but the hints."""
    return {path.relative_to(KIT).as_posix(): path.read_text() for path in sorted(KIT.rglob("*.md"))
            if path.relative_to(KIT).parts[0] not in ("hints", ".venv")}


def kit_hints() -> dict[str, list[str]]:
    """The kit's hints: sub-problem -> texts, in the order they are shown."""
    return {folder.name: [(folder / f"{k}.md").read_text() for k in range(1, len(list(folder.iterdir())) + 1)]
            for folder in sorted((KIT / "hints").iterdir())}


def sentences(text: str) -> list[str]:
    """The sentences of a hint long enough to recognise anywhere (20 characters or more)."""
    return [s for s in re.split(r"(?<=[.?!:;])\s+", normalised(text)) if len(s) >= 20]


# ---------------------------------------------------------------- the kit's layout

def test_the_readme_is_short_and_links_every_problem_page():
    readme = (KIT / "README.md").read_text()
    assert len(readme.encode()) < 14_000, f"the kit's README is {len(readme.encode())} bytes: move detail to a page"
    assert not re.search(r"^#+ Problem \d", readme, re.MULTILINE), "problem text belongs on the problem pages"
    for section in ("## Getting started", "## Points", "## Workflow", "## Submitting"):
        assert section in readme
    linked = re.findall(r"\]\((problems/[^)#]+\.md)\)", readme)
    assert linked == PROBLEM_PAGES
    for page in PROBLEM_PAGES:
        assert (KIT / page).read_text().startswith(f"## Problem {page.split('/')[1][0]}: ")


def test_no_hint_in_any_text_read_front_to_back():
    pages = front_to_back()
    assert {"README.md", "REPORT.md", *PROBLEM_PAGES} <= set(pages)
    texts = {path: normalised(text) for path, text in pages.items()}
    leaked = [f"{path}: hint {problem}.{number}: {sentence!r}"
              for problem, hints in kit_hints().items() for number, hint in enumerate(hints, 1)
              for sentence in sentences(hint) for path, text in texts.items() if sentence in text]
    assert not leaked, "hint text in a page read front to back:\n" + "\n".join(leaked[:20])
    folded = [path for path, text in pages.items() if "<details" in text]
    assert not folded, f"<details> prints in full in a terminal: {folded}"


def test_every_sub_problem_with_hints_says_how_to_ask_for_them():
    hints = kit_hints()
    assert len(hints) >= 10 and all(len(texts) >= 2 for texts in hints.values()), hints.keys()
    pages = "\n".join(front_to_back().values())
    for problem, texts in hints.items():
        assert f"{len(texts)} hints for {problem}, one at a time: `make hint P={problem}`" in pages, problem


def test_the_kit_s_hints_are_the_write_up_s_in_their_order():
    for problem, texts in kit_hints().items():
        sources = sorted((REPO / "writeup" / "hints" / problem).glob("*.md"), key=lambda p: int(p.stem))
        assert [normalised(t) for t in texts] == [normalised(p.read_text()) for p in sources], problem


# ---------------------------------------------------------------- the build, on sources of its own

@pytest.fixture
def sources(tmp_path):
    """A tiny write-up: a README with one page whose sub-problem 9.1 has two hints."""
    (tmp_path / "hints" / "9.1").mkdir(parents=True)
    (tmp_path / "hints" / "9.1" / "1.md").write_text("Look at the first row before the others.\n")
    (tmp_path / "hints" / "9.1" / "2.md").write_text("The answer is `sum(range(n))`, nearly.\n")
    (tmp_path / "README.md.in").write_text("# Title\n\n## Start\n\nRead [the page]({{page p9.md problems/9.md}}).\n")
    (tmp_path / "p9.md").write_text(textwrap.dedent("""\
        ## Problem 9

        ### Problem 9.1

        Write it. Back to the [start](../README.md#start).

        {{hints 9.1}}

        Then test it.
        """))
    return tmp_path


def render(folder: Path) -> dict[str, str]:
    return writeup.render_files(folder / "README.md.in", RUBRIC)


def test_hints_go_to_their_own_files_a_pointer_to_the_page_and_folded_into_the_html(sources):
    files = render(sources)
    assert set(files) == {"README.md", "problems/9.md", "hints/9.1/1.md", "hints/9.1/2.md", "writeup.html"}
    assert "[the page](problems/9.md)" in files["README.md"]
    page = files["problems/9.md"]
    assert "first row" not in page and "sum(range" not in page
    assert "**Stuck?** 2 hints for 9.1, one at a time: `make hint P=9.1`" in page
    assert files["hints/9.1/2.md"] == "The answer is `sum(range(n))`, nearly.\n"
    dom = DomReader()
    dom.feed(files["writeup.html"])
    blocks = dom.root.find_all("details", **{"class": "hint"})
    assert [b.find_all("summary")[0].text for b in blocks] == ["Hint 1 of 2", "Hint 2 of 2"]
    assert "first row" in blocks[0].text and "sum(range(n))" in blocks[1].text
    assert not any("open" in b.attrs for b in blocks)
    link = next(a for a in dom.root.find_all("a") if a.text == "start")
    assert link.attrs["href"] == "#start"  # a link between pages becomes a link inside the one page


@pytest.mark.parametrize("case, change, message", [
    ("a gap", lambda f: (f / "hints" / "9.1" / "2.md").rename(f / "hints" / "9.1" / "3.md"),
     r"hints/9\.1: hint files must be 1\.md, 2\.md, \.\.\. .*found 1\.md, 3\.md"),
    ("an empty hint", lambda f: (f / "hints" / "9.1" / "2.md").write_text("\n"), r"hints/9\.1/2\.md: empty hint"),
    ("a stray file", lambda f: (f / "hints" / "notes.md").write_text("x"), r"hints/notes\.md: .*named N\.M"),
    ("hints nobody places", lambda f: (f / "p9.md").write_text("## Problem 9\n"),
     r"hints/9\.1: no \{\{hints 9\.1\}\} in the write-up places these hints"),
    ("hints that do not exist", lambda f: (f / "p9.md").write_text("{{hints 9.1}}\n\n{{hints 9.2}}\n"),
     r"p9\.md:3: no hints for 9\.2"),
    ("hints placed twice", lambda f: (f / "p9.md").write_text("{{hints 9.1}}\n\n{{hints 9.1}}\n"),
     r"p9\.md:3: the hints of 9\.1 are placed twice \(first at .*p9\.md:1\)"),
    ("hints inside a sentence", lambda f: (f / "p9.md").write_text("See {{hints 9.1}} here.\n"),
     r"p9\.md:1: \{\{hints 9\.1\}\} must stand alone on its line"),
    ("a link to no heading", lambda f: (f / "p9.md").write_text("{{hints 9.1}}\n\n[x](../README.md#finish)\n"),
     r"p9\.md \(problems/9\.md in the kit\): link '\.\./README\.md#finish': README\.md has no heading #finish"),
    ("a link to no file", lambda f: (f / "p9.md").write_text("{{hints 9.1}}\n\n[x](../NOTES.md)\n"),
     r"p9\.md \(problems/9\.md in the kit\): link '\.\./NOTES\.md': no NOTES\.md in the kit"),
    ("a page outside the kit", lambda f: (f / "README.md.in").write_text("[p]({{page p9.md ../p9.md}})\n"),
     r"README\.md\.in:1: a page goes to a relative \.md path in the kit"),
])
def test_the_build_refuses_what_it_cannot_place(sources, case, change, message):
    change(sources)
    with pytest.raises(writeup.WriteupError, match=message):
        render(sources)


def test_the_rubric_and_promise_tables_render_on_a_page_and_in_the_html(sources):
    (sources / "p9.md").write_text("{{hints 9.1}}\n\n{{points_table 2.1}}\n\n{{promises 2.1}}\n")
    files = render(sources)
    assert "| `2.1-schedule` |" in files["problems/9.md"] and "| promise | graded by | public test |" in files["problems/9.md"]
    dom = DomReader()
    dom.feed(files["writeup.html"])
    headers = [[th.text for th in table.find_all("th")] for table in dom.root.find_all("table")]
    assert headers[0][:3] == ["Criterion", "What is checked", "Points"] and headers[1] == ["promise", "graded by", "public test"]
    assert any(td.text == "2.1-schedule" for td in dom.root.find_all("td"))


def test_links_to_other_kit_files_stay_links_to_them(sources):
    (sources / "p9.md").write_text("{{hints 9.1}}\n\nSee [the Makefile](../Makefile#L1).\n")
    files = writeup.render_files(sources / "README.md.in", RUBRIC, kit_files=frozenset({"Makefile"}))
    assert '<a href="Makefile#L1">the Makefile</a>' in files["writeup.html"]


# ---------------------------------------------------------------- the kit's writeup.html, read as HTML

@pytest.fixture(scope="module")
def page():
    dom = DomReader()
    dom.feed((KIT / "writeup.html").read_text())
    return dom.root


def test_the_html_page_has_every_page_and_every_hint_folded_in_order(page):
    articles = [a.attrs["id"] for a in page.find_all("article")]
    assert articles == ["page-readme", "page-problems-2-pipeline", "page-problems-3-tensor-parallel",
                        "page-problems-4-pipeline-memory", "page-problems-5-planning"]
    groups = {div.attrs["data-problem"]: div for div in page.find_all("div", **{"class": "hints"})}
    hints = kit_hints()
    assert list(groups) == list(hints)
    for problem, texts in hints.items():
        blocks = groups[problem].find_all("details", **{"class": "hint"})
        assert [b.find_all("summary")[0].text for b in blocks] == [f"Hint {k} of {len(texts)}" for k in range(1, len(texts) + 1)]
        for block, text in zip(blocks, texts):
            assert "open" not in block.attrs
            plain = re.sub(r"[`*]", "", sentences(text)[0])  # as rendered: no Markdown marks
            assert plain[:40] in normalised(block.text), (problem, text)


def test_the_html_page_stands_alone(page):
    assert not page.find_all("script") and not page.find_all("link") and not page.find_all("iframe")
    pictures = page.find_all("img")
    written_up = [(KIT / path).read_text() for path in ["README.md", *PROBLEM_PAGES]]
    linked = {link for text in written_up for link in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)}
    assert len(pictures) == len(linked) == 4
    for img in pictures:
        kind, _, data = img.attrs["src"].partition(",")
        assert kind == "data:image/svg+xml;base64"
        svg = base64.b64decode(data).decode()
        # Without a viewBox a narrow window would cut the picture off instead of scaling it down.
        width, height = re.search(r'<svg [^>]*width="([\d.]+)" height="([\d.]+)"', svg).groups()
        assert f'viewBox="0 0 {width} {height}"' in svg.split(">", 1)[0], svg[:200]
    ids = {element.attrs["id"] for element in page.find_all() if "id" in element.attrs}
    for link in page.find_all("a"):
        href = link.attrs["href"]
        if href.startswith("#"):
            assert href[1:] in ids, href
        elif not href.startswith("https://"):
            assert (KIT / href.split("#")[0]).is_file(), href
