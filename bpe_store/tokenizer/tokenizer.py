"""The tokenizer: a trained store (or a CS336 ``vocab`` + ``merges``) as encode / decode.

Encoding is byte-level BPE by merge rank, the CS336 definition:

1. split the text at special tokens (the longest wins where one is a prefix of another); each
   special becomes its own id and nothing crosses it;
2. pre-tokenize each piece between specials with the pattern (GPT-2's by default);
3. for each pre-token, start from its UTF-8 bytes and repeatedly merge the adjacent pair whose
   merge came first in training (lowest rank), every occurrence left to right, until no pair of
   the merge list is left.

A vocabulary may hold the same bytes twice (two merges that spell the same bytes, or a special
token that is also a learned token). Tokens are identified by bytes: a pair's rank is the rank
of its first merge, and the id a merge produces is the first id holding its bytes — the rule the
store itself uses. Exports refuse such vocabularies, since their loaders map bytes to one id.

``Tokenizer.from_tiktoken`` encodes by tiktoken's rule instead, with OpenAI's ``.tiktoken``
ranks (``cl100k_base``, ``o200k_base``): step 3 becomes "a pre-token that is a token is that
token; else merge the leftmost adjacent pair whose concatenation has the lowest rank, one merge
at a time, until no pair's concatenation has a rank". The merge table then holds every split
``t = a + b`` of a token into two tokens (``tiktoken_files.tiktoken_merges``) ranked by the id of
``t``, which is its tiktoken rank; so all splits of one token tie, and the leftmost wins.

This module is the pure-Python specification. ``Tokenizer`` uses the native core
(``bpe_store._core.Encoder``) for the BPE step and for batches when it is built, and the tests
check that both give the same ids.

>>> vocab = {b: bytes([b]) for b in range(256)} | {256: b"ab"}
>>> tok = Tokenizer(vocab, [(b"a", b"b")])
>>> tok.encode("abba")
[256, 98, 97]
>>> tok.decode([256, 98, 97])
'abba'
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import regex

from ..bpe import merge_pair
from ..errors import ArgumentTypeError, ArgumentValueError, InputError, path_argument, text_argument
from ..native import core as native_core
from ..text.pretokenize import (
    GPT2_PATTERN,
    PretokenSpec,
    check_covered,
    compile_pattern,
    cut_context,
    native_scanner,
    resolve_pattern,
)
from .raw_bytes import encode_bytes
from .special_guard import SpecialSet, allowed_set, split_allowed
from .tables import (
    MergeTable,
    Tables,
    byte_ids,
    first_ids,
    load_store,  # noqa: F401 - where the exports and the inspection import it from
    load_store_ids,
    load_store_log,
    merge_table,
)

if TYPE_CHECKING:
    import numpy as np

#: Pre-tokens whose ids are kept in the cache (words repeat: a few thousand cover most text).
_CACHE_LIMIT = 1 << 16
#: ``encode_iterable`` encodes its buffer once it holds this many characters (memory stays flat).
_STREAM_BLOCK = 1 << 20


class TokenIdError(InputError, KeyError):
    """A token id given to ``decode`` is not in the vocabulary. Also a ``KeyError``, as tiktoken's
    (code written for tiktoken catches that; an id is a key of ``vocab``), and an ``InputError``
    (exit 2 from the CLI)."""

    def __str__(self) -> str:  # the message, not KeyError's repr of it
        return str(self.args[0]) if self.args else ""


def _as_tiktoken_reads(text: str) -> str:
    """``text`` with its surrogates read as tiktoken's ``encode`` reads them: a pair written as two
    code points becomes its character, a lone one U+FFFD (a str holding either is not UTF-8)."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _tiktoken_surrogates(method):
    """For ``from_tiktoken`` tokenizers: where a text holds surrogates (UnicodeEncodeError), encode
    it again as tiktoken does (``_as_tiktoken_reads``), instead of raising as the others do. Only
    on that error, so valid text pays nothing."""

    @functools.wraps(method)
    def wrapper(self, text, *args, **kwargs):
        try:
            return method(self, text, *args, **kwargs)
        except UnicodeEncodeError:
            if self._whole is None:
                _check_texts(method.__name__, text)  # says which text, and where
                raise
            fixed = (_as_tiktoken_reads(text) if isinstance(text, str) else
                     [_as_tiktoken_reads(t) if isinstance(t, str) else t for t in text])
            return method(self, fixed, *args, **kwargs)
        except (TypeError, AttributeError):
            _check_texts(method.__name__, text)  # a wrong type: said as the CLI says it
            raise

    return wrapper


