"""Every ``bash`` and ``python`` block of README.md and docs/ runs as the page says (docs/contributing/docs.md):
one test per page (``-k getting-started``), a page with a ``slow`` block in ``make test-slow``."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import system
from tests.docs.blocks import docs_pages, parse_page
from tests.docs.report import PROPERTY
from tests.docs.runner import run_page

REPO = Path(__file__).resolve().parents[2]
PAGES = [parse_page(path, REPO) for path in docs_pages(REPO) if path.exists()]


def _param(page):
    return pytest.param(page, id=page.name, marks=[pytest.mark.slow] if page.slow else [])


@pytest.fixture(scope="session")
def docs_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stage cache the docs pages share: the suite's (tests/conftest.py sets EDGESHIP_CACHE_DIR to the
    session's), else a folder of this session."""
    shared = os.environ.get("EDGESHIP_CACHE_DIR")
    return Path(shared) if shared else tmp_path_factory.mktemp("docs-cache")


@pytest.mark.parametrize("page", [_param(p) for p in PAGES if p.run or p.skipped])
def test_docs_page_runs_as_written(page, tmp_path: Path, docs_cache: Path, record_property) -> None:
    assert not page.problems, f"{page.name}: " + "; ".join(page.problems)
    record_property(PROPERTY, [(f"{page.name}:{b.line}", b.first_line, b.marker("skip").arg) for b in page.skipped])
    folder = tmp_path / "page"
    folder.mkdir()
    ran = run_page(page, folder, REPO, docs_cache)
    assert len(ran) == len(page.run)


def test_docs_blocks_are_all_run_or_skipped_with_a_reason() -> None:
    """No block goes unrun without a word: markers well formed and each right before its block, no
    runnable-looking language the harness ignores, no fence the Markdown parser does not see."""
    problems = [f"{page.name}: {problem}" for page in PAGES for problem in page.problems]
    assert not problems, "\n".join(problems)
    assert any(page.name == "README.md" and page.run for page in PAGES), "README.md runs no block"


def relative_links(page: Path) -> list[str]:
    """The targets of a page's Markdown links that are paths in the repository (no URL, no bare anchor)."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").parse(page.read_text(encoding="utf-8"))
    hrefs = [child.attrs["href"] for t in tokens if t.type == "inline" for child in t.children or ()
             if child.type == "link_open"]
    return [h for h in hrefs if "://" not in h and not h.startswith(("#", "mailto:"))]


def test_readme_links_lead_to_files_of_the_repository() -> None:
    """README.md is read on GitHub, outside the site's strict build: its relative links must resolve."""
    readme = REPO / "README.md"
    links = relative_links(readme)
    broken = [link for link in links if not (readme.parent / link.split("#")[0]).exists()]
    assert links and not broken, f"README.md links to what does not exist: {broken}"


@pytest.fixture(scope="module")
def mkdocs() -> str:
    """The venv's mkdocs (the `docs` extra of pyproject.toml)."""
    found = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip(system.reason("python", "mkdocs is not installed (the `docs` extra: make setup)"))
    return found


def test_docs_site_builds_strict(mkdocs: str, tmp_path: Path) -> None:
    """`make docs`' build: a broken link, anchor or API reference fails it."""
    start = time.monotonic()
    done = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / "site" / "index.html").exists(), f"no index.html after {time.monotonic() - start:.0f} s"
