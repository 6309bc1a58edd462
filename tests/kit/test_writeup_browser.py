"""The kit's ``writeup.html`` in a real browser (Debian's headless Chromium, tests/browser.py) at
420, 800 and 1,400 px: every hint folded until opened, nothing wider than the window except
inside a box that scrolls on its own (code, tables), every picture drawn and inside the window.
Screenshots go to build/test-artifacts/ for people to look at."""
import json

import pytest
from browser import ARTIFACTS, DomReader, chromium_run

from grader.layout import REPOSITORY as REPO

PAGE = REPO / "handout" / "writeup.html"
WIDTHS = (420, 800, 1400)

PROBE = """<!DOCTYPE html><html><body><script>
// Opens the write-up at each width in a frame and writes what it measured into the DOM.
const widths = %s, results = [];
function measure(doc, width) {
  const scrollBoxes = [...doc.querySelectorAll("pre, .table-scroll")];
  const inScrollBox = (el) => scrollBoxes.some((box) => box !== el && box.contains(el));
  const wide = [...doc.body.querySelectorAll("*")]
    .filter((el) => !inScrollBox(el) && el.getClientRects().length && el.getBoundingClientRect().right > width + 0.5)
    .map((el) => el.tagName + "." + el.className + ": " + (el.textContent || "").slice(0, 60));
  const hints = [...doc.querySelectorAll("details.hint")];
  // Folded: no part of the hint but its summary is drawn, and the block is no taller than its summary
  // (plus the block's own padding and border).
  const summaryHeight = (d) => d.querySelector("summary").getBoundingClientRect().height;
  const hidden = (d) => [...d.children].filter((c) => c.tagName !== "SUMMARY").every((c) => !c.checkVisibility())
    && d.getBoundingClientRect().height < summaryHeight(d) + 16;
  const folded = hints.filter((d) => !d.open && hidden(d)).length;
  const first = hints[0];
  first.open = true;  // a student opens one: its text is drawn, the next stays folded
  const opened = [...first.children].some((c) => c.tagName !== "SUMMARY" && c.checkVisibility())
    && first.getBoundingClientRect().height > summaryHeight(first) + 16;
  const nextFolded = !hints[1].open && hidden(hints[1]);
  first.open = false;
  const pictures = [...doc.querySelectorAll("img")].map((img) => ({
    drawn: img.complete && img.naturalWidth > 0, width: img.getBoundingClientRect().width,
    right: img.getBoundingClientRect().right}));
  return {width, page: doc.documentElement.scrollWidth, wide, hints: hints.length, folded, opened, nextFolded, pictures};
}
function next(i) {
  if (i === widths.length) { document.body.setAttribute("data-done", JSON.stringify(results)); return; }
  const frame = document.createElement("iframe");
  frame.style.width = widths[i] + "px"; frame.style.height = "900px"; frame.style.border = "0";
  frame.onload = () => { results.push(measure(frame.contentDocument, widths[i])); frame.remove(); next(i + 1); };
  frame.src = %s; document.body.appendChild(frame);
}
next(0);
</script></body></html>"""

# A frame of the given width scrolled to ELEMENT (a CSS selector), for a screenshot.
SHOT = """<!DOCTYPE html><html><body style="margin:0"><iframe id="f" src="%s"
style="width:%dpx;height:1400px;border:0"></iframe><script>
const frame = document.getElementById("f");
frame.onload = () => { const doc = frame.contentDocument; %s doc.querySelector(%s).scrollIntoView(); };
</script></body></html>"""


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    probe = tmp_path_factory.mktemp("writeup") / "probe.html"
    probe.write_text(PROBE % (json.dumps(WIDTHS), json.dumps(PAGE.as_uri())))
    reader = DomReader()
    reader.feed(chromium_run(probe, "--allow-file-access-from-files", "--virtual-time-budget=20000", "--dump-dom"))
    return {m["width"]: m for m in json.loads(reader.root.find_all("body")[0].attrs["data-done"])}


def hint_files() -> int:
    return sum(1 for _ in (REPO / "handout" / "hints").glob("*/*.md"))


@pytest.mark.slow  # Chromium, three widths
@pytest.mark.parametrize("width", WIDTHS)
def test_hints_are_folded_until_opened(measured, width):
    found = measured[width]
    assert found["hints"] == hint_files() > 0
    assert found["folded"] == found["hints"], f"{found['hints'] - found['folded']} hints drawn unfolded at {width} px"
    assert found["opened"] and found["nextFolded"], found


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_nothing_is_wider_than_the_window(measured, width):
    found = measured[width]
    assert found["page"] <= width, f"the page scrolls sideways at {width} px ({found['page']} px wide): {found['wide'][:5]}"
    assert not found["wide"], f"at {width} px, beyond the window's right edge: " + "; ".join(found["wide"][:5])


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_every_picture_is_drawn_inside_the_window(measured, width):
    pictures = measured[width]["pictures"]
    assert len(pictures) == 4
    for picture in pictures:
        assert picture["drawn"] and picture["width"] > 0.5 * min(width, 800) - 40, picture
        assert picture["right"] <= width + 0.5, picture


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_screenshots_for_people_to_look_at(tmp_path, width):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    views = {"top": ("", '"h1"'), "hints": ('doc.querySelector("#hints-2\\\\.2 details").open = true;', '"#hints-2\\\\.2"'),
             "figure": ("", '"img"')}
    for name, (before, selector) in views.items():
        wrapper = tmp_path / f"{name}.html"
        wrapper.write_text(SHOT % (PAGE.as_uri(), width, before, selector))
        shot = ARTIFACTS / f"writeup-{name}-{width}px.png"
        shot.unlink(missing_ok=True)
        chromium_run(wrapper, "--allow-file-access-from-files", "--virtual-time-budget=10000",
                     f"--screenshot={shot}", f"--window-size={width},1400")
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