def _check_texts(method: str, text: object) -> None:
    """Raise ArgumentTypeError / ArgumentValueError for a wrong argument of ``method`` (``encode``
    and ``encode_to_array``: a str, the latter also UTF-8 bytes; ``encode_batch``: a sequence of
    str). Called only once encoding failed, so valid text pays nothing for the check."""
    if method == "encode_batch":
        if isinstance(text, (str, bytes)) or not isinstance(text, Iterable):
            raise ArgumentTypeError(f"encode_batch takes a list of str, not {type(text).__name__}")
        for i, t in enumerate(text):
            text_argument(t, f"text {i} of the batch")
        return
    if method == "encode_to_array" and isinstance(text, (bytes, bytearray, memoryview)):
        return
    if isinstance(text, (bytes, bytearray)):
        raise ArgumentTypeError(f"{method} takes a str, not {type(text).__name__}: decode it first "
                                "(text.decode('utf-8'))" + (", or use encode_to_array, which takes UTF-8 bytes"
                                                            if method == "encode" else ""))
    text_argument(text, "the text")


def _check_vocab_and_merges(vocab: object, merges: object, special_tokens: object) -> None:
    """Refuse (ArgumentTypeError / ArgumentValueError) constructor arguments of the wrong shape:
    ``vocab`` ``{int: bytes}``, ``merges`` ``[(bytes, bytes)]``, ``special_tokens`` str texts."""
    if not isinstance(vocab, Mapping):
        raise ArgumentTypeError(f"vocab must be a dict {{id: bytes}}, not {type(vocab).__name__}")
    for i, b in vocab.items():
        if type(i) is not int or not isinstance(b, (bytes, bytearray)):
            raise ArgumentTypeError(f"vocab must map int ids to bytes; it holds {i!r}: {b!r:.40}")
    if isinstance(merges, (str, bytes)) or not isinstance(merges, Iterable):
        raise ArgumentTypeError(f"merges must be a list of (bytes, bytes) pairs, not {type(merges).__name__}")
    if isinstance(merges, Sequence):  # an iterator is read once, by the constructor itself
        for rank, m in enumerate(merges):
            if (not isinstance(m, (tuple, list)) or len(m) != 2
                    or not all(isinstance(x, (bytes, bytearray)) for x in m)):
                raise ArgumentTypeError(f"merge {rank} must be a pair of bytes, not {m!r:.60}")
    if special_tokens is None:
        return
    if isinstance(special_tokens, (str, bytes)) or not isinstance(special_tokens, Iterable):
        raise ArgumentTypeError(f"special_tokens must be a list of str, not {type(special_tokens).__name__}")
    if isinstance(special_tokens, Sequence):
        for s in special_tokens:
            text_argument(s, f"special token {s!r}")
            if not s:
                raise ArgumentValueError("special tokens must be non-empty strings; one is ''")


class Tokenizer(Tables):
    """Byte-level BPE encoder/decoder: the CS336 ``Tokenizer`` API plus ``from_store``.

    ``vocab``: ``{id: bytes}``; ``merges``: ``[(left bytes, right bytes)]`` in rank order;
    ``special_tokens``: strings, each added to the vocabulary (at the next free id) if its bytes
    are not there yet. ``pattern`` is the pre-tokenization regex, or a name in
    ``pretokenize.PATTERNS`` ("gpt2", "gpt4", "o200k").
    """

    def __init__(
        self,
        vocab: dict[int, bytes],
        merges: Sequence[tuple[bytes, bytes]],
        special_tokens: Sequence[str] | None = None,
        *,
        pattern: str = GPT2_PATTERN,
        native: bool = True,
        _tiktoken_ranks: Mapping[bytes, int] | None = None,
    ) -> None:
        _check_vocab_and_merges(vocab, merges, special_tokens)
        self.vocab: dict[int, bytes] = dict(vocab)
        self.merges: list[tuple[bytes, bytes]] = [(bytes(a), bytes(b)) for a, b in merges]
        self.pretoken_spec = PretokenSpec(tuple(dict.fromkeys(special_tokens or ())), resolve_pattern(pattern))
        self._pat = compile_pattern(self.pattern)

        # first id of each byte string: {bytes: id}; a special not in the vocabulary is added to it
        self._id_of: dict[bytes, int] = first_ids(self.vocab, self.special_tokens)
        self._special_id: dict[str, int] = {s: self._id_of[s.encode("utf-8")] for s in self.special_tokens}
        self._init_specials()

        self._byte_id: list[int] = byte_ids(self._id_of)
        # tiktoken's rule (from_tiktoken): {token bytes: id} of the ranks, for a piece that is a token
        self._whole: Mapping[bytes, int] | None = _tiktoken_ranks
        self._table: MergeTable = merge_table(self.merges, self._id_of, by_merged_id=_tiktoken_ranks is not None)
        self._cache: dict[bytes, list[int]] = {}
        self._core = self._native_encoder() if native else None

    def _native_encoder(self):
        """The native core's ``Encoder`` of this tokenizer (the same table, specials and pattern),
        or None where the core is not built."""
        core = native_core
        if core is None:
            return None
        # rows (left, right, merged) in rank order; the native side ranks by position
        rows = sorted((r, a, b, t) for (a, b), (r, t) in self._table.items())
        encoder = core.Encoder(self._byte_id, [(a, b, t) for _, a, b, t in rows],
                               [(s.encode("utf-8"), i) for s, i in self._special_id.items()],
                               native_scanner(self.pattern))
        if self._whole is not None:
            encoder.use_tiktoken_rules(list(self._whole.items()))
        return encoder

    # -- construction --------------------------------------------------------------------------

    @classmethod
    def from_files(
        cls,
        vocab_filepath: str | os.PathLike,
        merges_filepath: str | os.PathLike,
        special_tokens: Sequence[str] | None = None,
        **kwargs,
    ) -> Tokenizer:
        """Load GPT-2 style ``vocab.json`` + ``merges.txt`` (with or without a ``#version`` line)."""
        from ..formats.gpt2_files import read_gpt2

        path_argument(vocab_filepath, "vocab_filepath")
        path_argument(merges_filepath, "merges_filepath")
        vocab, merges = read_gpt2(vocab_filepath, merges_filepath)
        return cls(vocab, merges, special_tokens, **kwargs)

    @classmethod
    def from_store(cls, db_path: str | os.PathLike, vocab_size: int | None = None, **kwargs) -> Tokenizer:
        """The tokenizer a store holds; ``vocab_size`` takes a prefix of its merge log."""
        path_argument(db_path, "db_path")
        if vocab_size is not None and (not isinstance(vocab_size, int) or isinstance(vocab_size, bool)):
            raise ArgumentTypeError(f"vocab_size must be an integer or None, not {type(vocab_size).__name__}")
        if set(kwargs) <= {"native"}:  # the encoder from the store's merge ids, not a dict lookup per merge
            log, specials, pattern, keep = load_store_log(db_path, vocab_size)
            if log is not None:  # read natively and checked
                return cls._from_log(log, specials, pattern, keep, **kwargs)
        vocab, merges, specials, pattern, ids = load_store_ids(db_path, vocab_size)
        if set(kwargs) <= {"native"}:
            return cls._from_result(vocab, merges, specials, pattern, ids, **kwargs)
        return cls(vocab, merges, specials, pattern=pattern, **kwargs)

    @classmethod
    def from_tiktoken(
        cls,
        path: str | os.PathLike,
        pattern: str,
        special_tokens: Mapping[str, int] | Sequence[str] | None = None,
        *,
        native: bool = True,
    ) -> Tokenizer:
        """A tokenizer that encodes and decodes exactly as tiktoken does with a ``.tiktoken`` ranks
        file (plain or gzipped), e.g. OpenAI's ``cl100k_base`` with ``pattern="cl100k"``.

        The ids are tiktoken's ranks. ``pattern`` is required (a ranks file does not say which
        regex it was made with): a name in ``pretokenize.PATTERNS`` or a regex. ``special_tokens``:
        ``{text: id}`` as tiktoken's ``special_tokens`` (OpenAI's ids: cl100k_base has
        ``{"<|endoftext|>": 100257, ...}``), or a list of texts, given the next free ids in order.
        ``encode`` equals tiktoken's ``encode(text, allowed_special="all")``.
        Problems with the file or the special tokens are ``InputError`` s naming what is wrong.
        """
        from ..formats.openai_ranks import read_ranks

        return cls._from_ranks(read_ranks(path_argument(path, "path")), pattern, special_tokens, native)

    # -- encoding ------------------------------------------------------------------------------

    def _bpe(self, piece: bytes) -> list[int]:
        """BPE one pre-token: merge the lowest-rank pair (the leftmost of equal ranks), all
        occurrences, until none is left. tiktoken's rule: a piece that is a token is that token,
        and each step merges only the leftmost pair (a merge may make a pair that ranks lower)."""
        if self._whole is not None:
            whole = self._whole.get(piece)
            if whole is not None:
                return [whole]
        ids = [self._byte_id[b] for b in piece]
        table = self._table
        while len(ids) > 1:
            best = None
            for i, pair in enumerate(zip(ids, ids[1:])):
                hit = table.get(pair)
                if hit is not None and (best is None or hit[0] < best[0]):
                    best = (hit[0], hit[1], i)
            if best is None:
                break
            _, new, i = best
            if self._whole is not None:
                ids[i:i + 2] = [new]
            else:
                ids = merge_pair(ids, ids[i], ids[i + 1], new)
        return ids

    def _encode_piece(self, piece: bytes) -> list[int]:
        hit = self._cache.get(piece)
        if hit is None:
            hit = self._bpe(piece)
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()  # why: a bounded cache; frequent words come back at once
            self._cache[piece] = hit
        return hit

    def _encode_ordinary(self, text: str) -> list[int]:
        """Encode text that holds no special token (regex pre-tokenization); a pattern that leaves
        some of it out of every pre-token is refused (``check_covered``): no id would spell it."""
        pieces = self._pat.findall(text)
        check_covered(self.pattern, text, pieces, self._pat)
        if self._core is not None:
            return self._core.encode_pieces(pieces).tolist()
        out: list[int] = []
        for piece in pieces:
            out.extend(self._encode_piece(piece.encode("utf-8")))
        return out

    @_tiktoken_surrogates
    def encode(self, text: str, *, allowed_special: SpecialSet = "all", disallowed_special: SpecialSet = ()
               ) -> list[int]:
        """Token ids of ``text``; special tokens become their ids. ``allowed_special`` /
        ``disallowed_special`` guard user text as tiktoken does (``special_guard``): the default
        (CS336's) encodes every special's text as the special; ``allowed_special=set()`` with
        ``disallowed_special="all"`` (tiktoken's default) raises ``DisallowedSpecialError`` where
        the text holds one."""
        if allowed_special != "all" or disallowed_special:
            allowed = allowed_set(self.special_tokens, (text,), allowed_special, disallowed_special)
            if len(allowed) < len(self._special_id):
                return self._encode_allowed(text, allowed)
        if self._core is not None and self._core.native_split:
            return self._core.encode_list(text)
        if self._special_re is None:
            return self._encode_ordinary(text)
        out: list[int] = []
        for i, part in enumerate(self._special_re.split(text)):
            if i % 2:
                out.append(self._special_id[part])
            elif part:
                out.extend(self._encode_ordinary(part))
        return out

    def _encode_allowed(self, text: str, allowed: frozenset[str]) -> list[int]:
        """``encode`` where only the ``allowed`` specials are specials (the others plain text)."""
        if not allowed:
            return self.encode_ordinary(text)
        out: list[int] = []
        for i, part in enumerate(split_allowed(text, allowed)):
            if i % 2:
                out.append(self._special_id[part])
            elif part:
                out.extend(self.encode_ordinary(part))
        return out

    @_tiktoken_surrogates
    def encode_ordinary(self, text: str) -> list[int]:
        """Token ids of ``text`` with special tokens' text encoded as plain text (tiktoken's
        ``encode_ordinary``)."""
        if self._core is not None and self._core.native_split:
            return self._core.encode_list(text, True)
        return self._encode_ordinary(text)

    def encode_bytes(self, data: bytes) -> list[int]:
        """Token ids of ``data``, UTF-8 or not, as tiktoken's ``_encode_bytes`` gives them (specials'
        text as plain text; ``raw_bytes`` says how bytes that are not UTF-8 are encoded)."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise ArgumentTypeError(f"encode_bytes takes bytes, not {type(data).__name__}")
        return encode_bytes(self, data)

    def last_piece(self, text: str) -> str:
        """The last pre-token of ``text`` by the pattern (no special tokens), or ""."""
        found = None
        for found in self._pat.finditer(text):  # noqa: B007 - the last one is wanted
            pass
        return found.group() if found is not None else ""

    def encode_piece(self, piece: bytes) -> list[int]:
        """The ids of one pre-token's bytes (any bytes), by the BPE rule alone."""
        if self._core is not None:
            return self._core.encode_pieces([bytes(piece)]).tolist()
        return list(self._bpe(bytes(piece)))

    @_tiktoken_surrogates
    def encode_to_array(self, text: str | bytes, threads: int = 0, *, allowed_special: SpecialSet = "all",
                        disallowed_special: SpecialSet = ()):
        """Ids of ``text`` (str, or UTF-8 bytes) as a uint32 NumPy array; native and parallel
        over blocks for a named pattern (``threads`` 0 = all cores). The guard is ``encode``'s."""
        import numpy as np

        if (allowed_special != "all" or disallowed_special) and isinstance(text, str):
            allowed = allowed_set(self.special_tokens, (text,), allowed_special, disallowed_special)
            if len(allowed) < len(self._special_id):
                if not allowed and self._core is not None and self._core.native_split:
                    return self._core.encode(text, threads, True)
                return np.asarray(self._encode_allowed(text, allowed), dtype=np.uint32)
        if self._core is not None and self._core.native_split:
            return self._core.encode(text, threads)
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        return np.asarray(self.encode(text), dtype=np.uint32)

    @_tiktoken_surrogates
    def encode_batch(self, texts: Sequence[str], threads: int = 0, *, allowed_special: SpecialSet = "all",
                     disallowed_special: SpecialSet = ()) -> list[list[int]]:
        """Encode many documents, in parallel over documents with the native core
        (``threads`` 0 = all cores). The guard is ``encode``'s."""
        if allowed_special != "all" or disallowed_special:
            texts = list(texts)
            allowed = allowed_set(self.special_tokens, texts, allowed_special, disallowed_special)
            if len(allowed) < len(self._special_id):
                if not allowed and self._core is not None and self._core.native_split:
                    return self._core.encode_batch(texts, threads, True)
                return [self._encode_allowed(t, allowed) for t in texts]
        if self._core is not None and self._core.native_split:
            return self._core.encode_batch(list(texts), threads)
        return [self.encode(t) for t in texts]

    def encode_documents(self, texts: Sequence[str], threads: int = 0, *, allowed_special: SpecialSet = "all",
                         disallowed_special: SpecialSet = ()) -> tuple[np.ndarray, np.ndarray]:
        """Many documents as arrays: ``(ids, offsets)``, all ids in one uint32 array and document
        ``i``'s at ``ids[offsets[i]:offsets[i + 1]]`` (``offsets``: uint64, one more than the
        documents). Each is encoded on its own, natively and in parallel over documents, with no
        Python object per id (what ``encode_batch``'s lists cost). The guard is ``encode``'s."""
        import numpy as np

        texts = list(texts)
        native = self._core is not None and self._core.native_split
        if native and allowed_special == "all" and not disallowed_special and all(isinstance(t, str) for t in texts):
            # documents joined by 0xFF, which no UTF-8 text holds: the native reader's separator
            ids, lengths = self._core.encode_documents(b"\xff".join(t.encode("utf-8") for t in texts), threads)
            if not texts:
                ids, lengths = ids[:0], lengths[:0]
        else:
            lists = self.encode_batch(texts, threads, allowed_special=allowed_special,
                                      disallowed_special=disallowed_special)
            ids = np.fromiter((i for ids in lists for i in ids), dtype=np.uint32)
            lengths = np.array([len(x) for x in lists], dtype=np.uint64)
        offsets = np.zeros(len(texts) + 1, dtype=np.uint64)
        np.cumsum(lengths, out=offsets[1:])
        return ids, offsets

    def encode_iterable(self, iterable: Iterable[str]) -> Iterator[int]:
        """Stream the ids of the concatenation of ``iterable`` (e.g. a file's lines).

        Memory stays flat: text is encoded in blocks cut only where the cut changes nothing
        (``safe_cut``; natively for a named pattern), so the ids equal ``encode("".join(iterable))``.
        """
        if isinstance(iterable, (str, bytes)) or not isinstance(iterable, Iterable):
            raise ArgumentTypeError(f"encode_iterable takes an iterable of str (e.g. an open text file), "
                                    f"not {type(iterable).__name__}")
        try:
            yield from self._encode_iterable(iterable)
        except (TypeError, AttributeError, UnicodeEncodeError) as exc:
            if isinstance(exc, ArgumentTypeError | ArgumentValueError):
                raise
            raise ArgumentTypeError(f"encode_iterable takes an iterable of str (a file opened in text mode, "
                                    f"not 'rb'): {exc}") from None

    def _encode_iterable(self, iterable: Iterable[str]) -> Iterator[int]:
        if self._core is not None and self._core.native_split:
            yield from self._encode_iterable_native(iterable)
            return
        buf: list[str] = []
        size = 0
        want = _STREAM_BLOCK
        for s in iterable:
            buf.append(s)
            size += len(s)
            if size >= want:
                text = "".join(buf)
                cut = self.safe_cut(text)
                if cut > 0:
                    yield from self.encode(text[:cut])
                    text = text[cut:]
                    want = _STREAM_BLOCK
                else:
                    # no cut point yet (e.g. one long whitespace run): wait for twice as much
                    # text before looking again, so the joins stay linear overall
                    want = 2 * len(text)
                buf, size = [text], len(text)
        text = "".join(buf)
        if text:
            yield from self.encode(text)

    def _encode_iterable_native(self, iterable: Iterable[str]) -> Iterator[int]:
        """``encode_iterable`` for a named pattern: UTF-8 blocks cut by the native splitter (which
        finds cut points in CJK text too), each encoded on all cores."""
        splitter = self._splitter
        ctx = cut_context(splitter)
        buf: list[bytes] = []
        size = 0
        want = _STREAM_BLOCK
        for s in iterable:
            b = s.encode("utf-8")
            buf.append(b)
            size += len(b)
            if size >= want:
                data = b"".join(buf)
                cut = max(splitter.last_cut(data, 1, len(data) - ctx), 0)
                if cut > 0:
                    yield from self._core.encode(data[:cut], 0).tolist()
                    data = data[cut:]
                    want = _STREAM_BLOCK
                else:
                    want = 2 * len(data)  # one giant pre-token so far: linear joins, as above
                buf, size = [data], len(data)
        data = b"".join(buf)
        if data:
            yield from self._core.encode(data, 0).tolist()

    def safe_cut(self, text: str) -> int:
        """The last offset where ``text`` (which begins where encoding would begin) may be cut
        with no effect on its ids; 0 if none.

        The native splitter decides (``pretokenize.native_splitter``): at the start of a special
        token, which is safe for any pattern and the only cut for a user's own regex, or by the
        pattern's local rule (GPT-2, GPT-4, o200k). Without the native core, at special tokens only.
        """
        limit = len(text) - max(self._max_special, 1)
        if limit <= 0:
            return 0
        if self._splitter is None:  # pragma: no cover - the package is always built with its core
            found = self._special_re.finditer(text) if self._special_re is not None else ()
            return max((m.start() for m in found if 0 < m.start() <= limit), default=0)
        data = text.encode("utf-8", "surrogatepass")
        q = self._splitter.last_cut(data, 1, len(data) - cut_context(self._splitter))
        return len(data[:q].decode("utf-8", "surrogatepass")) if q > 0 else 0

    # -- decoding ------------------------------------------------------------------------------

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        vocab = self.vocab
        if not isinstance(ids, (list, tuple)):  # read twice below (an iterator once)
            ids = list(ids)
        try:
            joined = b"".join([vocab[i] for i in ids])
        except (KeyError, TypeError):
            bad = next(i for i in ids if not isinstance(i, int) or i not in vocab)
            raise TokenIdError(f"token id {bad!r} is not in the vocabulary (ids are 0..{max(vocab)})") from None
        # True and numpy's bool_ hash and compare as 1, so vocab[True] found token 1. Checked after the
        # join, on the few types there are (a set of types: C speed), so a good list costs one pass.
        if any(t.__name__ in ("bool", "bool_") for t in set(map(type, ids))):
            bad = next(i for i in ids if type(i).__name__ in ("bool", "bool_"))
            raise TokenIdError(f"token id {bad!r} is a bool, not an integer id")
        return joined

    def decode(self, ids: Iterable[int], errors: str = "replace") -> str:
        """The text of ``ids`` (a list, or a NumPy array); invalid UTF-8 becomes U+FFFD (``errors``
        is ``bytes.decode``'s: "strict" raises, "ignore" drops it)."""
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        return self.decode_bytes(ids).decode("utf-8", errors=errors)

    @property
    def vocab_size(self) -> int:
        """How many tokens there are (``len(vocab)``): the CS336 meaning. An embedding is sized
        by ``n_vocab``, which is larger where ids have gaps (OpenAI's specials)."""
        return len(self.vocab)

    @property
    def n_vocab(self) -> int:
        """The largest id + 1 (tiktoken's ``n_vocab``): every id indexes a table this long.
        cl100k_base with its specials: 100,277, while ``vocab_size`` is 100,261."""
        return max(self.vocab) + 1

    def special_id(self, token: str) -> int:
        """The id of the special token ``token`` (a document separator: ``encode --separator``);
        ``InputError`` naming the special tokens there are if it is not one of them."""
        sid = self._special_id.get(token)
        if sid is None:
            raise InputError(f"separator {token!r} is not one of the store's special tokens "
                             f"({', '.join(self.special_tokens) or 'none'})")
        return sid

    def __repr__(self) -> str:
        return (f"Tokenizer(vocab_size={len(self.vocab)}, merges={len(self.merges)}, "
                f"special_tokens={self.special_tokens!r})")


