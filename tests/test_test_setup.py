"""The test suite's own rules: CI cannot pass by skipping the tests that need ../shared, and the
bundled fixtures stay small."""

from __future__ import annotations

import conftest
import pytest
from conftest import ALLOW_NO_SHARED_ENV, FIXTURES, fixture_text, shared_file


def test_missing_shared_corpus_fails_the_test(monkeypatch, tmp_path):
    # before: shared_file skipped, so a CI machine without ../shared passed with tests unrun
    monkeypatch.setattr(conftest, "CORPORA", tmp_path / "nowhere")
    monkeypatch.delenv(ALLOW_NO_SHARED_ENV, raising=False)
    with pytest.raises(pytest.fail.Exception, match=f"not available.*{ALLOW_NO_SHARED_ENV}=1"):
        shared_file("cs336", "corpus.en")


@pytest.mark.parametrize("value,outcome", [("1", pytest.skip.Exception), ("0", pytest.fail.Exception),
                                           ("", pytest.fail.Exception)])
def test_missing_shared_corpus_skips_only_when_opted_out(monkeypatch, tmp_path, value, outcome):
    monkeypatch.setattr(conftest, "CORPORA", tmp_path / "nowhere")
    monkeypatch.setenv(ALLOW_NO_SHARED_ENV, value)
    with pytest.raises(outcome):
        shared_file("cs336", "corpus.en")


def test_fixtures_are_small():
    big = [p.name for p in FIXTURES.iterdir() if p.is_file() and p.stat().st_size > 1_048_576]
    assert big == []


def test_fixture_text_is_whole_characters():
    text = fixture_text(conftest.ZH, 1001, 7)  # Chinese: 3-byte characters, cut at both ends
    assert text and "\ufffd" not in text
    assert len(text.encode("utf-8")) <= 1001
    with pytest.raises(ValueError):
        fixture_text(conftest.ZH, 10**7)
