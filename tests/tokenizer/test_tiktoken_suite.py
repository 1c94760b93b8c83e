"""tiktoken's own test suite (tests/tiktoken_suite, verbatim from the version the test extra
installs) passes against bpe_store.tiktoken_compat imported as ``tiktoken``, minus only the tests that
need the network: those of the encodings whose ranks file is on no disk here (r50k_base, p50k_base,
gpt2: not in the bpe-openai package)."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

from conftest import ROOT

SUITE = ROOT / "tests" / "tiktoken_suite"
#: The tests that need r50k_base's, p50k_base's or gpt2's file (tiktoken downloads them).
NETWORK_ONLY = {
    "test_encoding.test_simple", "test_encoding.test_simple_repeated", "test_encoding.test_basic_encode",
    "test_encoding.test_encode_empty", "test_misc.test_encoding_for_model", "test_pickle.test_pickle",
    "test_simple_public.test_simple", "test_simple_public.test_encoding_for_model",
} | {f"test_encoding.{t}[r50k_base]" for t in (
    "test_hyp_encode_bytes", "test_catastrophically_repetitive", "test_basic_roundtrip", "test_hyp_roundtrip",
    "test_single_token_roundtrip", "test_hyp_special_ordinary", "test_batch_encode", "test_hyp_batch_roundtrip")}


def test_tiktokens_own_tests_pass(tmp_path):
    report = tmp_path / "suite.xml"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SUITE / "shim"), str(ROOT)]))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", f"--junitxml={report}"], cwd=SUITE, env=env,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    passed, skipped = set(), {}
    for case in ET.parse(report).iter("testcase"):
        name = f"{case.get('classname').rsplit('.', 1)[-1]}.{case.get('name')}"
        skip = case.find("skipped")
        if skip is not None:
            skipped[name] = skip.get("message", "")
        else:
            passed.add(name)
    assert set(skipped) <= NETWORK_ONLY, skipped
    assert all("needs the network" in why for why in skipped.values()), skipped
    assert len(passed) + len(skipped) == 33 and len(passed) >= 17, (passed, skipped)
    assert "test_offsets.test_basic_offsets" in passed and "test_encoding.test_special_token" in passed
