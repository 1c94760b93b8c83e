"""bpe_store's addition to tiktoken's test suite (not tiktoken's): a test that needs an encoding
whose ranks file is on no disk here (tiktoken would download it; bpe_store never does) is skipped
with the reason "needs the network", and nothing else is. tests/tokenizer/test_tiktoken_suite.py checks that
the skipped tests are exactly those of the encodings without a file.

Hypothesis (6.13x and later) also draws strings from the constants in the source of *local* code,
which an editable install of bpe_store is (a tiktoken wheel, in site-packages, is not). Our source
spells the special tokens ('<|endofprompt|>'), and tiktoken's test_hyp_roundtrip, which encodes
st.text() with tiktoken's default disallowed_special="all", cannot take those: tiktoken itself
raises on them too. So that mining is turned off here, and the suite draws its text as it does when
tiktoken runs it; and no example database is kept (nothing written into the source tree, no run
replaying another's).
"""

import pytest
from hypothesis import settings

from bpe_store.errors import InputError

try:  # Hypothesis's private hook; without it (another version) there is nothing to turn off
    from hypothesis.internal.conjecture import providers as _providers
    from hypothesis.internal.constants_ast import Constants as _Constants
except ImportError:  # pragma: no cover
    _providers = None
if _providers is not None and hasattr(_providers, "_get_local_constants"):
    _providers._get_local_constants = _Constants

settings.register_profile("tiktoken_suite", database=None)
settings.load_profile("tiktoken_suite")

NO_FILE = "no ranks file for encoding"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is not None and call.excinfo.errisinstance(InputError) and NO_FILE in str(call.excinfo.value):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1], f"needs the network: {call.excinfo.value}")
