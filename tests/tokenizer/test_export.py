"""Exports loaded by their real libraries give the ids of bpe_store's own encoder.

A small store is trained once per module on slices of the shared corpora (English, Russian,
Chinese); each format is written, loaded by its library, and compared on other slices.
"""

from __future__ import annotations

import json

import pytest
from conftest import EN, RU, ZH, fixture_text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bpe_store.errors import InputError, StoreError
from bpe_store.formats.gpt2_files import read_gpt2, to_gpt2_str
from bpe_store.tokenizer.export import ExportError, check_exportable, export_store, load_tiktoken
from bpe_store.tokenizer.tokenizer import Tokenizer
from bpe_store.training.train import train

EOT = "<|endoftext|>"
CORPORA = [EN, RU, ZH]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    d = tmp_path_factory.mktemp("export")
    text = "".join(fixture_text(name, 150_000) + EOT for name in CORPORA)
    src = d / "train.txt"
    src.write_text(text, encoding="utf-8")
    db = d / "run.db"
    train([src], db, 1500, [EOT], workers=1)
    return db


@pytest.fixture(scope="module")
def samples() -> list[str]:
    """Text the store was not trained on, with specials and odd whitespace mixed in."""
    out = [fixture_text(name, 60_000, offset=400_000) for name in CORPORA]
    out.append("  two  spaces\n\n\nand a tab\t\r\nend" + EOT + "\n\nafter" + EOT)
    out.append("emoji 🙃🙃 and 12345 digits, it's they'll")
    return out


@pytest.fixture(scope="module")
def ours(store) -> Tokenizer:
    return Tokenizer.from_store(store)


def test_hf_tokenizers(store, ours, samples, tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    export_store(store, "hf", tmp_path / "hf")
    doc = json.loads((tmp_path / "hf" / "tokenizer.json").read_text(encoding="utf-8"))
    assert doc["version"] == "1.0" and doc["model"]["type"] == "BPE"
    assert doc["added_tokens"][0]["content"] == EOT and doc["added_tokens"][0]["special"]
    assert all(to_gpt2_str(bytes([b])) in doc["model"]["vocab"] for b in range(256))
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "hf" / "tokenizer.json"))
    for text in samples:
        assert hf.encode(text).ids == ours.encode(text)
    assert [e.ids for e in hf.encode_batch(samples)] == ours.encode_batch(samples)


def test_hf_transformers(store, ours, samples, tmp_path):
    transformers = pytest.importorskip("transformers")
    export_store(store, "hf", tmp_path / "hf")
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "hf" / "tokenizer.json"))
    for text in samples:
        assert fast(text, add_special_tokens=False)["input_ids"] == ours.encode(text)


def test_gpt2_files(store, ours, samples, tmp_path):
    export_store(store, "gpt2", tmp_path / "g")
    merges_txt = (tmp_path / "g" / "merges.txt").read_text(encoding="utf-8")
    assert merges_txt.startswith("#version: 0.2\n")
    back = Tokenizer.from_files(tmp_path / "g" / "vocab.json", tmp_path / "g" / "merges.txt", [EOT])
    # read back without the header too
    (tmp_path / "g" / "bare.txt").write_text(merges_txt.split("\n", 1)[1], encoding="utf-8")
    bare = read_gpt2(tmp_path / "g" / "vocab.json", tmp_path / "g" / "bare.txt")
    assert bare == (back.vocab, back.merges)
    for text in samples:
        assert back.encode(text) == ours.encode(text)
    tokenizers = pytest.importorskip("tokenizers")
    hf = tokenizers.Tokenizer(tokenizers.models.BPE.from_file(str(tmp_path / "g" / "vocab.json"),
                                                              str(tmp_path / "g" / "merges.txt")))
    hf.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    for text in samples:
        plain = text.replace(EOT, "")
        assert hf.encode(plain).ids == ours.encode(plain)


def test_tiktoken(store, ours, samples, tmp_path):
    pytest.importorskip("tiktoken")
    export_store(store, "tiktoken", tmp_path / "t")
    enc = load_tiktoken(tmp_path / "t")
    for text in samples:
        assert enc.encode(text, allowed_special="all") == ours.encode(text)


