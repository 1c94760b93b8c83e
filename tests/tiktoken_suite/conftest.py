"""bpe_store's addition to tiktoken's test suite (not tiktoken's): a test that needs an encoding
whose ranks file is on no disk here (tiktoken would download it; bpe_store never does) is skipped
with the reason "needs the network", and nothing else is. tests/tokenizer/test_tiktoken_suite.py checks that
the skipped tests are exactly those of the encodings without a file."""

import pytest
from hypothesis import settings

from bpe_store.errors import InputError

NO_FILE = "no ranks file for encoding"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is not None and call.excinfo.errisinstance(InputError) and NO_FILE in str(call.excinfo.value):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1], f"needs the network: {call.excinfo.value}")
