"""docs/cli.md, the command reference, is exactly what tools/gen_cli_docs.py makes from the running
command line's ``--help`` texts: a changed option or help text without a regenerated page fails."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gen_cli_docs", ROOT / "tools" / "gen_cli_docs.py")
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)


def test_cli_md_is_the_help_of_every_command():
    page = gen.DOC.read_text(encoding="utf-8") if gen.DOC.exists() else ""
    assert page == gen.render(), "docs/cli.md is out of date: run `python tools/gen_cli_docs.py` and commit it"


def test_the_page_holds_every_command_and_no_terminal_noise(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")  # the page must not follow the terminal
    monkeypatch.setenv("FORCE_COLOR", "1")
    text = gen.render()
    for command in ("train", "status", "sql", "show", "why", "report", "encode", "export", "db upgrade"):
        assert f"## `bpe-store {command}`" in text
        assert f"Usage: bpe-store {command} [OPTIONS]" in text
    assert "\x1b[" not in text
    assert max(len(line) for line in text.splitlines()) <= 100
    assert text == gen.DOC.read_text(encoding="utf-8")
