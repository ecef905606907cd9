"""The docs' relative links resolve: every `[text](path#anchor)` in README.md and docs/ names a
file of the checkout and, for a markdown file, one of its headings (GitHub's anchor rule:
lowercase, punctuation but '-' and '_' dropped, spaces to '-', a repeated heading gets -1, -2)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"```.*?```", re.S)


def github_anchors(text: str) -> set[str]:
    """The anchors GitHub gives the headings of markdown `text` (code fences skipped)."""
    seen: Counter = Counter()
    anchors = set()
    for heading in re.findall(r"^#{1,6} (.*)$", FENCE.sub("", text), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return anchors


def test_the_anchor_rule_by_hand():
    text = "# A `b` (c)\n## A `b` (c)\n```\n# not a heading\n```\n### x_y: z-w\n"
    assert github_anchors(text) == {"a-b-c", "a-b-c-1", "x_y-z-w"}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc):
    broken = []
    for link in LINK.findall(FENCE.sub("", doc.read_text())):
        if re.match(r"[a-z]+:", link):  # http:, https:, mailto:
            continue
        path, _, anchor = link.partition("#")
        target = (doc.parent / path).resolve() if path else doc
        if not target.exists():
            broken.append(f"{link} (no such file)")
        elif anchor and target.suffix == ".md" and anchor not in github_anchors(
                target.read_text()):
            broken.append(f"{link} (no heading with that anchor)")
    assert broken == [], f"{doc.relative_to(ROOT)}: {broken}"