def test_tiktoken_export_made_again_in_the_same_directory_loads_the_new_ranks(store, samples, tmp_path,
                                                                              monkeypatch):
    """tiktoken's own loader caches a ranks file by its path: load_tiktoken must not."""
    pytest.importorskip("tiktoken")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))
    export_store(store, "tiktoken", tmp_path / "t", vocab_size=600)
    assert load_tiktoken(tmp_path / "t").n_vocab == 600
    export_store(store, "tiktoken", tmp_path / "t", force=True)  # the whole vocabulary, same path
    enc = load_tiktoken(tmp_path / "t")
    ours = Tokenizer.from_store(store)
    assert enc.n_vocab == len(ours.vocab)
    for text in samples:
        assert enc.encode(text, allowed_special="all") == ours.encode(text)


def test_vocab_size_prefix(store, samples, tmp_path):
    """A smaller vocabulary is a prefix of the merge log, in every reader and export."""
    small = Tokenizer.from_store(store, vocab_size=600)
    assert len(small.vocab) == 600 and len(small.merges) == 600 - 257
    full = Tokenizer.from_store(store)
    assert full.merges[: len(small.merges)] == small.merges
    export_store(store, "tiktoken", tmp_path / "t", vocab_size=600)
    enc = load_tiktoken(tmp_path / "t")
    assert enc.n_vocab == 600
    for text in samples:
        assert enc.encode(text, allowed_special="all") == small.encode(text)
        assert max(small.encode(text)) < 600


def test_errors(store, tmp_path):
    with pytest.raises(StoreError, match="no such store"):
        Tokenizer.from_store(tmp_path / "missing.db")
    with pytest.raises(InputError, match="larger than"):
        Tokenizer.from_store(store, vocab_size=10**6)
    with pytest.raises(InputError, match="too small"):
        export_store(store, "hf", tmp_path / "x", vocab_size=100)
    with pytest.raises(InputError, match="unknown export format"):
        export_store(store, "sentencepiece", tmp_path / "x")
    (tmp_path / "exists").mkdir()
    with pytest.raises(InputError, match="--force"):
        export_store(store, "gpt2", tmp_path / "exists")
    export_store(store, "gpt2", tmp_path / "exists", force=True)


def test_refuses_what_loaders_misread():
    vocab = {i: bytes([i]) for i in range(256)}
    vocab.update({256: b"ab", 257: b"bc", 258: b"abc", 259: b"abc"})
    merges = [(b"a", b"b"), (b"b", b"c"), (b"ab", b"c"), (b"a", b"bc")]
    with pytest.raises(ExportError, match="both hold"):
        check_exportable(vocab, merges, [], "x")
    del vocab[259]
    check_exportable(vocab, merges[:3], [], "x")
    missing = dict(vocab)
    del missing[7]
    with pytest.raises(ExportError, match="single byte"):
        check_exportable(missing, merges[:3], [], "x")
    from bpe_store.tokenizer.export import check_tiktoken_specials

    with pytest.raises(ExportError, match="prefix"):
        check_tiktoken_specials([EOT, EOT + EOT])
    check_tiktoken_specials([EOT, "<|pad|>"])
    swapped = dict(vocab)
    swapped[256], swapped[257] = b"bc", b"ab"
    with pytest.raises(ExportError, match="merge order"):
        check_exportable(swapped, merges[:3], [], "x")


def test_store_still_counting(tmp_path):
    from bpe_store.store.params import RunParams
    from bpe_store.store.store import Store

    db = tmp_path / "counting.db"
    with Store.create(db) as s:
        s.init_run(RunParams("x", (), 300), [], [], 1 << 20, "test")
    with pytest.raises(StoreError, match="still counting"):
        Tokenizer.from_store(db)


