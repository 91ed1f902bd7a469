"""The README and the docs/ pages it sends a newcomer to: every relative link names a file that
exists (issue 29: the details moved out of the README must stay reachable)."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_names_a_file_that_exists(page):
    text = page.read_text(encoding="utf-8")
    broken = [link for link in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
              if not link.startswith(("http://", "https://", "mailto:"))
              and not (page.parent / link).exists()]
    assert not broken, f"{page.relative_to(ROOT)} links to files that do not exist: {broken}"


def test_the_readme_links_every_docs_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(docs/([\w.-]+\.md)", readme))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages <= linked, f"README.md does not link {sorted(pages - linked)}"
