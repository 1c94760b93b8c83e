"""The CLI's choices are derived from the constants of the wings that own them (never copied), so a
new export format, input format, engine or invalid-UTF-8 policy is one entry, listed by --help."""

from __future__ import annotations

import pytest

from bpe_store.cli.input_args import InputFormat, InvalidUtf8
from bpe_store.cli.tokenize_cmds import DType, ExportFormat
from bpe_store.cli.train_cmd import EngineName
from bpe_store.store.params import INVALID_UTF8_POLICIES
from bpe_store.text.inputs import FORMATS as INPUT_FORMATS
from bpe_store.tokenizer.export import EXPORTERS, FORMATS
from bpe_store.tokenizer.token_files import DTYPES
from bpe_store.training.merge import ENGINES


@pytest.mark.parametrize("choices, constant", [
    (ExportFormat, FORMATS), (InputFormat, INPUT_FORMATS), (InvalidUtf8, INVALID_UTF8_POLICIES),
    (EngineName, ENGINES), (DType, DTYPES)], ids=["export", "input", "invalid-utf8", "engine", "dtype"])
def test_each_choice_list_is_its_constant(choices, constant):
    assert [c.value for c in choices] == list(constant)


def test_each_export_format_is_one_entry():
    assert tuple(EXPORTERS) == FORMATS and all(name == e.name for name, e in EXPORTERS.items())
