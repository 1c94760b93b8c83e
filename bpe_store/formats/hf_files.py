"""HuggingFace ``tokenizer.json`` read as a byte-level BPE: its vocabulary, merges, special tokens and
pre-tokenization regex, or an ``HfFileError`` (exit 2) saying why the file is not one.

What counts as byte-level BPE: a ``BPE`` model whose tokens are written in GPT-2's byte-to-unicode
alphabet (a ``ByteLevel`` pre-tokenizer or decoder says so), no normalizer (it would change the text
before the merges see it), no ``unk_token`` or byte fallback, and added tokens that are all special.
The pattern is the regex of a ``Split`` pre-tokenizer, or GPT-2's when ``ByteLevel`` splits itself.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from .gpt2_files import MAX_TOKEN_ID, from_gpt2_str

#: GPT-2's pattern, which ``ByteLevel(use_regex=True)`` splits with.
_BYTE_LEVEL_PATTERN = "gpt2"


class HfFileError(InputError):
    """A ``tokenizer.json`` that is not a byte-level BPE bpe_store can extend (exit 2)."""


@dataclass(frozen=True)
class HfBpe:
    """A byte-level BPE ``tokenizer.json``: ``vocab`` ``{id: bytes}``, ``merges`` in order,
    ``specials`` ``{text: id}``, the pre-tokenization ``pattern`` (a regex or "gpt2"), and whether
    the file asks for ``ignore_merges`` (a pre-token that is a token is that token, tiktoken's rule)."""

    vocab: dict[int, bytes]
    merges: list[tuple[bytes, bytes]]
    specials: dict[str, int]
    pattern: str
    ignore_merges: bool


def _steps(node: object, key: str) -> list[dict]:
    """The pre-tokenizers (or decoders) of ``node``, a ``Sequence``'s in order."""
    if not isinstance(node, dict):
        return []
    if node.get("type") == "Sequence":
        return [s for s in node.get(key, []) if isinstance(s, dict)]
    return [node]


def _pattern(doc: dict, path: Path) -> str:
    """The pre-tokenization regex: a ``Split``'s (its ``Regex``), or GPT-2's for a ``ByteLevel`` that
    splits with its own regex; HfFileError for anything else."""
    steps = _steps(doc.get("pre_tokenizer"), "pretokenizers")
    splits = [s for s in steps if s.get("type") == "Split"]
    byte_level = [s for s in steps if s.get("type") == "ByteLevel"]
    other = [s.get("type") for s in steps if s.get("type") not in ("Split", "ByteLevel")]
    if other:
        raise HfFileError(f"{path}: pre-tokenizer {other[0]!r} is not one bpe_store can reproduce (Split, ByteLevel)")
    if len(splits) > 1:
        raise HfFileError(f"{path}: {len(splits)} Split pre-tokenizers; bpe_store splits with one pattern")
    if splits:
        regex = splits[0].get("pattern", {}).get("Regex") if isinstance(splits[0].get("pattern"), dict) else None
        if not isinstance(regex, str) or not regex:
            raise HfFileError(f"{path}: its Split pre-tokenizer has no Regex pattern")
        if any(b.get("use_regex", True) for b in byte_level):
            raise HfFileError(f"{path}: both a Split and a ByteLevel with its own regex split the text")
        return regex
    if byte_level and byte_level[0].get("use_regex", True):
        if byte_level[0].get("add_prefix_space"):
            raise HfFileError(f"{path}: ByteLevel adds a prefix space, which bpe_store does not")
        return _BYTE_LEVEL_PATTERN
    raise HfFileError(f"{path}: no pre-tokenizer splits the text (not a byte-level BPE tokenizer.json)")


def _model(doc: dict, path: Path) -> dict:
    """The ``BPE`` model, checked to be byte-level (HfFileError otherwise)."""
    model = doc.get("model")
    if not isinstance(model, dict) or model.get("type") != "BPE":
        kind = model.get("type") if isinstance(model, dict) else None
        raise HfFileError(f"{path}: the model is {kind!r}, not BPE")
    if doc.get("normalizer") is not None:
        raise HfFileError(f"{path}: it has a normalizer, which changes the text before BPE (not byte-level BPE)")
    for key in ("unk_token", "continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            raise HfFileError(f"{path}: the BPE model has a {key} ({model[key]!r}): not byte-level BPE")
    if model.get("byte_fallback"):
        raise HfFileError(f"{path}: the BPE model uses byte_fallback (<0x..> tokens): not byte-level BPE")
    levels = _steps(doc.get("pre_tokenizer"), "pretokenizers") + _steps(doc.get("decoder"), "decoders")
    if not any(s.get("type") == "ByteLevel" for s in levels):
        raise HfFileError(f"{path}: no ByteLevel pre-tokenizer or decoder: its tokens are not GPT-2's byte alphabet")
    return model


def _vocab(model: dict, specials: dict[str, int], path: Path) -> dict[int, bytes]:
    """The model's ``{id: bytes}``, the special tokens' ids left out."""
    vocab: dict[int, bytes] = {}
    special_ids = set(specials.values())
    raw = model.get("vocab")
    if not isinstance(raw, dict) or not raw:
        raise HfFileError(f"{path}: the BPE model has no vocab")
    for token, i in raw.items():
        if type(i) is not int or not 0 <= i <= MAX_TOKEN_ID:
            raise HfFileError(f"{path}: token {token!r} has id {i!r}, not an integer from 0 to {MAX_TOKEN_ID}")
        if i in special_ids:
            continue
        if i in vocab:
            raise HfFileError(f"{path}: id {i} is given to two tokens")
        try:
            vocab[i] = from_gpt2_str(token)
        except InputError as exc:
            raise HfFileError(f"{path}: {exc}") from None
    return vocab


def _merges(model: dict, path: Path) -> list[tuple[bytes, bytes]]:
    out: list[tuple[bytes, bytes]] = []
    for n, m in enumerate(model.get("merges") or []):
        parts = m.split(" ") if isinstance(m, str) else m
        if not isinstance(parts, list) or len(parts) != 2 or not all(isinstance(p, str) and p for p in parts):
            raise HfFileError(f"{path}: merge {n} is not two tokens: {m!r:.60}")
        try:
            out.append((from_gpt2_str(parts[0]), from_gpt2_str(parts[1])))
        except InputError as exc:
            raise HfFileError(f"{path}: merge {n}: {exc}") from None
    return out


def _specials(doc: dict, path: Path) -> dict[str, int]:
    """The added tokens, all special, as ``{text: id}`` (the model's vocab may list them too)."""
    specials: dict[str, int] = {}
    for t in doc.get("added_tokens") or []:
        if not isinstance(t, dict) or not isinstance(t.get("content"), str) or type(t.get("id")) is not int:
            raise HfFileError(f"{path}: an added token is not {{'id': int, 'content': str}}: {t!r:.60}")
        if not t.get("special", False):
            raise HfFileError(f"{path}: added token {t['content']!r} is not special; bpe_store extends only "
                              "byte-level BPE tokens and special tokens")
        specials[t["content"]] = t["id"]
    return specials


def read_hf_bpe(path: str | os.PathLike) -> HfBpe:
    """A byte-level BPE ``tokenizer.json`` (see the module doc); HfFileError naming what is wrong."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HfFileError(f"{p}: not a JSON tokenizer file ({exc})") from None
    if not isinstance(doc, dict):
        raise HfFileError(f"{p}: not a tokenizer.json (a JSON object)")
    model = _model(doc, p)
    specials = _specials(doc, p)
    vocab = _vocab(model, specials, p)
    return HfBpe(vocab, _merges(model, p), specials, _pattern(doc, p), bool(model.get("ignore_merges")))
