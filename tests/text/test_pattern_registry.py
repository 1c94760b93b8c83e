"""The named patterns are one registry (``pretokenize.PATTERN_SPECS``): a pattern registered there
is a ``--pattern`` name in the CLI's help, its completion and docs/cli.md, a name ``train`` resolves
and a store's status shows, with nothing else to keep in step."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

from bpe_store.native import BUILT
from bpe_store.text import pretokenize
from bpe_store.text.pretokenize import PATTERN_SPECS, PATTERNS, PatternSpec, register_pattern
from bpe_store.training.options import TrainOptions

#: Registers a pattern before anything reads the registry, then prints what users would see.
REGISTERED = r"""
import sys
sys.path.insert(0, "tools")
from bpe_store.text.pretokenize import PatternSpec, describe_pattern, register_pattern, resolve_pattern
register_pattern(PatternSpec("words", r"\w+|\s+|[^\w\s]+", aliases=("wordy",), note="words, spaces, marks"))
from bpe_store.cli.input_args import complete_pattern
import gen_cli_docs
print("DOCS", gen_cli_docs.render())
print("COMPLETION", complete_pattern("wo"))
print("RESOLVED", resolve_pattern("wordy") == r"\w+|\s+|[^\w\s]+", describe_pattern(resolve_pattern("words")))
"""


def test_a_registered_pattern_is_in_the_help_the_completion_and_the_docs():
    out = subprocess.run([sys.executable, "-c", REGISTERED], cwd=ROOT, capture_output=True, text=True,
                         check=True, timeout=120).stdout
    docs = out.split("DOCS", 1)[1].split("\nCOMPLETION", 1)[0]
    train_help = docs.split("### `bpe-store train`", 1)[1].split("### ", 1)[0]
    assert "qwen2, words (words, spaces, marks), or a regex." in " ".join(train_help.split())
    assert "COMPLETION [('words', \"words's pattern\"), ('wordy', \"words's pattern\")]" in out
    assert "RESOLVED True words" in out
    # and the page generated without it is the one in the repository: the built-in names only
    assert "words (words, spaces, marks)" not in (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")


def test_a_name_is_registered_once():
    with pytest.raises(ValueError, match="already registered: gpt4"):
        register_pattern(PatternSpec("gpt4", r"\w+"))
    assert [s.name for s in PATTERN_SPECS] == ["gpt2", "gpt4", "o200k", "llama3", "qwen2", "superword"]
    assert "superword" not in PATTERNS  # stage 2's pattern: scanned natively, not a name users give


@pytest.mark.skipif(not BUILT, reason="the native core is not built here")
def test_the_registry_and_the_native_name_table_name_the_same_scanners():
    from bpe_store.native import core

    # every scanner a spec names is a row of the native table (BPE_NATIVE_PATTERNS), and every row
    # has a spec: a scanner built but registered nowhere could never be chosen
    assert sorted({s.scanner for s in PATTERN_SPECS if s.scanner}) == sorted(core.SCANNERS)
    for name in core.SCANNERS:
        core.Splitter([], name)  # pattern_of reads the same table
    with pytest.raises(ValueError,
                       match="pattern must be 'gpt2', 'cl100k', 'o200k', 'llama3', 'qwen2', 'superword' or '' "):
        core.Splitter([], "no-such-scanner")


def test_the_options_docstring_names_every_built_in_pattern():
    # the one hand-written list left (help(train) shows it): it must name what the registry holds
    doc = TrainOptions.__doc__.split("pattern:", 1)[1].split("workers:", 1)[0]
    assert [s.name for s in PATTERN_SPECS if s.listed and f'"{s.name}"' not in doc] == []
    assert pretokenize.pattern_names_help().startswith("gpt2 (the default)")
