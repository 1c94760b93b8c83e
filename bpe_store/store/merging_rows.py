"""The store's rows while merging: the pair counts counting ends with, and each merge checkpoint
(merges, vocabulary, changed words' tokens, changed pair counts) in one transaction; the merges,
vocabulary and pair counts read back. ``MergingRows`` is a part of ``Store``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from ..errors import StoreError
from ..pauses import pause_for_tests as _test_pause
from . import digest, words_digest
from .bulk import BulkWriter, words_bulk
from .connection import now
from .schema_check import WORDS_BY_COUNT, WORDS_BY_COUNT_MIN

#: ``{(left, right): count}``
PairCounts = dict[tuple[int, int], int]


#: SQLite page cache (KiB) while writing merge checkpoints. Why: a checkpoint rewrites rows all
#: over `words` and `pair_counts`; with SQLite's default 2 MB page cache the same pages are evicted
#: and re-read many times (enwiki-100M: 8.3 -> 6.3 s of writes). The cache only grows as used. Set
#: by ``write_merge_rows``, not when the connection opens: counting's flushes would fill it, and it
#: would stay resident while merging. Why 16 MiB, not more: a checkpoint's rows come sorted by key,
#: so `words` and the `pair_counts` table are
#: walked in order and only the count index is touched at random (5.6 MB for enwiki-100M -> 32K);
#: a 256 MiB cache cost the final checkpoint ~25 MB more resident memory for the same CPU time.
CHECKPOINT_CACHE_KIB = 16 << 10


#: A per-row update of ``words`` (parameters ``(value, id)``, rows sorted by id) and its two bulk
#: forms: ``UPDATE ... FROM bpe_store_rows``, and ONE pass over ``words`` in id order, each row's
#: value found among the rows (``bpe_store_lookup``, native/bulk_rows.h) and the row updated where
#: the scan stands. Why the scan when many rows change (a final checkpoint: nearly every word):
#: ``UPDATE ... FROM`` first copies every row into an ephemeral table, then seeks each word
#: (the final checkpoint of a 12 GB OWT-like corpus, 7.0 M words: 8.2-9.0 -> 5.8-6.1 s, alternated).
#: Why not always: the scan reads every word (~0.1 us each), which pays only once enough changed.
_WORD_TOKENS = ("UPDATE words SET tokens = ? WHERE id = ?",
                "UPDATE words SET tokens = r.p1 FROM bpe_store_rows AS r WHERE words.id = r.p2",
                "UPDATE words SET tokens = bpe_store_lookup(id) WHERE bpe_store_lookup(id) IS NOT NULL")


#: A merge checkpoint's statements, in the order ``write_merge_rows`` runs them: each per row
#: (the parameters of ``bpe_store.training.merge.CheckpointRows``) and as one bulk statement over
#: ``bpe_store_rows`` (see ``BulkWriter.executemany``), which must make the same change. Their rows:
#: merges ``(rank, left, right, token, count)``; vocabulary ``(id, bytes)``; word tokens ``(packed
#: tokens, word id)``; pair deletes ``(left, right)``; pair updates ``(count, left, right)`` for
#: pairs the store holds; pair inserts ``(left, right, count)`` for pairs it lacks. Why plain
#: INSERT/UPDATE rather than INSERT OR REPLACE: a replace deletes and re-inserts the row and both its
#: index entries; an update touches the row in place, and a wrong belief about what the store holds
#: fails loudly instead of silently.
_MERGE_CHECKPOINT: tuple[tuple[str, str], ...] = (
    ('INSERT INTO merges (rank, "left", "right", token, count) VALUES (?, ?, ?, ?, ?)',
     'INSERT INTO merges (rank, "left", "right", token, count) SELECT p1, p2, p3, p4, p5 FROM bpe_store_rows'),
    ("INSERT INTO vocab (id, bytes, kind) VALUES (?, ?, 'merge')",
     "INSERT INTO vocab (id, bytes, kind) SELECT p1, p2, 'merge' FROM bpe_store_rows"),
    _WORD_TOKENS[:2],
    ('DELETE FROM pair_counts WHERE "left" = ? AND "right" = ?',
     'DELETE FROM pair_counts WHERE ("left", "right") IN (SELECT p1, p2 FROM bpe_store_rows)'),
    ('UPDATE pair_counts SET count = ? WHERE "left" = ? AND "right" = ?',
     'UPDATE pair_counts SET count = r.p1 FROM bpe_store_rows AS r'
     ' WHERE pair_counts."left" = r.p2 AND pair_counts."right" = r.p3'),
    ('INSERT INTO pair_counts ("left", "right", count) VALUES (?, ?, ?)',
     'INSERT INTO pair_counts ("left", "right", count) SELECT p1, p2, p3 FROM bpe_store_rows'),
)


class MergingRows:
    """Merging's rows (a part of ``Store``: needs its connections, ``sql`` and transactions)."""

    def start_merging(self, pairs: PairCounts | None, elapsed_s: float, words: str | None = None) -> None:
        """One transaction: counting is over; write the initial pair counts and move to merging.

        ``pairs`` None (a reader pins the WAL): no pair rows (and no ``words_by_count`` index) are
        written, only the move to merging; ``pair_counts`` stays empty (``pairs_merges`` NULL while
        merging), which a resume recounts from the words (``merge_step.load_engine``) and the first
        full checkpoint fills (the engine's ``forget_stored_pairs``). Records the words' digest
        (``store.words_digest``): from here on they do not change. ``words``: that digest when the
        caller has the words the store holds (``words_digest.of_counter``), else it reads them."""
        words = words or words_digest.of_table(self)
        with self.transaction():
            self.sql("DELETE FROM pair_counts")
            if pairs is not None:
                self.executemany('INSERT INTO pair_counts ("left", "right", count) VALUES (?, ?, ?)',
                                 [(a, b, c) for (a, b), c in pairs.items()])
            self.sql("UPDATE run SET phase = 'merging', state_merges = 0, pairs_merges = ?, updated_at = ?"
                     " WHERE id = 1", (None if pairs is None else 0, now()))
            if pairs is not None:
                self._index_words_by_count()
            self.add_checkpoint_row("merging", 0, elapsed_s, None, words_digest=words)
        self._words = None  # counting is over; free the map
        self._fresh_rows = None

    def _index_words_by_count(self, w: BulkWriter | None = None) -> None:
        """Build ``words_by_count`` if the store is big enough and lacks it (see WORDS_BY_COUNT)."""
        w = w or BulkWriter(self, None)
        if w.execute("SELECT coalesce(max(id), 0) FROM words")[0][0] >= WORDS_BY_COUNT_MIN:
            w.execute(WORDS_BY_COUNT.replace("INDEX", "INDEX IF NOT EXISTS", 1))

    def count_merges(self) -> int:
        return self.sql("SELECT count(*) FROM merges").scalar()

    def has_pair_counts(self) -> bool:
        return bool(self.sql("SELECT EXISTS (SELECT 1 FROM pair_counts)").scalar())

    def load_merges(self) -> list[tuple[int, int, int, int, int]]:
        """``[(rank, left, right, token, count)]`` in rank order."""
        return self.sql('SELECT rank, "left", "right", token, count FROM merges ORDER BY rank').fetchall()

    def state_merges(self) -> int | None:
        """How many merges ``words.tokens`` and ``pair_counts`` reflect: the first ones of
        ``merges``, which may hold more (logged after the last full checkpoint); None once they
        are not kept (a finished run: ``pair_counts`` empty, tokens only for the most frequent
        words, see ``write_merge_rows``)."""
        return self.sql("SELECT state_merges FROM run WHERE id = 1").scalar()

    def pairs_merges(self) -> int | None:
        """How many merges the rows of ``pair_counts`` follow: every live pair while merging (then
        ``state_merges``), the most frequent ones once done (``merge_step.KEEP_PAIR_COUNTS``); None when
        the store holds none (counting is not over, or an older bpe_store finished it)."""
        return self.sql("SELECT pairs_merges FROM run WHERE id = 1").scalar()

    def load_vocab(self, check_lengths: bool = True) -> list[tuple[int, bytes, str]]:
        """``[(id, bytes, kind)]`` in id order, once ``check_vocab_lengths`` passed (``check_lengths``
        False: a caller that wrote every row itself, ``read_result``'s ``checked``)."""
        if check_lengths:
            self.check_vocab_lengths()
        return self.sql("SELECT id, bytes, kind FROM vocab ORDER BY id").fetchall()

    def check_vocab_lengths(self) -> None:
        """Refuse (StoreError) a vocabulary row longer than what made it (a byte: 1; a special
        token: the run's longest), or a merge's token not as long as its two parts (the lowest
        rank: a later one may only be the length of a part changed), before any token is read.

        Why here: ``result_check`` compares the tokens' bytes, so it read a token tampered to 300 MB
        whole first (613 MB RSS for a refusal). SQLite's ``length()`` of a blob reads its size from
        the record, not its bytes, so these queries cost the vocabulary's size, not its tokens'
        (enwiki-100M's 31.7 K merges: 0.027 CPU s; the tampered export's peak RSS 614 -> 42 MB). A
        shorter row, and every other fault, is ``result_check``'s to say."""
        try:
            specials = [s.encode("utf-8") for s in json.loads(self.sql(
                "SELECT special_tokens FROM run WHERE id = 1").scalar() or "[]")]
        except (TypeError, ValueError, AttributeError, RecursionError):
            return  # a damaged run row: the store's open refuses it (params.check_run)
        row = self.sql("SELECT id, length(bytes) FROM vocab WHERE (kind = 'byte' AND length(bytes) > 1)"
                       " OR (kind = 'special' AND length(bytes) > ?) LIMIT 1",
                       (max(map(len, specials), default=0),)).first()
        if row is None:
            row = self.sql(
                'SELECT v.id, length(v.bytes), m.rank, length(l.bytes), length(r.bytes) FROM merges m'
                ' JOIN vocab v ON v.id = m.rank + ? JOIN vocab l ON l.id = m."left" JOIN vocab r ON r.id = m."right"'
                " WHERE length(v.bytes) != length(l.bytes) + length(r.bytes) ORDER BY m.rank LIMIT 1",
                (len(specials) + 256,)).first()
        if row is not None:
            made_of = "" if len(row) == 2 else f" (merge {row[2]} joins tokens of {row[3]} and {row[4]} bytes)"
            raise StoreError(f"{self.path}: the store is inconsistent (vocab id {row[0]} holds {row[1]} bytes, "
                             f"not the length of what made it{made_of}); start over with --restart")

    def load_pair_counts(self) -> PairCounts:
        return {(a, b): c for a, b, c in self.sql('SELECT "left", "right", count FROM pair_counts')}

    def pair_counts_digest(self) -> tuple[int, int, int]:
        """``(rows, digest 1, digest 2)`` of ``pair_counts``, computed inside SQLite in one scan; equal
        to ``bpe_store.training.merge.pair_digest_of`` of the engine's live pairs when the store is
        consistent (a stray row with count 0 changes the row count, so it is caught too).
        Every term is reduced below a prime, so the sums cannot overflow SQLite's 64-bit integers."""
        n, h1, h2 = self.sql(
            'SELECT count(*),'
            ' coalesce(sum((("left" * 65599 + "right") % 2147483647) * (count % 2147483647) % 2147483647), 0),'
            ' coalesce(sum((("left" * 1000003 + "right" * 7 + 11) % 1000000007) * (count % 1000000007)'
            ' % 1000000007), 0)'
            ' FROM pair_counts').one()
        return int(n), int(h1), int(h2)

    def _digest_after(self, merges: Sequence[tuple[int, int, int, int, int]]) -> tuple[int, Any]:
        """``(merges hashed, hash)`` of the merge log once ``merges`` (the next ranks) are added.
        The running hash is kept between writes; read from the store when this connection has none
        yet (or it lags: a write failed), ~20 ms for 32 K merges. Not kept until the write commits."""
        first = merges[0][0] if len(merges) else None
        have = self._merge_hash
        if have is None or (first is not None and have[0] != first):
            rows = self.sql('SELECT rank, "left", "right", token, count FROM merges WHERE rank < ? ORDER BY rank',
                            (first if first is not None else 1 << 62,)).fetchall()
            have = (len(rows), digest.update(digest.new_hash(), rows))
        h = have[1].copy()
        return have[0] + len(merges), digest.update(h, merges)

    def write_merge_rows(
        self,
        merges: Sequence[tuple[int, int, int, int, int]],
        new_vocab: Sequence[tuple[int, bytes]],
        word_rows: Sequence[tuple[bytes, int]],
        pair_deletes: Sequence[tuple[int, int]],
        pair_inserts: Sequence[tuple[int, int, int]] = (),
        pair_updates: Sequence[tuple[int, int, int]] = (),
        *,
        merges_done: int,
        elapsed_s: float,
        done_reason: str | None,
        log_only: bool = False,
        clear_pairs: bool = False,
        drop_state: bool = False,
        next_pairs: Sequence[tuple[int, int, int]] | None = None,
    ) -> float:
        """The merge checkpoint, ONE transaction: merges, vocab, changed words' tokens, changed
        pair counts, progress. Returns the seconds the write took.

        ``log_only``: the merges, their vocabulary and the progress only (no word or pair rows):
        ``run.state_merges`` stays, and a resume replays the merges after it on the words.
        Otherwise ``state_merges`` becomes ``merges_done``; ``clear_pairs`` (the engine's
        ``rewrite_pairs``) empties ``pair_counts`` first, its rows then being every live pair.
        ``drop_state`` (the last write of a finished run): the merging's working state is not
        kept: ``pair_counts`` emptied but for ``pair_inserts`` (the most frequent pairs',
        ``merge_step.KEEP_PAIR_COUNTS``), ``words.tokens`` NULL but those of ``word_rows`` (the most
        frequent words', ``merge_step.KEEP_WORD_TOKENS``), ``state_merges`` NULL. Every write but a
        ``log_only`` one sets ``pairs_merges`` to ``merges_done``; ``next_pairs`` (with ``log_only``:
        stage 2's checkpoints) replaces ``pair_counts`` with those rows (``write_next_pairs``).

        Rows come in the order of each statement's parameters (see ``_MERGE_CHECKPOINT``).
        """
        t0 = time.perf_counter()
        hashed = self._digest_after(merges)
        if hashed[0] != merges_done:
            raise RuntimeError(f"bpe_store bug: a checkpoint of {merges_done} merges holds {hashed[0]}")
        _check_checkpoint_kind(word_rows, pair_deletes, pair_inserts, pair_updates, log_only, drop_state)
        with self.bulk_transaction() as w:
            w.execute(f"PRAGMA cache_size = -{CHECKPOINT_CACHE_KIB}")  # see CHECKPOINT_CACHE_KIB
            if clear_pairs or drop_state:
                w.execute("DELETE FROM pair_counts")
            if drop_state:
                _drop_word_tokens(w)
                self._index_words_by_count(w)  # when the start of merging could not (start_merging)
            _write_checkpoint_rows(w, (merges, new_vocab, word_rows, pair_deletes, pair_updates, pair_inserts))
            phase = _advance_run(w, done_reason, merges_done, log_only, drop_state)
            if next_pairs is not None:
                _replace_next_pairs(w, next_pairs, merges_done)
            self.add_checkpoint_row(phase, merges_done, elapsed_s, time.perf_counter() - t0, w,
                                    hashed[1].hexdigest())
            self._pause_in_checkpoint(log_only)
        self._merge_hash = hashed  # committed
        return time.perf_counter() - t0

    def write_next_pairs(self, pairs: Sequence[tuple[int, int, int]], merges_done: int) -> None:
        """ONE transaction: ``pair_counts`` becomes ``pairs`` (``[(left, right, count)]``), the most
        frequent pairs after ``merges_done`` merges (``pairs_merges``). SuperBPE's stage 2 (a
        superword store) writes them as its merging starts and with each checkpoint, which
        otherwise logs merges only (``merge_step.STAGE2_NEXT_PAIRS``)."""
        with self.bulk_transaction() as w:
            _replace_next_pairs(w, pairs, merges_done)

    def _pause_in_checkpoint(self, log_only: bool) -> None:
        """Tests: a kill inside the N-th merge log's or checkpoint's transaction, all its rows written."""
        if log_only:
            self._merge_logs += 1
            _test_pause(f"merge_log:{self._merge_logs}")
        else:
            self._merge_checkpoints += 1
            _test_pause(f"checkpoint:{self._merge_checkpoints}")