def test_other_pattern_exports(tmp_path, samples):
    """A store trained with GPT-4's pattern: HF gets Split + ByteLevel, tiktoken the pattern."""
    tokenizers = pytest.importorskip("tokenizers")
    pytest.importorskip("tiktoken")

    src = tmp_path / "train.txt"
    src.write_text(fixture_text(EN, 60_000) + EOT + fixture_text(ZH, 30_000),
                   encoding="utf-8")
    db = tmp_path / "gpt4.db"
    train([src], db, 700, [EOT], workers=1, pattern="gpt4")
    ours = Tokenizer.from_store(db)
    export_store(db, "hf", tmp_path / "hf")
    doc = json.loads((tmp_path / "hf" / "tokenizer.json").read_text(encoding="utf-8"))
    assert doc["pre_tokenizer"]["type"] == "Sequence"
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "hf" / "tokenizer.json"))
    export_store(db, "tiktoken", tmp_path / "t")
    enc = load_tiktoken(tmp_path / "t")
    for text in samples:
        assert hf.encode(text).ids == ours.encode(text)
        assert enc.encode(text, allowed_special="all") == ours.encode(text)


# characters where regex engines are known to disagree about \s, \p{L}, \p{N}
_TRICKY = list("\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2028\u2029\u202f\u205f\u3000\u180e\u200b\ufeff"
               "²³¹¼½\u0660\u00aa\u00ba\u02b0\u0345\u2160\u3007")


@pytest.fixture(scope="module")
def loaded(store, tmp_path_factory):
    d = tmp_path_factory.mktemp("loaded")
    tokenizers = pytest.importorskip("tokenizers")
    pytest.importorskip("tiktoken")
    export_store(store, "hf", d / "hf")
    export_store(store, "tiktoken", d / "t")
    return tokenizers.Tokenizer.from_file(str(d / "hf" / "tokenizer.json")), load_tiktoken(d / "t")


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.one_of(st.text(max_size=40),
                      st.lists(st.sampled_from(_TRICKY + list("ab 1\n\t'sé中🙃") + [EOT]), max_size=20).map("".join)))
def test_loaders_agree_on_any_text(ours, loaded, text):
    hf, enc = loaded
    want = ours.encode(text)
    assert enc.encode(text, allowed_special="all") == want
    assert hf.encode(text).ids == want


def test_specials_last_numbers_them_after_the_merges(store, ours, samples, tmp_path):
    """--specials-last: dense ranks from 0 (what gigatoken and fastokens require), the specials
    after; every id is the store's less the specials numbered before it, in tiktoken and tokenizers."""
    tokenizers = pytest.importorskip("tokenizers")
    pytest.importorskip("tiktoken")
    export_store(store, "tiktoken", tmp_path / "tt", specials_last=True)
    export_store(store, "hf", tmp_path / "hf", specials_last=True)
    enc = load_tiktoken(tmp_path / "tt")
    ranks = sorted(enc._mergeable_ranks.values())
    assert ranks == list(range(len(ranks))) and enc._special_tokens == {EOT: len(ranks)}
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "hf" / "tokenizer.json"))
    eot = ours.special_id(EOT)
    for text in samples:
        want = [len(ranks) if i == eot else i - 1 for i in ours.encode(text)]  # the store's EOT is id 0
        assert enc.encode(text, allowed_special="all") == want
        assert hf.encode(text).ids == want


def test_verbatim_pattern_is_plain_gpt2_bytelevel(store, ours, tmp_path):
    """--pattern-form verbatim: GPT-2's pattern as tokenizers' plain ByteLevel pre-tokenizer (what
    fast encoders recognise); exact on text whose letters and digits Oniguruma's tables know."""
    tokenizers = pytest.importorskip("tokenizers")
    export_store(store, "hf", tmp_path / "hf", pattern_form="verbatim")
    doc = json.loads((tmp_path / "hf" / "tokenizer.json").read_text(encoding="utf-8"))
    assert doc["pre_tokenizer"] == {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                    "use_regex": True}
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "hf" / "tokenizer.json"))
    for text in ("Hello, world! it's 12345  ok\n\n", fixture_text(EN, 20_000), fixture_text(RU, 20_000)):
        assert hf.encode(text).ids == ours.encode(text)
    with pytest.raises(InputError, match="unknown pattern form 'odd'"):
        export_store(store, "hf", tmp_path / "x", pattern_form="odd")