#: ``encode_files`` reads this many bytes per step: memory stays at a few times this.
_FILE_BLOCK = 16 << 20


def encode_files(
    tok: Tokenizer,
    paths: Sequence[str | os.PathLike],
    write: Callable[[np.ndarray], None],
    *,
    threads: int = 0,
    separator: str | None = None,
    progress: Callable[[int], None] | None = None,
    block: int | None = None,
) -> int:
    """Encode whole files in order, handing each block's ids (uint32 array) to ``write``.

    Files are read in blocks (``_FILE_BLOCK`` bytes) and cut only where the cut changes nothing
    (``Tokenizer.safe_cut``), so the ids equal those of ``encode`` on each whole file; each
    block is encoded in parallel natively. ``separator``, a special token, follows each file.
    ``progress`` receives the bytes read. Returns the number of ids written.
    """

    import numpy as np

    block = block or _FILE_BLOCK
    sep = None
    if separator is not None:
        sep = np.array([tok.special_id(separator)], dtype=np.uint32)
    native = tok._core is not None and tok._core.native_split
    total = 0
    for path in paths:
        p = Path(path)
        if not p.is_file():
            raise InputError(f"{p}: no such file" if not p.exists() else f"{p}: is not a file")
        with open(p, "rb") as f:
            blocks = _bytes_blocks(tok, f, block) if native else _text_blocks(tok, f, block)
            try:
                for chunk, nread, at in blocks:
                    if chunk:
                        try:
                            ids = tok.encode_to_array(chunk, threads)
                        except ValueError as exc:  # the native UTF-8 check: "invalid UTF-8 at byte N"
                            m = regex.match(r"invalid UTF-8 at byte (\d+)", str(exc))
                            if m is None:
                                raise
                            raise _BadUtf8(at + int(m.group(1))) from None
                        write(ids)
                        total += len(ids)
                    if progress is not None and nread:
                        progress(nread)
            except _BadUtf8 as exc:
                raise InputError(f"{p}: invalid UTF-8 at byte {exc.at}; the file must be UTF-8 text") from None
        if sep is not None:
            write(sep)
            total += 1
    return total


class _BadUtf8(Exception):
    def __init__(self, at: int):
        self.at = at


def _bytes_blocks(tok: Tokenizer, f, block: int) -> Iterator[tuple[bytes, int, int]]:
    """``(UTF-8 bytes to encode, bytes read, file offset of the chunk)`` for the native path: the text never becomes a
    str (a str of mixed text takes 2-4 bytes a character and needs a UTF-8 copy natively). Cut at the
    native splitter's last safe cut, so a block stays about ``block`` bytes in CJK text as in English."""
    splitter = tok._splitter
    ctx = cut_context(splitter)
    pending = b""
    offset = 0  # file offset of pending[0]
    while True:
        data = f.read(block)
        buf = pending + data if pending else data
        cut = len(buf) if not data else max(splitter.last_cut(buf, 1, len(buf) - ctx), 0)
        yield buf[:cut], len(data), offset
        pending = buf[cut:]
        offset += cut
        if not data:
            return


def _text_blocks(tok: Tokenizer, f, block: int) -> Iterator[tuple[str, int, int]]:
    """``(text to encode, bytes read, 0)`` for the regex path: decode, then cut at ``safe_cut``."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    pending = ""
    offset = 0
    while True:
        data = f.read(block)
        final = not data
        try:
            text = pending + decoder.decode(data, final)
        except UnicodeDecodeError as exc:
            raise _BadUtf8(offset + exc.start) from None
        offset += len(data)
        cut = len(text) if final else tok.safe_cut(text)
        yield text[:cut], len(data), 0
        pending = text[cut:]
        if final:
            return