def _replace_next_pairs(w: BulkWriter, pairs: Sequence[tuple[int, int, int]], merges_done: int) -> None:
    """``pair_counts`` replaced by ``pairs``, which follow ``merges_done`` merges (see
    ``write_next_pairs``); a few thousand rows at most."""
    w.execute("DELETE FROM pair_counts")
    if len(pairs):
        w.executemany('INSERT INTO pair_counts ("left", "right", count) VALUES (?, ?, ?)', pairs,
                      _MERGE_CHECKPOINT[5][1])
    w.execute("UPDATE run SET pairs_merges = ? WHERE id = 1", (merges_done,))


def _check_checkpoint_kind(word_rows: Sequence, pair_deletes: Sequence, pair_inserts: Sequence,
                           pair_updates: Sequence, log_only: bool, drop_state: bool) -> None:
    """Refuse (a bug) rows a merge log or a finished run's last write cannot hold."""
    pair_rows = len(pair_deletes) + len(pair_inserts) + len(pair_updates)
    if log_only and (len(word_rows) or pair_rows):
        raise ValueError("a merge log checkpoint holds no word or pair rows")
    if drop_state and (log_only or len(pair_deletes) or len(pair_updates)):
        raise ValueError("a finished run's last write holds no pair rows but its kept pairs")


