"""The store's rows of a run and its inputs: the ``run`` row (parameters, phase), ``sources``,
``chunks`` (the counting plan) and ``checkpoints``. ``RunRows`` is a part of ``Store``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import StoreError
from . import digest
from .bulk import BulkWriter
from .connection import now
from .params import RunParams, check_run

if TYPE_CHECKING:  # pragma: no cover
    from ..text.sources import Source

# text.sources and text.fingerprint are imported where they are used: a reader of a store
# (Tokenizer.from_store) imports this module through Store and needs neither (counting_rows: why).

#: A superword store's stage 1, copied from its base: ``(merge rows (rank, left, right, token,
#: count), their vocabulary rows (id, bytes))``.
StageOne = tuple[Sequence[tuple[int, int, int, int, int]], Sequence[tuple[int, bytes]]]


@dataclass(frozen=True)
class Chunk:
    """A work unit of one source, counted as a whole: ``kind`` is ``range`` (bytes
    ``[start, end)``), ``row_group`` (parquet row group ``part``; start/end its byte extent),
    ``file`` (a compressed file read whole) or ``stream`` (end: bytes counted so far)."""

    id: int
    source_id: int
    start: int
    end: int
    counted: bool
    kind: str = "range"
    part: int | None = None


class RunRows:
    """The run, its inputs and its checkpoints (a part of ``Store``: needs its ``sql`` and transactions)."""

    def init_run(self, params: RunParams, sources: Sequence[Source],
                 chunks: Sequence[tuple[int, int, int] | tuple[int, int, int, str, int | None]],
                 chunk_size: int, version: str, stage1: StageOne | None = None) -> None:
        """Write a new run: parameters, inputs, the counting plan and the initial vocabulary;
        ``stage1``: a superword store's first merges and their vocabulary rows, copied from its base."""
        t = now()
        with self.transaction():
            self.sql("INSERT INTO run (id, pattern, special_tokens, vocab_size, invalid_utf8, phase,"
                     " chunk_size, created_at, updated_at, bpe_store_version, min_frequency, max_token_length,"
                     " max_pretoken_bytes, superword_from, stage1_pattern, superword_max_words)"
                     " VALUES (1, ?, ?, ?, ?, 'counting', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                     (params.pattern, json.dumps(list(params.special_tokens)), params.vocab_size,
                      params.invalid_utf8, chunk_size, t, t, version, params.min_frequency,
                      params.max_token_length, params.max_pretoken_bytes, params.superword_from,
                      params.stage1_pattern, params.superword_max_words))
            self.executemany("INSERT INTO sources (id, path, size, mtime_ns, digest, format, compression,"
                             " text_field, documents, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                             [(i, s.path, s.size, s.mtime_ns, s.digest, s.format, s.compression, s.text_field,
                               s.documents, s.hash) for i, s in enumerate(sources)])
            # (source, start, end) or (source, start, end, kind, part)
            self.executemany('INSERT INTO chunks (source_id, start, "end", kind, part) VALUES (?, ?, ?, ?, ?)',
                             [c if len(c) == 5 else (*c, "range", None) for c in chunks])
            vocab = [(i, s.encode("utf-8"), "special") for i, s in enumerate(params.special_tokens)]
            n = len(vocab)
            vocab += [(n + b, bytes([b]), "byte") for b in range(256)]
            self.executemany("INSERT INTO vocab (id, bytes, kind) VALUES (?, ?, ?)", vocab)
            if stage1 is not None:
                merges, merge_vocab = stage1
                self.executemany("INSERT INTO vocab (id, bytes, kind) VALUES (?, ?, 'merge')", merge_vocab)
                self.executemany('INSERT INTO merges (rank, "left", "right", token, count) VALUES (?, ?, ?, ?, ?)',
                                 merges)
                # a checkpoint recording them (as a based store's, ``write_base``): without one, a kill
                # before the first counting flush committed left stage 1's merges with no digest to
                # match, and every resume was refused ("it holds 400 merges, its newest checkpoint
                # recorded 0")
                self.add_checkpoint_row("counting", 0, 0.0, None)

    def run_row(self) -> dict:
        row = self.sql("SELECT * FROM run WHERE id = 1").mappings().first()
        if row is None:
            held = self.tables_with_rows()
            if held:
                raise StoreError(f"{self.path}: the store has no run but holds data ({', '.join(held[:4])}): "
                                 "damaged or edited; `train --restart` deletes it and starts over")
            raise StoreError(f"{self.path}: the store has no run (it was never started)")
        if not self._run_checked:
            check_run(self.path, row)
            self._run_checked = True
        return row

    def has_run(self) -> bool:
        return self.sql("SELECT 1 FROM run").first() is not None

    def tables_with_rows(self) -> list[str]:
        """The names of the tables that hold a row (the schema version's aside): what deleting this
        store would lose. Reads any store of ours, however unfinished or damaged its schema."""
        names = [r[0] for r in self.db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        return [n for n in names if n != "alembic_version"
                and self.db.execute(f'SELECT 1 FROM "{n.replace(chr(34), chr(34) * 2)}" LIMIT 1').fetchone()]

    def params(self) -> RunParams:
        r = self.run_row()
        return RunParams(r["pattern"], tuple(json.loads(r["special_tokens"])), r["vocab_size"],
                         r["invalid_utf8"], r["min_frequency"], r["max_token_length"],
                         max_pretoken_bytes=r.get("max_pretoken_bytes"), superword_from=r.get("superword_from"),
                         stage1_pattern=r.get("stage1_pattern"), superword_max_words=r.get("superword_max_words"))

    def stage1_log(self) -> tuple[int, str]:
        """``(merges, digest)`` of the merges a store starts with, what its checkpoints before its
        first merge record: a superword store's stage 1 (copied when it was made), a based store's
        base (``base_rows``); ``(0, EMPTY)`` in any other store. Read once per connection."""
        if self._stage1_log is None:
            t = self.sql("SELECT superword_from FROM run WHERE id = 1").scalar()
            if not t and self.sql("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'base'").first():
                t = self.sql("SELECT merges FROM base WHERE id = 1").scalar()
            rows = self.sql('SELECT rank, "left", "right", token, count FROM merges WHERE rank < ? ORDER BY rank',
                            (t,)).fetchall() if t else []
            self._stage1_log = (len(rows), digest.merge_digest(rows))
        return self._stage1_log

    def sources(self) -> list[Source]:
        from ..text.sources import Source

        return [Source(*r) for r in self.sql("SELECT path, size, mtime_ns, digest, format, compression,"
                                             " text_field, documents, hash FROM sources ORDER BY id")]

    def unit_sources(self) -> dict[int, int]:
        """``{chunk id: source id}`` of every work unit."""
        return dict(self.sql("SELECT id, source_id FROM chunks").fetchall())

    def chunks(self) -> list[Chunk]:
        return [Chunk(r[0], r[1], r[2], r[3], bool(r[4]), r[5], r[6]) for r in
                self.sql('SELECT id, source_id, start, "end", counted, kind, part FROM chunks ORDER BY id')]

    def check_plan(self) -> None:
        """Refuse (StoreError) inputs and chunks that bpe_store could not have written (text where
        numbers belong, negative sizes, a chunk outside its input)."""
        from ..text.fingerprint import HASHES

        bad_sources, bad_chunks = self.sql(
            "SELECT (SELECT count(*) FROM sources WHERE typeof(path) != 'text' OR typeof(size) != 'integer'"
            " OR size < 0 OR typeof(mtime_ns) != 'integer' OR typeof(digest) != 'text'"
            f" OR hash NOT IN ({', '.join(repr(h) for h in HASHES)})"
            " OR format NOT IN ('text', 'jsonl', 'parquet', 'iterable')"
            " OR compression NOT IN ('none', 'gz', 'zst', 'bz2', 'xz')),"
            ' (SELECT count(*) FROM chunks c WHERE typeof(start) != \'integer\' OR typeof("end") != \'integer\''
            " OR kind NOT IN ('range', 'row_group', 'file', 'stream')"
            ' OR start < 0 OR "end" < start OR counted NOT IN (0, 1) OR typeof(counted) != \'integer\''
            ' OR "end" > coalesce((SELECT size FROM sources s WHERE s.id = c.source_id), -1))').one()
        if bad_sources or bad_chunks:
            raise StoreError(f"{self.path}: the store's inputs or chunks are damaged ({bad_sources} input rows, "
                             f"{bad_chunks} chunk rows); start over with --restart")

    def set_vocab_size(self, vocab_size: int) -> None:
        with self.transaction():
            self.sql("UPDATE run SET vocab_size = ?, phase = CASE WHEN phase = 'done' THEN 'merging'"
                     " ELSE phase END, stop_reason = NULL, updated_at = ? WHERE id = 1", (vocab_size, now()))

    def elapsed(self) -> float:
        v = self.sql("SELECT elapsed_s FROM checkpoints ORDER BY id DESC LIMIT 1").scalar()
        return float(v or 0.0)

    def checkpoint_stages(self) -> list[tuple[str, int, float, float]]:
        """``(phase, checkpoints, the last's training time, seconds spent writing)`` per phase."""
        return self.sql("SELECT phase, count(*), max(elapsed_s), coalesce(sum(write_s), 0) FROM checkpoints"
                        " GROUP BY phase").fetchall()

    def add_checkpoint_row(self, phase: str, merges_done: int, elapsed_s: float, write_s: float | None,
                           writer: BulkWriter | None = None, merge_digest: str = digest.EMPTY,
                           words_digest: str | None = None) -> None:
        """The ``checkpoints`` row of a write (inside its transaction; ``writer``: its bulk writer),
        with the digest of the ``merges_done`` merges the store holds once it commits; before any
        merge of its own (``merges_done`` 0), a superword store holds its stage 1's (``stage1_log``).
        ``words_digest``: the words' (``store.words_digest``), given when counting ends; None
        carries the previous checkpoint's (the words do not change after counting)."""
        if merges_done == 0 and merge_digest == digest.EMPTY:
            merges_done, merge_digest = self.stage1_log()
        (writer or BulkWriter(self, None)).execute(
            "INSERT INTO checkpoints (at, phase, chunks_counted, merges_done, elapsed_s, write_s, merge_digest,"
            " words_digest) VALUES (?, ?, (SELECT count(*) FROM chunks WHERE counted = 1), ?, ?, ?, ?,"
            " coalesce(?, (SELECT words_digest FROM checkpoints ORDER BY id DESC LIMIT 1)))",
            (now(), phase, merges_done, elapsed_s, write_s, merge_digest, words_digest))
