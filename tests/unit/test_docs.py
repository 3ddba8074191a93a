"""The repository cites only documents it holds: the design is docs/design.md, and every
`docs/design.md#<anchor>` a file cites is a heading there."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DESIGN = REPO / "docs" / "design.md"

# Documents that lived outside the repository, next to it; built from parts so this file does not cite them.
OUTSIDE = re.compile(
    "|".join(
        (
            re.escape("DESIGN" + ".md"),
            re.escape("REAL-PARTS" + ".md"),
            re.escape("EXAMPLES" + ".md"),
            re.escape(".." + "/shared"),
        )
    )
)
CITATION = re.compile(r"docs/design\.md#([A-Za-z0-9_-]+)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def repository_files() -> list[Path]:
    """Every file git tracks or would track (untracked but not ignored), as a fresh clone would have them."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git work tree")
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout
    paths = (REPO / name for name in out.decode().split("\0") if name)
    return sorted(p for p in paths if p.is_file())


def text_files() -> Iterator[tuple[Path, str]]:
    for path in repository_files():
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            yield path, data.decode("utf-8")
        except UnicodeDecodeError:
            continue


def slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in markdown.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match is None:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def test_no_file_cites_a_document_outside_the_repository() -> None:
    offenders = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path, text in text_files()
        for number, line in enumerate(text.splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not offenders, "cite docs/design.md instead:\n" + "\n".join(offenders)


def test_every_cited_design_anchor_is_a_heading() -> None:
    headings = anchors(DESIGN.read_text())
    cited = {
        (anchor, f"{path.relative_to(REPO)}:{number}")
        for path, text in text_files()
        for number, line in enumerate(text.splitlines(), 1)
        for anchor in CITATION.findall(line)
    }
    assert cited, "nothing cites docs/design.md#<anchor>"
    missing = sorted(f"{where}: #{anchor}" for anchor, where in cited if anchor not in headings)
    assert not missing, "no such heading in docs/design.md:\n" + "\n".join(missing)


def test_the_design_links_only_to_its_own_headings() -> None:
    text = DESIGN.read_text()
    headings = anchors(text)
    missing = sorted(set(re.findall(r"\]\(#([^)]+)\)", text)) - headings)
    assert not missing, f"docs/design.md links to headings it does not have: {missing}"


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("The roll", "the-roll"),
        ("Kubernetes, kopf and GitOps facts", "kubernetes-kopf-and-gitops-facts"),
        ("Re-assert after an aborted upgrade", "re-assert-after-an-aborted-upgrade"),
        ("The `Single` shape", "the-single-shape"),
    ],
)
def test_anchors_are_made_as_github_makes_them(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor
