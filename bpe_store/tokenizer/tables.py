"""The tables a ``Tokenizer`` encodes with, and how it is built from ranks and rebuilt from a pickle.

``Tables`` is the tokenizer's base: ``{bytes: first id}``, each byte's id and the merge table
(``MergeTable``), which ``Tokenizer.__init__`` computes from ``vocab`` and ``merges``. A tokenizer
from tiktoken's ranks (``Tables._from_ranks``: ``Tokenizer.from_tiktoken``, ``tiktoken_compat``) is
built from native ``TiktokenRanks`` instead: the native encoder builds its pair table itself, and the
Python tables (``merges``, the merge table, ``{bytes: id}``) are made only when the pure-Python path
asks for them. ``cl100k_base`` loads in ~0.2 CPU s (tiktoken's time), not 1.2.

A tokenizer pickles and deep-copies (``__reduce__``): it is rebuilt from what defines it (vocab,
merges, specials, pattern; or the ranks), its native encoder and splitter made again in the new
process: multiprocessing's spawn pools, DataLoader workers and ``datasets.map(num_proc=)`` take it.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError, StoreError
from ..native import core as native_core
from ..text.pretokenize import PretokenSpec, checked_pattern, native_scanner, native_splitter, special_splitter

if TYPE_CHECKING:
    import regex

#: ``{(left id, right id): (rank, merged id)}`` — the merge table, ids being first ids. The rank is
#: the merge's position, or (tiktoken's rule) the merged id.
MergeTable = dict[tuple[int, int], tuple[int, int]]


def first_ids(vocab: dict[int, bytes], special_tokens: list[str]) -> dict[bytes, int]:
    """``{bytes: first id}`` of ``vocab``; a special token whose bytes are not there is added to
    ``vocab`` (and to the result) at the next free id."""
    id_of: dict[bytes, int] = {}
    for i in sorted(vocab):
        id_of.setdefault(vocab[i], i)
    for s in special_tokens:
        b = s.encode("utf-8")
        if b not in id_of:
            new = max(vocab, default=-1) + 1
            vocab[new] = b
            id_of[b] = new
    return id_of


def byte_ids(id_of: Mapping[bytes, int]) -> list[int]:
    """The id of each single byte, 0 to 255; InputError where the vocabulary lacks one."""
    missing = [b for b in range(256) if bytes([b]) not in id_of]
    if missing:
        raise InputError(f"the vocabulary lacks {len(missing)} single byte(s) (first: {missing[0]:#04x}); "
                         "a byte-level BPE needs all 256")
    return [id_of[bytes([b])] for b in range(256)]


def merge_table(merges: list[tuple[bytes, bytes]], id_of: Mapping[bytes, int], by_merged_id: bool) -> MergeTable:
    """The merge table of ``merges`` (see ``MergeTable``): a repeated pair keeps its first rank;
    ``by_merged_id`` (tiktoken's rule) ranks a pair by the id of the token it makes instead of its
    position. InputError where a merge uses bytes the vocabulary lacks."""
    table: MergeTable = {}
    for rank, (a, b) in enumerate(merges):
        ia, ib, iab = id_of.get(a), id_of.get(b), id_of.get(a + b)
        if ia is None or ib is None or iab is None:
            which = a if ia is None else b if ib is None else a + b
            raise InputError(f"merge {rank} ({a!r}, {b!r}) uses {which!r}, which is not in the vocabulary")
        table.setdefault((ia, ib), (iab if by_merged_id else rank, iab))
    return table


class Tables:
    """The tables of a ``Tokenizer`` (the module's docstring says what and when)."""

    #: How the tokenizer's text becomes pre-tokens, as one value: its special tokens (in order, no
    #: repeats) and its pattern (a regex); "strict" UTF-8 and no piece bound (an encoder never cuts
    #: a pre-token). ``pattern`` and ``special_tokens`` are read from it.
    pretoken_spec: PretokenSpec

    @property
    def pattern(self) -> str:
        """The pre-tokenization regex."""
        return self.pretoken_spec.pattern

    @property
    def special_tokens(self) -> list[str]:
        """The special tokens, in order (a new list: the tokenizer's own cannot change)."""
        return list(self.pretoken_spec.special_tokens)

    # What a tokenizer from ranks (``from_tiktoken``) computes only when asked. Why lazy: cl100k_base
    # has 233,378 pairs; as Python objects they took most of a 1.2 s load, while encoding and
    # decoding need only the native encoder and ``vocab``. ``Tokenizer.__init__`` sets them all.

    # A tokenizer from a store's merge log read natively (``_from_log``) computes the same ones from
    # the log's arrays, only when asked: encoding and decoding need only the encoder and ``vocab``.

    @functools.cached_property
    def merges(self) -> list[tuple[bytes, bytes]]:
        if "_log" in self.__dict__:
            return self._log.merge_pairs(self._log_merges)
        from ..formats.tiktoken_files import tiktoken_merges

        return tiktoken_merges(self._whole)

    @functools.cached_property
    def _whole(self) -> Mapping[bytes, int]:
        return self._ranks.mergeable()

    @functools.cached_property
    def _pat(self) -> regex.Pattern:
        import regex

        return regex.compile(self.pattern)

    @functools.cached_property
    def _id_of(self) -> dict[bytes, int]:
        if "_log" in self.__dict__:
            return first_ids(self.vocab, self.special_tokens)
        return dict(self._whole) | {s.encode("utf-8"): i for s, i in self._special_id.items()}

    @functools.cached_property
    def _byte_id(self) -> list[int]:
        return byte_ids(self._id_of)

    @functools.cached_property
    def _table(self) -> MergeTable:
        if "_log" in self.__dict__:  # by rank, from the encoder's own triples (first ids)
            table: MergeTable = {}
            triples = self._log_ids
            for rank in range(len(triples) // 3):
                table.setdefault((triples[3 * rank], triples[3 * rank + 1]), (rank, triples[3 * rank + 2]))
            return table
        return merge_table(self.merges, self._id_of, by_merged_id=True)

    def __reduce__(self):
        """Pickling (multiprocessing, DataLoader workers, ``datasets.map``) and ``copy.deepcopy``:
        the tokenizer is rebuilt from what defines it; the native encoder is built again."""
        native = self._core is not None
        if "_ranks" in self.__dict__:
            specials = {s: self._special_id[s] for s in self.special_tokens}
            return (_ranks_tokenizer, (type(self), self._whole, self.pattern, specials, native))
        return (_plain_tokenizer, (type(self), self.vocab, self.merges, self.special_tokens, self.pattern, native,
                                   self._whole))

    @classmethod
    def _from_ranks(cls, ranks, pattern: str, special_tokens: Mapping[str, int] | Sequence[str] | None,
                    native: bool = True) -> Tables:
        """A tokenizer by tiktoken's rule from native ``TiktokenRanks`` (``openai_ranks.read_ranks``)."""
        from ..formats.tiktoken_files import tiktoken_specials

        vocab: dict[int, bytes] = ranks.vocab()
        specials = tiktoken_specials(ranks.get, vocab.get, special_tokens)
        top = max(ranks.max_id, max((i for i in specials.values() if i is not None), default=-1))
        ids: dict[str, int] = {}
        for s, sid in specials.items():  # a list's specials take the next free ids, in order
            if sid is None:
                top += 1
                sid = top
            ids[s] = sid
            vocab[sid] = s.encode("utf-8")  # ids shared by specials decode as the last (tiktoken's)
        self = cls.__new__(cls)
        self.vocab, self._ranks, self._special_id = vocab, ranks, ids
        self.pretoken_spec = PretokenSpec(tuple(ids), checked_pattern(pattern))
        self._init_specials()
        self._cache = {}
        core = native_core if native else None
        self._core = None if core is None else core.Encoder.from_tiktoken_ranks(
            ranks, [(s.encode("utf-8"), i) for s, i in ids.items()], native_scanner(self.pattern))
        return self

    @classmethod
    def _from_result(cls, vocab: dict[int, bytes], merges: list[tuple[bytes, bytes]], special_tokens: list[str],
                     pattern: str, ids: list[tuple[int, int, int]], native: bool = True) -> Tables:
        """``Tokenizer(vocab, merges, special_tokens, pattern=pattern)`` of a store's checked result
        (``Tokenizer.from_store``), its merge table and encoder made from the merge log's ids ``ids``
        (``read_result_ids``) instead of a lookup of each merge's bytes: the same tables (a token is
        its bytes' first id, ``first_ids``; a repeated pair keeps its first rank), without copying or
        checking what the store's check has. Why: o200k_base extended, 216 K merges: ~0.95 -> ~0.2 CPU s."""
        self = cls.__new__(cls)
        self.vocab, self.merges = vocab, merges
        self.pretoken_spec = PretokenSpec(tuple(dict.fromkeys(special_tokens)), checked_pattern(pattern))
        self._id_of = first_ids(self.vocab, self.special_tokens)
        self._special_id = {s: self._id_of[s.encode("utf-8")] for s in self.special_tokens}
        self._init_specials()
        self._byte_id = byte_ids(self._id_of)
        self._whole, self._cache = None, {}
        id_of = self._id_of
        # ids that are not their bytes' first (a special token's bytes learned as a token): renamed
        later = {i: id_of[b] for i, b in self.vocab.items() if id_of[b] != i}
        table: MergeTable = {}
        for rank, (a, b, t) in enumerate(ids):
            if later:
                a, b, t = later.get(a, a), later.get(b, b), later.get(t, t)
            table.setdefault((a, b), (rank, t))
        self._table = table
        core = native_core if native else None
        self._core = None if core is None else core.Encoder(
            self._byte_id, [(a, b, t) for (a, b), (_, t) in table.items()],  # rank order: inserted so
            [(s.encode("utf-8"), i) for s, i in self._special_id.items()], native_scanner(self.pattern))
        return self

    @classmethod
    def _from_log(cls, log, special_tokens: list[str], pattern: str, n_merges: int, native: bool = True) -> Tables:
        """``Tokenizer.from_store``'s tokenizer from the store's merge log read natively and checked
        (``store.merge_log.read_checked``), its first ``n_merges`` merges: the tables ``_from_result``
        makes, computed from the log's arrays (``MergeLog.encoder_tables``: first ids, a special
        token's id for a token with its bytes), the Python ones only when asked."""
        from array import array

        self = cls.__new__(cls)
        n_special = len(special_tokens)
        self.vocab = log.vocab(n_special + 256 + n_merges)
        self._log, self._log_merges = log, n_merges
        self.pretoken_spec = PretokenSpec(tuple(dict.fromkeys(special_tokens)), checked_pattern(pattern))
        byte_id, packed, special_ids = log.encoder_tables(n_special, n_merges)
        self._special_id = dict(zip(special_tokens, special_ids))
        self._init_specials()
        self._byte_id, self._log_ids = byte_id, array("I", packed)
        self._whole, self._cache = None, {}
        core = native_core if native else None
        self._core = None if core is None else core.Encoder.from_packed_merges(
            byte_id, packed, [(s.encode("utf-8"), i) for s, i in self._special_id.items()],
            native_scanner(self.pattern))
        return self

    def _init_specials(self) -> None:
        self._special_re = special_splitter(self.special_tokens, keep=True)  # longest first
        self._max_special = max((len(s) for s in self.special_tokens), default=0)
        # where a stream or a file may be cut (None without the native core: at specials only)
        self._splitter = native_splitter(self.special_tokens, self.pattern)


def _ranks_tokenizer(cls: type[Tables], mergeable: Mapping[bytes, int], pattern: str,
                     specials: dict[str, int], native: bool) -> Tables:
    """A pickled ``from_tiktoken`` tokenizer, rebuilt (``Tokenizer.__reduce__``)."""
    from ..formats.openai_ranks import ranks_of

    return cls._from_ranks(ranks_of(mergeable), pattern, specials, native)


def _plain_tokenizer(cls: type[Tables], vocab: dict[int, bytes], merges: list[tuple[bytes, bytes]],
                     specials: list[str], pattern: str, native: bool, whole: Mapping[bytes, int] | None) -> Tables:
    """A pickled tokenizer, rebuilt (``Tokenizer.__reduce__``)."""
    return cls(vocab, merges, specials, pattern=pattern, native=native, _tiktoken_ranks=whole)


def load_store(db_path: str | os.PathLike, vocab_size: int | None = None
               ) -> tuple[dict[int, bytes], list[tuple[bytes, bytes]], list[str], str]:
    """``(vocab, merges, special tokens, pattern)`` of a store, for ``vocab_size`` (a prefix).

    Refuses a store that has not finished counting (it has no merges yet) and a vocab_size
    larger than the store holds.
    """
    return load_store_ids(db_path, vocab_size)[:4]


def load_store_ids(db_path: str | os.PathLike, vocab_size: int | None = None
                   ) -> tuple[dict[int, bytes], list[tuple[bytes, bytes]], list[str], str, list[tuple[int, int, int]]]:
    """``load_store`` and the merges as ``(left, right, token)`` model ids (``read_result_ids``)."""
    from ..store.result import read_result_ids
    from ..store.store import Store

    p = Path(db_path)
    if not p.exists():
        raise StoreError(f"{p}: no such store")
    with Store.open(p, readonly=True) as store:
        run, specials = _loadable_run(store, p, vocab_size)
        result, ids = read_result_ids(store, vocab_size)
        return result.vocab, result.merges, specials, run["pattern"], ids


def load_store_log(db_path: str | os.PathLike, vocab_size: int | None = None) -> tuple[Any, list[str], str, int]:
    """``(log, special tokens, pattern, merges to use)`` of a store: its merge log read natively and
    checked (``store.merge_log.read_checked``), or log None where that path is unavailable or the
    store is not as bpe_store writes it (``load_store_ids`` then reads it and says what is wrong).
    Refuses what ``load_store`` refuses."""
    from ..store.merge_log import read_checked
    from ..store.store import Store

    p = Path(db_path)
    if not p.exists():
        raise StoreError(f"{p}: no such store")
    with Store.open(p, readonly=True) as store:
        run, specials = _loadable_run(store, p, vocab_size)
        log = read_checked(store, specials)
    if log is None:
        return None, specials, run["pattern"], 0
    keep = log.n_merges if vocab_size is None else min(max(vocab_size - 256 - len(specials), 0), log.n_merges)
    return log, specials, run["pattern"], keep


def _loadable_run(store, p: Path, vocab_size: int | None) -> tuple[dict, list[str]]:
    """The run row and special tokens of a store a tokenizer can load with ``vocab_size``: StoreError
    while it is counting, InputError for a vocab size it cannot give."""
    run = store.run_row()
    specials = json.loads(run["special_tokens"])
    if run["phase"] == "counting":
        raise StoreError(f"{p}: the store is still counting (no merges yet); finish training with "
                         f"`bpe-store train ... --db {p}` first")
    if vocab_size is not None:
        least = 256 + len(specials)
        if vocab_size < least:
            raise InputError(f"vocab size {vocab_size} is too small: at least 256 bytes + "
                             f"{len(specials)} special tokens = {least}")
        have = store.sql("SELECT count(*) FROM vocab").scalar()  # the result is read (and checked) once
        if vocab_size > have:
            more = "" if run["phase"] == "done" else " so far (training was stopped; resume it to get more)"
            raise InputError(f"vocab size {vocab_size} is larger than {p} holds: {have}{more}")
    return run, specials
