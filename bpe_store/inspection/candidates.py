"""The tokenizers ``bpe-store eval`` measures: each TOKENIZER argument parsed into a ``Candidate``,
which yields an encoder per vocabulary size (a store: one per prefix of its merge log) and the
byte length of every token id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InputError
from ..store.evaluation_rows import SELF
from .compare import lengths_of

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from ..tokenizer.tokenizer import Tokenizer


@dataclass
class Candidate:
    """One TOKENIZER argument: ``encoders()`` yields ``(vocab size, encoder)`` for each size to
    measure; an encoder maps a block of documents (joined by ``DOC_SEP``) to ids."""

    label: str
    kind: str
    source: str
    token_lengths: np.ndarray
    sizes: list[int]
    make: Callable[[int], Callable[[bytes], np.ndarray]]
    is_store: bool = False
    db: Path | None = None
    #: a store's ``(left ids, right ids, first merge id)`` of its merges, for ``counts_at_sizes``;
    #: None where a merge's product is not its own new id (a token two merges spell)
    parts: tuple[np.ndarray, np.ndarray, int] | None = None

    def encoders(self) -> Iterator[tuple[int, Callable[[bytes], np.ndarray]]]:
        for size in self.sizes:
            yield size, self.make(size)


def _tokenizer_encoder(tok: Tokenizer, threads: int) -> Callable[[bytes], np.ndarray]:
    import numpy as np

    core = tok._core

    def encode(block: bytes) -> np.ndarray:
        if core is not None and core.native_split:
            return np.asarray(core.encode_documents(block, threads)[0], dtype=np.int64)
        parts = [tok.encode_to_array(d, threads) for d in block.split(b"\xff")]
        return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)
    return encode


def _store_encoder(vocab: dict[int, bytes], merges: Sequence[tuple[bytes, bytes]], specials: list[str],
                   pattern: str, threads: int, id_rows: Sequence[tuple[int, int, int]] | None = None
                   ) -> Callable[[bytes], np.ndarray] | None:
    """The native encoder of a store's merge log (a prefix), built from ids: the ids
    ``Tokenizer(vocab, merges, specials, pattern=pattern)`` gives, without its Python merge table
    and its checks of what the store already checked. Why: ``train --eval`` builds one per
    measurement, and the Tokenizer took ~0.3 CPU s at 32K merges, most of the cost. None without
    the native core or a native scanner for the pattern (then the Tokenizer encodes)."""
    import numpy as np

    from ..native import core
    from ..text.pretokenize import native_scanner, resolve_pattern

    scanner = native_scanner(resolve_pattern(pattern))
    if core is None or not scanner:
        return None
    id_of: dict[bytes, int] = {}
    for i in sorted(vocab)[:None if id_rows is None else 256 + len(specials)]:
        id_of.setdefault(vocab[i], i)  # a token two merges spell is its first id, as the Tokenizer's
    rows = list(id_rows) if id_rows is not None else [(id_of[a], id_of[b], id_of[a + b]) for a, b in merges]
    encoder = core.Encoder([id_of[bytes([b])] for b in range(256)], rows,
                           [(t.encode("utf-8"), id_of[t.encode("utf-8")]) for t in dict.fromkeys(specials)], scanner)

    def encode(block: bytes) -> np.ndarray:
        return np.asarray(encoder.encode_documents(block, threads)[0], dtype=np.int64)
    return encode


def merge_parts(vocab: dict[int, bytes], merges: Sequence[tuple[bytes, bytes]], first: int
                ) -> tuple[np.ndarray, np.ndarray, int] | None:
    """``(left id, right id)`` arrays of ``merges`` (merge r makes id ``first + r``), or None when
    some merge makes a token whose bytes an earlier one made (then ``counts_at_sizes`` cannot
    tell which merge made an occurrence)."""
    import numpy as np

    id_of: dict[bytes, int] = {}
    for i in sorted(vocab):
        id_of.setdefault(vocab[i], i)
    lefts, rights = np.zeros(len(merges), dtype=np.int64), np.zeros(len(merges), dtype=np.int64)
    for r, (a, b) in enumerate(merges):
        if id_of.get(a + b) != first + r:
            return None
        lefts[r], rights[r] = id_of[a], id_of[b]
    return lefts, rights, first


def store_sizes(have: int, least: int, sizes: Sequence[int] | None, every: int | None, db: Path) -> list[int]:
    """The vocabulary sizes of a store to measure: ``sizes``, or every ``every`` tokens up to
    the store's (and its own), or its own; a size outside ``[least, have]`` is an InputError."""
    if sizes and every:
        raise InputError("give --sizes or --every, not both")
    if every is not None:
        if every < 1:
            raise InputError(f"--every must be at least 1, not {every}")
        out = list(range(every, have + 1, every))
        if not out or out[-1] != have:
            out.append(have)
        return [s for s in out if s >= least] or [have]
    if not sizes:
        return [have]
    for s in sizes:
        if s > have:
            raise InputError(f"vocab size {s} is larger than {db} holds: {have}")
        if s < least:
            raise InputError(f"vocab size {s} is too small: at least 256 bytes + {least - 256} special tokens "
                             f"= {least}")
    return sorted(set(sizes))


def store_candidate(db: str | Path, sizes: Sequence[int] | None = None, every: int | None = None,
                    threads: int = 0) -> Candidate:
    """A store's merge log at ``sizes`` (prefixes), read once: each size's tokenizer is built from
    a prefix in memory and gives the ids ``Tokenizer.from_store(db, size)`` gives."""
    from ..tokenizer.tokenizer import load_store

    p = Path(db)
    vocab, merges, specials, pattern = load_store(p)
    chosen = store_sizes(len(vocab), 256 + len(specials), sizes, every, p)
    return merge_log_candidate(vocab, merges, specials, pattern, chosen, threads, p)


def merge_log_candidate(vocab: dict[int, bytes], merges: Sequence[tuple[bytes, bytes]], specials: list[str],
                        pattern: str, sizes: list[int], threads: int, db: Path,
                        id_rows: Sequence[tuple[int, int, int]] | None = None) -> Candidate:
    """A merge log (a store's, read into memory) measured at ``sizes``, each a prefix of it;
    ``id_rows``: its ``merges`` rows ``(left, right, token)`` when the caller has them (then no
    table of ids is built from the bytes: ``train --eval`` builds a candidate per measurement)."""
    import numpy as np

    from ..tokenizer.tokenizer import Tokenizer

    least = 256 + len(specials)
    ids = sorted(vocab)
    parts = None
    if id_rows is None:
        parts = merge_parts(vocab, merges[:max(sizes) - least], least)
    elif id_rows:
        rows = np.asarray(id_rows[:max(sizes) - least], dtype=np.int64).reshape(-1, 3)
        if (rows[:, 2] == least + np.arange(len(rows))).all():
            parts = (rows[:, 0], rows[:, 1], least)

    def make(size: int) -> Callable[[bytes], np.ndarray]:
        prefix = {i: vocab[i] for i in ids[:size]}
        rows = None if id_rows is None else id_rows[:size - least]
        fast = _store_encoder(prefix, merges[:size - least], specials, pattern, threads, rows)
        if fast is not None:
            return fast
        return _tokenizer_encoder(Tokenizer(prefix, merges[:size - least], specials, pattern=pattern), threads)
    return Candidate(SELF, "store", str(db), lengths_of(vocab), sizes, make, is_store=True, db=db, parts=parts)


def _fixed(label: str, kind: str, source: str, tok: Tokenizer, threads: int) -> Candidate:
    size = len(tok.vocab)
    return Candidate(label, kind, source, lengths_of(tok.vocab), [size],
                     lambda _size: _tokenizer_encoder(tok, threads))


def _hf_candidate(p: Path, label: str) -> Candidate:
    import numpy as np

    from ..formats.gpt2_files import unicode_to_bytes
    from .compare import hf_tokenizer

    hf = hf_tokenizer(p)
    to_byte = unicode_to_bytes()
    added = {t.content for t in hf.get_added_tokens_decoder().values()}
    vocab: dict[int, bytes] = {}
    for tok, tid in hf.get_vocab(with_added_tokens=True).items():
        if tok in added:
            vocab[tid] = tok.encode("utf-8")
        elif all(ch in to_byte for ch in tok):
            vocab[tid] = bytes(to_byte[ch] for ch in tok)
        else:
            raise InputError(f"{p}: token {tid} ({tok!r}) is not byte-level (GPT-2's byte alphabet): only "
                             "byte-level tokenizer.json files are measured byte for byte")

    def encode(block: bytes) -> np.ndarray:
        docs = [d.decode("utf-8") for d in block.split(b"\xff")]
        out = hf.encode_batch(docs, add_special_tokens=False)
        return np.fromiter((i for e in out for i in e.ids), dtype=np.int64)
    return Candidate(label, "tokenizer.json", str(p), lengths_of(vocab), [hf.get_vocab_size()], lambda _s: encode)