def _drop_word_tokens(w: BulkWriter) -> None:
    """Every word's tokens NULL (a finished run's last write, before the kept words' are written).
    Why look first: when no checkpoint wrote tokens (state 0: a run whose merging was shorter than
    checkpoint_seconds) the UPDATE would scan every word for nothing."""
    if w.execute("SELECT coalesce(state_merges, 1) FROM run WHERE id = 1")[0][0] != 0:
        w.execute("UPDATE words SET tokens = NULL WHERE tokens IS NOT NULL")


def _write_checkpoint_rows(w: BulkWriter, rows_of: tuple[Sequence, ...]) -> None:
    """Each of ``_MERGE_CHECKPOINT``'s statements over its rows (``rows_of``, in that order); the
    word tokens' by the lookup scan or ``UPDATE ... FROM``, by how many changed."""
    for (statement, bulk), rows in zip(_MERGE_CHECKPOINT, rows_of):
        if not len(rows):
            continue
        if statement == _WORD_TOKENS[0]:
            bulk = words_bulk(w, len(rows), _WORD_TOKENS)
        w.executemany(statement, rows, bulk)


def _advance_run(w: BulkWriter, done_reason: str | None, merges_done: int, log_only: bool,
                 drop_state: bool) -> str:
    """The run row after a merge write: its phase (returned), why it stopped, and which merges the
    words' tokens and the pair counts follow (a merge log leaves both as they were)."""
    phase = "done" if done_reason else "merging"
    if log_only:
        w.execute("UPDATE run SET phase = ?, stop_reason = ?, updated_at = ? WHERE id = 1",
                  (phase, done_reason, now()))
    else:
        w.execute("UPDATE run SET phase = ?, stop_reason = ?, state_merges = ?, pairs_merges = ?,"
                  " updated_at = ? WHERE id = 1",
                  (phase, done_reason, None if drop_state else merges_done, merges_done, now()))
    return phase
