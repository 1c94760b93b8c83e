"""A drop-in for ``tiktoken``: ``import bpe_store.tiktoken_compat as tiktoken``.

``get_encoding``, ``list_encoding_names``, ``encoding_for_model``, ``encoding_name_for_model`` and
``Encoding`` with tiktoken's constructor (``name, pat_str=, mergeable_ranks=, special_tokens=``),
methods, properties and defaults (``allowed_special=set()``, ``disallowed_special="all"``,
``errors="replace"``, ``num_threads=``), answered by bpe_store's native encoder (a
``Tokenizer`` built from the ranks: ``Tokenizer._from_ranks``). Encodings are found offline by name
(``bpe_store.formats.openai_ranks``: a directory you name, the ``bpe-openai`` package, tiktoken's cache);
one found nowhere raises an ``InputError`` saying how to provide it. tiktoken's own test suite runs
against this module (tests/tiktoken_suite, ``tests/tokenizer/test_tiktoken_suite.py``).

Not here: ``encode_with_unstable`` (completion-time token healing) and tiktoken's plugin registry
(``tiktoken_ext`` namespaces); ``num_threads`` is the number of native threads, as there.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Literal

from .formats.openai_ranks import ENCODINGS, encoding_spec, find_ranks_file, ranks_of, read_ranks
from .text.pretokenize import CL100K_PATTERN, GPT2_PATTERN, O200K_PATTERN
from .tokenizer.tables import Tables
from .tokenizer.tokenizer import Tokenizer

if TYPE_CHECKING:
    import numpy as np

#: tiktoken's spelling of GPT-2's pattern (r50k_base, p50k_base: possessive quantifiers, ``\s++$``):
#: it splits every text as GPT-2's (tests/tokenizer/test_tiktoken_compat.py holds them equal on random text),
#: so it runs on the native GPT-2 scanner instead of the ``regex`` module.
R50K_PAT_STR = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
_NATIVE_SPELLINGS = {R50K_PAT_STR: GPT2_PATTERN, GPT2_PATTERN: GPT2_PATTERN, CL100K_PATTERN: CL100K_PATTERN,
                     O200K_PATTERN: O200K_PATTERN}

#: tiktoken's model tables (tiktoken/model.py at the version tested): ``{model: encoding}``.
MODEL_TO_ENCODING: dict[str, str] = {
    "o1": "o200k_base", "o3": "o200k_base", "o4-mini": "o200k_base", "gpt-5": "o200k_base",
    "gpt-4.1": "o200k_base", "gpt-4o": "o200k_base", "gpt-4": "cl100k_base", "gpt-3.5-turbo": "cl100k_base",
    "gpt-3.5": "cl100k_base", "gpt-35-turbo": "cl100k_base", "davinci-002": "cl100k_base",
    "babbage-002": "cl100k_base", "text-embedding-ada-002": "cl100k_base",
    "text-embedding-3-small": "cl100k_base", "text-embedding-3-large": "cl100k_base",
    "text-davinci-003": "p50k_base", "text-davinci-002": "p50k_base", "text-davinci-001": "r50k_base",
    "text-curie-001": "r50k_base", "text-babbage-001": "r50k_base", "text-ada-001": "r50k_base",
    "davinci": "r50k_base", "curie": "r50k_base", "babbage": "r50k_base", "ada": "r50k_base",
    "code-davinci-002": "p50k_base", "code-davinci-001": "p50k_base", "code-cushman-002": "p50k_base",
    "code-cushman-001": "p50k_base", "davinci-codex": "p50k_base", "cushman-codex": "p50k_base",
    "text-davinci-edit-001": "p50k_edit", "code-davinci-edit-001": "p50k_edit",
    "text-similarity-davinci-001": "r50k_base", "text-similarity-curie-001": "r50k_base",
    "text-similarity-babbage-001": "r50k_base", "text-similarity-ada-001": "r50k_base",
    "text-search-davinci-doc-001": "r50k_base", "text-search-curie-doc-001": "r50k_base",
    "text-search-babbage-doc-001": "r50k_base", "text-search-ada-doc-001": "r50k_base",
    "code-search-babbage-code-001": "r50k_base", "code-search-ada-code-001": "r50k_base",
    "gpt2": "gpt2", "gpt-2": "gpt2",
}
#: ``{model name prefix: encoding}``, tried in order after ``MODEL_TO_ENCODING``.
MODEL_PREFIX_TO_ENCODING: dict[str, str] = {
    "o1-": "o200k_base", "o3-": "o200k_base", "o4-mini-": "o200k_base", "gpt-5": "o200k_base",
    "gpt-4.5-": "o200k_base", "gpt-4.1-": "o200k_base", "chatgpt-4o-": "o200k_base", "gpt-4o-": "o200k_base",
    "gpt-4-": "cl100k_base", "gpt-3.5-turbo-": "cl100k_base", "gpt-35-turbo-": "cl100k_base",
    "gpt-oss-": "o200k_harmony", "ft:gpt-4o": "o200k_base", "ft:gpt-4": "cl100k_base",
    "ft:gpt-3.5-turbo": "cl100k_base", "ft:davinci-002": "cl100k_base", "ft:babbage-002": "cl100k_base",
}

_Specials = Literal["all"] | Collection[str]


class Encoding:
    """tiktoken's ``Encoding``: ``name``, ``pat_str``, ``mergeable_ranks`` ``{bytes: rank}`` and
    ``special_tokens`` ``{text: id}`` (ids may be shared, as in ``o200k_harmony``)."""

    def __init__(self, name: str, *, pat_str: str, mergeable_ranks: dict[bytes, int],
                 special_tokens: dict[str, int], explicit_n_vocab: int | None = None) -> None:
        self.name = name
        self._pat_str = pat_str
        self._mergeable_ranks = mergeable_ranks
        self._special_tokens = dict(special_tokens)
        self.max_token_value = max(max(mergeable_ranks.values()), max(special_tokens.values(), default=0))
        if explicit_n_vocab is not None:
            assert len(mergeable_ranks) + len(special_tokens) == explicit_n_vocab
            assert self.max_token_value == explicit_n_vocab - 1
        self._tok = Tokenizer._from_ranks(ranks_of(mergeable_ranks), _NATIVE_SPELLINGS.get(pat_str, pat_str),
                                          self._special_tokens)

    @classmethod
    def _of(cls, name: str, tok: Tables, spec_pattern: str) -> Encoding:
        """An encoding around a tokenizer already built from ranks (``get_encoding``)."""
        self = cls.__new__(cls)
        self.name, self._tok = name, tok
        self._pat_str = spec_pattern
        self._special_tokens = dict(tok._special_id)
        self.max_token_value = max(tok._ranks.max_id, max(self._special_tokens.values(), default=0))
        return self

    @functools.cached_property
    def _mergeable_ranks(self) -> dict[bytes, int]:
        return self._tok._ranks.mergeable()

    def __repr__(self) -> str:
        return f"<Encoding {self.name!r}>"

    def __reduce__(self):
        if self.name in ENCODINGS and self._tok.__dict__.get("_from_name"):
            return (get_encoding, (self.name,))
        return (_rebuild, (self.name, self._pat_str, self._mergeable_ranks, self._special_tokens))

    # -- encoding --------------------------------------------------------------------------------

    def encode_ordinary(self, text: str) -> list[int]:
        return self._tok.encode_ordinary(text)

    def encode(self, text: str, *, allowed_special: _Specials = set(),  # noqa: B006 - tiktoken's signature
               disallowed_special: _Specials = "all") -> list[int]:
        return self._tok.encode(text, allowed_special=allowed_special, disallowed_special=disallowed_special)

    def encode_to_numpy(self, text: str, *, allowed_special: _Specials = set(),  # noqa: B006
                        disallowed_special: _Specials = "all") -> np.ndarray:
        return self._tok.encode_to_array(text, 1, allowed_special=allowed_special,
                                         disallowed_special=disallowed_special)

    def encode_ordinary_batch(self, text: Sequence[str], *, num_threads: int = 8) -> list[list[int]]:
        return self._tok.encode_batch(text, num_threads, allowed_special=set(), disallowed_special=())

    def encode_batch(self, text: Sequence[str], *, num_threads: int = 8,
                     allowed_special: _Specials = set(),  # noqa: B006
                     disallowed_special: _Specials = "all") -> list[list[int]]:
        return self._tok.encode_batch(text, num_threads, allowed_special=allowed_special,
                                      disallowed_special=disallowed_special)

    def encode_single_token(self, text_or_bytes: str | bytes) -> int:
        """The id of one token (a special's text, or a token's bytes); ``KeyError`` otherwise."""
        b = text_or_bytes.encode("utf-8") if isinstance(text_or_bytes, str) else bytes(text_or_bytes)
        rank = self._tok._ranks.get(b)
        if rank is not None:
            return rank
        sid = self._tok._special_id.get(b.decode("utf-8", "replace"))
        if sid is None:
            raise KeyError(text_or_bytes)
        return sid

    def _encode_single_piece(self, text_or_bytes: str | bytes) -> list[int]:
        b = text_or_bytes.encode("utf-8") if isinstance(text_or_bytes, str) else text_or_bytes
        return self._tok.encode_piece(b)

    def _encode_only_native_bpe(self, text: str) -> list[int]:
        return self._tok.encode_ordinary(text)

    def _encode_bytes(self, text: bytes) -> list[int]:
        return self._tok.encode_bytes(text)

    # -- decoding --------------------------------------------------------------------------------

    def decode_bytes(self, tokens: Sequence[int]) -> bytes:
        return self._tok.decode_bytes(tokens)

    def decode(self, tokens: Sequence[int], errors: str = "replace") -> str:
        return self._tok.decode(tokens, errors=errors)

    def decode_single_token_bytes(self, token: int) -> bytes:
        return self._tok.decode_bytes([token])

    def decode_tokens_bytes(self, tokens: Sequence[int]) -> list[bytes]:
        return [self._tok.decode_bytes([t]) for t in tokens]

    def decode_with_offsets(self, tokens: Sequence[int]) -> tuple[str, list[int]]:
        """The text and, per token, the index of the character it begins in: a token that begins
        with a UTF-8 continuation byte belongs to the character started before it."""
        parts = self.decode_tokens_bytes(tokens)
        offsets: list[int] = []
        chars = 0  # characters begun so far
        for part in parts:
            offsets.append(max(0, chars - (0x80 <= part[0] < 0xC0)))
            chars += sum(1 for c in part if c < 0x80 or c >= 0xC0)
        return b"".join(parts).decode("utf-8", errors="strict"), offsets

    def decode_batch(self, batch: Sequence[Sequence[int]], *, errors: str = "replace",
                     num_threads: int = 8) -> list[str]:
        return [self.decode(t, errors=errors) for t in batch]

    def decode_bytes_batch(self, batch: Sequence[Sequence[int]], *, num_threads: int = 8) -> list[bytes]:
        return [self.decode_bytes(t) for t in batch]

    # -- what the encoding holds -----------------------------------------------------------------

    def token_byte_values(self) -> list[bytes]:
        return sorted(self._mergeable_ranks)

    @property
    def eot_token(self) -> int:
        return self._special_tokens["<|endoftext|>"]

    @functools.cached_property
    def special_tokens_set(self) -> set[str]:
        return set(self._special_tokens)

    def is_special_token(self, token: int) -> bool:
        return token in self._tok._special_id.values()

    @property
    def n_vocab(self) -> int:
        return self.max_token_value + 1


def _rebuild(name: str, pat_str: str, mergeable_ranks: dict[bytes, int], special_tokens: dict[str, int]) -> Encoding:
    return Encoding(name, pat_str=pat_str, mergeable_ranks=mergeable_ranks, special_tokens=special_tokens)


_LOCK = threading.Lock()
_CACHE: dict[str, Encoding] = {}


def get_encoding(encoding_name: str) -> Encoding:
    """OpenAI's encoding ``encoding_name`` (one of ``list_encoding_names()``), found offline, made
    once per process."""
    with _LOCK:
        enc = _CACHE.get(encoding_name)
        if enc is None:
            spec = encoding_spec(encoding_name)
            tok = Tokenizer._from_ranks(read_ranks(find_ranks_file(encoding_name)), spec.pattern,
                                        spec.special_tokens)
            tok._from_name = True
            pat = R50K_PAT_STR if spec.pattern == "gpt2" else tok.pattern
            enc = _CACHE[encoding_name] = Encoding._of(encoding_name, tok, pat)
        return enc


def list_encoding_names() -> list[str]:
    return list(ENCODINGS)


def encoding_name_for_model(model_name: str) -> str:
    """The encoding of an OpenAI model (tiktoken's tables); ``KeyError`` for a model it does not know."""
    if model_name in MODEL_TO_ENCODING:
        return MODEL_TO_ENCODING[model_name]
    for prefix, name in MODEL_PREFIX_TO_ENCODING.items():
        if model_name.startswith(prefix):
            return name
    raise KeyError(f"Could not automatically map {model_name} to a tokeniser. "
                   "Please use `tiktoken.get_encoding` to explicitly get the tokeniser you expect.")


def encoding_for_model(model_name: str) -> Encoding:
    return get_encoding(encoding_name_for_model(model_name))
