"""``export --format hf|gpt2`` directories load with ``transformers.AutoTokenizer.from_pretrained``
(offline: a local directory, no hub), with the special tokens' roles and ``model_max_length``,
and give bpe_store's own ids."""

from __future__ import annotations

import os

import pytest
from cli_helpers import one_error_line, run_main
from conftest import FIXTURES

from bpe_store.tokenizer.export import DEFAULT_MODEL_MAX_LENGTH, export_store
from bpe_store.tokenizer.tokenizer import Tokenizer
from bpe_store.training.train import train

os.environ.setdefault("HF_HUB_OFFLINE", "1")
EOT, PAD, BOS = "<|endoftext|>", "<|pad|>", "<|bos|>"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    d = tmp_path_factory.mktemp("tf")
    text = (FIXTURES / "enwiki-1M.txt").read_text(encoding="utf-8")[:250_000]
    src = d / "train.txt"
    src.write_text(text.replace("\n\n", "\n" + EOT) + "Привет, мир! 中文字符 🙃" * 50, encoding="utf-8")
    train([src], d / "run.db", 700, [EOT, PAD, BOS], workers=1)
    return d / "run.db"


@pytest.fixture(scope="module")
def samples() -> list[str]:
    text = (FIXTURES / "enwiki-1M.txt").read_text(encoding="utf-8")
    return [text[600_000:640_000], "  two  spaces\n\n\nand a tab\t\r\nend" + EOT + "\n\nafter" + PAD + PAD,
            "Привет 🙃 中文 it's 12345" + BOS + "x", ""]


@pytest.mark.parametrize("fmt,cls", [("hf", "PreTrainedTokenizerFast"), ("gpt2", "GPT2Tokenizer")])
def test_autotokenizer_defaults(store, samples, tmp_path, fmt, cls):
    transformers = pytest.importorskip("transformers")
    export_store(store, fmt, tmp_path / fmt)
    auto = transformers.AutoTokenizer.from_pretrained(str(tmp_path / fmt))
    assert auto.eos_token == EOT and auto.eos_token_id == 0  # default: the first special
    assert auto.bos_token is None and auto.pad_token is None
    assert auto.model_max_length == DEFAULT_MODEL_MAX_LENGTH
    assert set(auto.all_special_tokens) == {EOT, PAD, BOS}
    ours = Tokenizer.from_store(store)
    for text in samples:
        ids = auto(text)["input_ids"]  # add_special_tokens=True: nothing is added
        assert ids == ours.encode(text)
        assert auto.decode(ids) == text


@pytest.mark.parametrize("fmt", ["hf", "gpt2"])
def test_autotokenizer_roles_from_the_cli(store, samples, tmp_path, capsys, fmt):
    transformers = pytest.importorskip("transformers")
    out = tmp_path / fmt
    code, err = run_main(["export", store, "--format", fmt, "-o", out, "--eos", PAD, "--bos", BOS, "--pad", EOT,
                     "--model-max-length", "4096"], capsys)
    assert code == 0, err
    auto = transformers.AutoTokenizer.from_pretrained(str(out))
    assert (auto.eos_token, auto.bos_token, auto.pad_token) == (PAD, BOS, EOT)
    assert (auto.eos_token_id, auto.bos_token_id, auto.pad_token_id) == (1, 2, 0)
    assert auto.model_max_length == 4096
    batch = auto(["hi", samples[2]], padding=True)["input_ids"]
    assert len(batch[0]) == len(batch[1]) and batch[0][-1] == 0  # padded with the pad token's id
    assert auto.decode(auto(samples[1])["input_ids"], skip_special_tokens=True) == \
        samples[1].replace(EOT, "").replace(PAD, "")


@pytest.mark.parametrize("args,message", [
    (["--format", "hf", "--eos", "<|nope|>"], "--eos '<|nope|>' is not one of the store's special tokens"),
    (["--format", "gpt2", "--pad", "x"], "--pad 'x' is not one of"),
    (["--format", "hf", "--model-max-length", "0"], "--model-max-length must be a positive integer"),
    (["--format", "tiktoken", "--eos", EOT], "are for transformers"),
])
def test_bad_roles(store, tmp_path, capsys, args, message):
    code, err = run_main(["export", store, "-o", tmp_path / "x", *args], capsys)
    assert code == 2 and message in err and one_error_line(err)
    assert not (tmp_path / "x").exists()


def test_gpt2_format_refuses_another_pattern(tmp_path, capsys):
    """The gpt2 files hold no pattern, and every loader of them uses GPT-2's."""
    src = tmp_path / "t.txt"
    src.write_text((FIXTURES / "enwiki-1M.txt").read_text(encoding="utf-8")[:50_000], encoding="utf-8")
    db = tmp_path / "p.db"
    train([src], db, 300, [], workers=1, pattern=r"\p{L}+|\p{N}+|\s+|[^\s\p{L}\p{N}]+")
    code, err = run_main(["export", db, "--format", "gpt2", "-o", tmp_path / "g"], capsys)
    assert code == 2 and "--format hf or tiktoken" in err
    assert not (tmp_path / "g").exists()
    code, err = run_main(["export", db, "--format", "hf", "-o", tmp_path / "h"], capsys)
    assert code == 0, err
