"""The documentation's own rules: the README is a short first page (at most 250 lines) whose
details live in docs/, no line of prose runs on for hundreds of characters, every relative link
of the README and docs/ points at a file that exists, and no page cites an issue number (pages
describe the code as it is)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md")),
         *sorted((ROOT / "bench").glob("RESULTS*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_the_readme_is_a_short_first_page():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move details into docs/"
    for name in ("design", "store", "performance", "cli"):
        assert f"(docs/{name}.md)" in "\n".join(lines), f"README.md does not link docs/{name}.md"


@pytest.mark.parametrize("page", [p for p in PAGES if p.parent != ROOT / "bench"], ids=lambda p: p.name)
def test_no_line_of_prose_runs_on(page):
    long, fence = [], False
    for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        fence ^= line.startswith("```")
        if not fence and not line.startswith("|") and len(line) > 110:
            long.append(f"{page.name}:{n} ({len(line)} characters)")
    assert long == [], f"lines of prose over 110 characters: {long}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_point_at_files(page):
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        if not path.exists():
            broken.append(target)
    assert broken == [], f"{page.name} links to missing files: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_page_cites_an_issue_number(page):
    cited = re.findall(r"(?i)\bissue\s*#?\d+|\bissue \d+'s", page.read_text(encoding="utf-8"))
    assert cited == [], f"{page.name} cites {cited}: say what the code does instead"


def _setup_commands(readme: str) -> list[str]:
    """The README's set-up commands: the first two bash blocks of its "Set up and run" section."""
    section = readme.split("## Set up and run", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S)][:2]


def test_ci_runs_the_readmes_commands_exactly():
    # the first installs only what training needs (no test extra), the second the test extra, then the suite
    commands = _setup_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(commands) == 2 and '".[test]"' not in commands[0] and '".[test]"' in commands[1], commands
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert [c for c in commands if c not in ci] == [], ".ci/run must run the README's commands as written"
