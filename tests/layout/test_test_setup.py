"""The test suite's own rules: CI cannot pass by skipping the tests that need ../shared, the
bundled fixtures stay small, and pytest-xdist hands out the files as conftest.py orders them."""

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


def test_the_scheduling_lists_name_test_files_that_exist():
    files = {p.name for p in (conftest.ROOT / "tests").rglob("test_*.py")}
    assert set(conftest.LONGEST_FILES) <= files and set(conftest.ONE_UNIT) <= files


def test_the_ray_files_are_one_unit_of_work_and_others_their_file():
    # xdist's loadfile alone gives each file its own unit, so the two Ray clusters could run at once
    assert conftest.unit_of("tests/counting/test_ray_count.py::test_a[x]") == \
        conftest.unit_of("tests/counting/test_ray_tree.py::t")
    assert conftest.unit_of("tests/api/test_api.py::test_a") == "tests/api/test_api.py"
    assert conftest.unit_of("bpe_store/tokenizer/tokenizer.py::bpe_store.tokenizer.tokenizer") == \
        "bpe_store/tokenizer/tokenizer.py"


def test_the_files_are_queued_in_the_order_conftest_sorts_them(pytestconfig):
    # without it, xdist queues the files with the most tests first: the longest files, few tests
    # each, came last and one worker ran alone at the end
    addopts = pytestconfig.getini("addopts")
    assert "--no-loadscope-reorder" in addopts and addopts[addopts.index("--dist") + 1] == "loadfile"


#: The folders of tests/: one per wing of bpe_store (its tests hold that wing's code), and the four
#: that cross wings.
TEST_FOLDERS = {"cli", "inspection", "tokenizer", "training", "formats", "store", "counting", "text", "native",
                "basics", "api", "e2e", "layout"}


def test_every_test_file_is_in_the_folder_of_a_wing():
    tests = conftest.ROOT / "tests"
    placed = {p.relative_to(tests).parts[0] for p in tests.rglob("test_*.py") if "tiktoken_suite" not in p.parts}
    assert sorted(placed - TEST_FOLDERS) == [], "a test file outside tests/<wing>/ (docs/development.md lists them)"
    packages = {p.name for p in (conftest.ROOT / "bpe_store").iterdir() if (p / "__init__.py").exists()}
    assert packages - {"migrations"} <= TEST_FOLDERS, "a wing without its tests/ folder"
