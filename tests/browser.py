"""Headless Chromium for the tests that open a page as a TA would (Debian's ``chromium``;
``.ci/run`` installs it): run it on a page, and read the DOM it rendered."""
from __future__ import annotations

import html.parser
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from grading_helpers import REPO

ARTIFACTS = REPO / "build" / "test-artifacts"


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if found is None:
        if os.environ.get("CI"):  # .ci/run installs it: a CI run without it must not pass quietly
            pytest.fail("chromium is not installed, and CI must run the browser tests")
        pytest.skip("chromium is not installed (.ci/run installs Debian's chromium package)")
    return found


def chromium_run(page: Path, *flags: str) -> str:
    """Headless Chromium on ``page`` with its own profile; its stdout."""
    with tempfile.TemporaryDirectory() as profile:
        result = subprocess.run(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
             f"--user-data-dir={profile}", *flags, page.as_uri()],
            capture_output=True, text=True, timeout=90,
        )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


class Element:
    def __init__(self, tag: str, attrs: dict[str, str | None]):
        self.tag, self.attrs, self.text, self.children = tag, attrs, "", []

    def find_all(self, tag: str | None = None, **attrs: str) -> list["Element"]:
        found = []
        for child in self.children:
            if (tag is None or child.tag == tag) and all(child.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items()):
                found.append(child)
            found += child.find_all(tag, **attrs)
        return found


class DomReader(html.parser.HTMLParser):
    """The rendered DOM as a tree of Elements; ``text`` is each element's whole text content."""

    VOID = {"meta", "br", "img", "input", "link", "hr", "rect", "line", "wbr"}

    def __init__(self):
        super().__init__()
        self.root = Element("#document", {})
        self.open = [self.root]

    def handle_starttag(self, tag, attrs):
        element = Element(tag, dict(attrs))
        self.open[-1].children.append(element)
        if tag not in self.VOID:
            self.open.append(element)

    def handle_startendtag(self, tag, attrs):
        self.open[-1].children.append(Element(tag, dict(attrs)))

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        while len(self.open) > 1:
            if self.open.pop().tag == tag:
                break

    def handle_data(self, data):
        for element in self.open:
            element.text += data


