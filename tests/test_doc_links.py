"""Every relative link of the manual resolves: in README.md, CONTRIBUTING.md, docs/*.md and
lab/*.md, a link's file exists and its #anchor is a heading of that file (GitHub's anchors:
lower case, punctuation dropped, spaces to hyphens, -1, -2 ... for repeats)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = sorted([REPO / "README.md", REPO / "CONTRIBUTING.md", *(REPO / "docs").glob("*.md"),
                *(REPO / "lab").glob("*.md")])
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def without_code_blocks(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def without_code(text: str) -> str:
    """The text outside fenced blocks and inline code, where a link is a link."""
    return re.sub(r"`[^`\n]*`", "", without_code_blocks(text))


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in without_code_blocks(path.read_text()).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def links(page: Path) -> list[str]:
    return [t for t in LINK.findall(without_code(page.read_text()))
            if not re.match(r"[a-z][a-z0-9+.-]*:", t)]  # http:, https:, mailto: ... are not checked


def broken(page: Path) -> list[str]:
    out = []
    for target in links(page):
        path, _, frag = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            out.append(f"{target}: no such file")
        elif frag and dest.suffix == ".md" and frag not in anchors(dest):
            out.append(f"{target}: no heading #{frag} in {path or page.name}")
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    assert broken(page) == []


def test_the_manual_has_its_pages_and_links():
    names = {str(p.relative_to(REPO)) for p in PAGES}
    assert {"README.md", "CONTRIBUTING.md", "docs/design.md", "docs/results.md", "lab/README.md"} <= names
    assert len(links(REPO / "README.md")) >= 10


def test_a_broken_link_and_a_missing_anchor_are_found(tmp_path):
    (tmp_path / "a.md").write_text("# Top\n\n## The GPU check: `tools/x.py`\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#the-gpu-check-toolsxpy) [gone](c.md) [bad](a.md#nowhere) "
                    "[web](https://example.org/x) `[code](d.md)`\n")
    assert broken(page) == ["c.md: no such file", "a.md#nowhere: no heading #nowhere in a.md"]