def _stem(p: Path) -> str:
    name = p.name
    for suffix in (".gz", ".tiktoken", ".json"):
        name = name.removesuffix(suffix)
    return name


def parse_candidate(spec: str, pattern: str | None = None, sizes: Sequence[int] | None = None,
                    every: int | None = None, threads: int = 0) -> Candidate:
    """A TOKENIZER argument: a store (SQLite file; ``sizes``/``every`` take prefixes), a
    ``.tiktoken`` ranks file (``FILE=PATTERN``, or ``pattern``; OpenAI's file names know theirs),
    a byte-level ``tokenizer.json``, GPT-2 files (a ``vocab.json`` with ``merges.txt`` beside it,
    or their directory), or an OpenAI encoding's name (``cl100k_base``, ``o200k_base``)."""
    from ..formats.openai_ranks import ENCODINGS
    from ..store.connection import SQLITE_MAGIC
    from ..tokenizer.tokenizer import Tokenizer
    from .compare import TIKTOKEN_PATTERNS

    path, eq, pat = spec.rpartition("=")
    if not eq or not path:
        path, pat = spec, pattern or ""
    p = Path(path)
    if not p.exists() and path in ENCODINGS:
        return _named_encoding(path, threads)
    if not p.exists():
        raise InputError(f"{p}: no such tokenizer file or store")
    if p.is_dir():
        if (p / "tokenizer.json").is_file():
            return _hf_candidate(p / "tokenizer.json", p.name)
        if (p / "vocab.json").is_file() and (p / "merges.txt").is_file():
            p = p / "vocab.json"
        else:
            raise InputError(f"{p}: a directory without tokenizer.json or vocab.json + merges.txt")
    try:
        with open(p, "rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise InputError(f"{p}: cannot read it ({exc.strerror})") from None
    if head == SQLITE_MAGIC:
        if eq:
            raise InputError(f"{p}: a store keeps its own pattern; give it without =PATTERN")
        return store_candidate(p, sizes, every, threads)
    if sizes or every:
        raise InputError(f"--sizes and --every take prefixes of a store; {p} is not one")
    if p.name == "vocab.json":
        merges = p.with_name("merges.txt")
        if not merges.is_file():
            raise InputError(f"{p}: GPT-2 files need merges.txt beside vocab.json")
        tok = Tokenizer.from_files(p, merges, pattern=pat or "gpt2")
        return _fixed(p.parent.name or "gpt2", "gpt2", str(p.parent), tok, threads)
    if p.name.endswith(".json"):
        return _hf_candidate(p, _stem(p))
    pat = pat or TIKTOKEN_PATTERNS.get(_stem(p), "")
    if not pat:
        raise InputError(f"{p}: which pattern were these ranks made with? Give '{p}=PATTERN' or --pattern "
                         "(cl100k, o200k, gpt2, ... or a regex)")
    return _fixed(_stem(p), "tiktoken", str(p), Tokenizer.from_tiktoken(p, pattern=pat), threads)


def _named_encoding(name: str, threads: int) -> Candidate:
    """OpenAI's encoding ``name`` with its special tokens, its ranks file found offline
    (``openai_ranks.find_ranks_file``: a directory named by ``BPE_STORE_TIKTOKEN_DIR``, the
    ``bpe-openai`` package, tiktoken's cache)."""
    from ..formats.openai_ranks import encoding_spec, find_ranks_file
    from ..tokenizer.tokenizer import Tokenizer

    spec = encoding_spec(name)
    tok = Tokenizer.from_tiktoken(find_ranks_file(name), pattern=spec.pattern, special_tokens=spec.special_tokens)
    return _fixed(name, "tiktoken", name, tok, threads)
