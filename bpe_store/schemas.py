"""The schema of every store revision, as SQLite holds it (``sqlite_master``): GENERATED.

Do not edit: ``python tools/gen_schemas.py`` writes this file by running the Alembic migrations
in ``migrations/`` (the schema's only source) up to each revision; ``tests/test_store_create.py``
checks that it still equals what they produce. ``bpe_store.store`` creates a new store from
``SCHEMAS[HEAD]`` without importing Alembic, and refuses to open a store whose schema is not
exactly its revision's (an extra trigger, view or index would run code the store's author chose).
"""

#: Revisions, oldest first; the last is the head.
REVISIONS: tuple[str, ...] = ('v0_1_0_initial', 'v0_2_0_sessions')
HEAD = 'v0_2_0_sessions'

#: ``{revision: ((type, name, tbl_name, sql or None), ...)}`` in creation order (``sqlite_master`` rowid order).
SCHEMAS: dict[str, tuple[tuple[str, str, str, str | None], ...]] = {
    'v0_1_0_initial': (
        ('table', 'alembic_version', 'alembic_version',
         'CREATE TABLE alembic_version (\n\tversion_num VARCHAR(32) NOT NULL, \n\tCONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)\n)'),
        ('index', 'sqlite_autoindex_alembic_version_1', 'alembic_version',
         None),
        ('table', 'run', 'run',
         "CREATE TABLE run (\n        id INTEGER PRIMARY KEY CHECK (id = 1),\n        pattern TEXT NOT NULL,\n        special_tokens TEXT NOT NULL,          -- JSON list of strings, in vocabulary order\n        vocab_size INTEGER NOT NULL,           -- the target; may be raised to continue\n        invalid_utf8 TEXT NOT NULL DEFAULT 'strict',\n        phase TEXT NOT NULL CHECK (phase IN ('counting', 'merging', 'done')),\n        stop_reason TEXT,                      -- 'vocab_size' or 'no_pairs' once done\n        chunk_size INTEGER NOT NULL,\n        created_at TEXT NOT NULL,\n        updated_at TEXT NOT NULL,\n        bpe_store_version TEXT NOT NULL\n    )"),
        ('table', 'sources', 'sources',
         'CREATE TABLE sources (\n        id INTEGER PRIMARY KEY,\n        path TEXT NOT NULL,                    -- absolute path when the run started\n        size INTEGER NOT NULL,\n        mtime_ns INTEGER NOT NULL,\n        sha256 TEXT NOT NULL\n    )'),
        ('table', 'chunks', 'chunks',
         'CREATE TABLE chunks (\n        id INTEGER PRIMARY KEY,\n        source_id INTEGER NOT NULL REFERENCES sources(id),\n        start INTEGER NOT NULL,\n        "end" INTEGER NOT NULL,\n        counted INTEGER NOT NULL DEFAULT 0,    -- 1 once its words are in `words`\n        pretokens INTEGER                      -- pre-tokens it held (64-bit)\n    )'),
        ('table', 'words', 'words',
         'CREATE TABLE words (\n        id INTEGER PRIMARY KEY,\n        bytes BLOB NOT NULL,\n        count INTEGER NOT NULL,\n        tokens BLOB\n    )'),
        ('table', 'pair_counts', 'pair_counts',
         'CREATE TABLE pair_counts (\n        "left" INTEGER NOT NULL,\n        "right" INTEGER NOT NULL,\n        count INTEGER NOT NULL,\n        PRIMARY KEY ("left", "right")\n    ) WITHOUT ROWID'),
        ('index', 'pair_counts_by_count', 'pair_counts',
         'CREATE INDEX pair_counts_by_count ON pair_counts(count DESC)'),
        ('table', 'merges', 'merges',
         'CREATE TABLE merges (\n        rank INTEGER PRIMARY KEY,\n        "left" INTEGER NOT NULL,\n        "right" INTEGER NOT NULL,\n        token INTEGER NOT NULL,                -- the id words use for the result (see vocab)\n        count INTEGER NOT NULL                 -- the pair\'s count when it was merged\n    )'),
        ('table', 'vocab', 'vocab',
         "CREATE TABLE vocab (\n        id INTEGER PRIMARY KEY,\n        bytes BLOB NOT NULL,\n        kind TEXT NOT NULL CHECK (kind IN ('special', 'byte', 'merge'))\n    )"),
        ('table', 'checkpoints', 'checkpoints',
         'CREATE TABLE checkpoints (\n        id INTEGER PRIMARY KEY,\n        at TEXT NOT NULL,\n        phase TEXT NOT NULL,\n        chunks_counted INTEGER NOT NULL,\n        merges_done INTEGER NOT NULL,\n        elapsed_s REAL NOT NULL,               -- training time so far, summed over sessions\n        write_s REAL                           -- how long writing this checkpoint took\n    )'),
        ('view', 'merge_log', 'merge_log',
         'CREATE VIEW merge_log AS\n       SELECT m.rank, CAST(l.bytes AS TEXT) AS "left", CAST(r.bytes AS TEXT) AS "right",\n              CAST(l.bytes || r.bytes AS TEXT) AS token, m.count, m.token AS token_id\n       FROM merges m JOIN vocab l ON l.id = m."left" JOIN vocab r ON r.id = m."right"\n       ORDER BY m.rank'),
        ('view', 'top_pairs', 'top_pairs',
         'CREATE VIEW top_pairs AS\n       SELECT CAST(l.bytes AS TEXT) AS "left", CAST(r.bytes AS TEXT) AS "right", p.count,\n              p."left" AS left_id, p."right" AS right_id\n       FROM pair_counts p JOIN vocab l ON l.id = p."left" JOIN vocab r ON r.id = p."right"\n       ORDER BY p.count DESC, l.bytes DESC, r.bytes DESC'),
        ('view', 'top_words', 'top_words',
         'CREATE VIEW top_words AS\n       SELECT CAST(bytes AS TEXT) AS word, count, length(bytes) AS n_bytes,\n              CASE WHEN tokens IS NULL THEN length(bytes) ELSE length(tokens) / 4 END AS n_tokens\n       FROM words ORDER BY count DESC'),
        ('view', 'vocab_text', 'vocab_text',
         'CREATE VIEW vocab_text AS\n       SELECT id, CAST(bytes AS TEXT) AS token, hex(bytes) AS hex, kind, length(bytes) AS n_bytes\n       FROM vocab ORDER BY id'),
        ('view', 'progress', 'progress',
         'CREATE VIEW progress AS\n       SELECT r.phase,\n              (SELECT count(*) FROM chunks WHERE counted = 1) AS chunks_counted,\n              (SELECT count(*) FROM chunks) AS chunks_total,\n              (SELECT count(*) FROM merges) AS merges_done,\n              r.vocab_size - 256 - json_array_length(r.special_tokens) AS merges_target,\n              (SELECT count(*) FROM words) AS words,\n              (SELECT max(at) FROM checkpoints) AS last_checkpoint\n       FROM run r'),
    ),
    'v0_2_0_sessions': (
        ('table', 'alembic_version', 'alembic_version',
         'CREATE TABLE alembic_version (\n\tversion_num VARCHAR(32) NOT NULL, \n\tCONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)\n)'),
        ('index', 'sqlite_autoindex_alembic_version_1', 'alembic_version',
         None),
        ('table', 'run', 'run',
         "CREATE TABLE run (\n        id INTEGER PRIMARY KEY CHECK (id = 1),\n        pattern TEXT NOT NULL,\n        special_tokens TEXT NOT NULL,          -- JSON list of strings, in vocabulary order\n        vocab_size INTEGER NOT NULL,           -- the target; may be raised to continue\n        invalid_utf8 TEXT NOT NULL DEFAULT 'strict',\n        phase TEXT NOT NULL CHECK (phase IN ('counting', 'merging', 'done')),\n        stop_reason TEXT,                      -- 'vocab_size' or 'no_pairs' once done\n        chunk_size INTEGER NOT NULL,\n        created_at TEXT NOT NULL,\n        updated_at TEXT NOT NULL,\n        bpe_store_version TEXT NOT NULL\n    )"),
        ('table', 'sources', 'sources',
         'CREATE TABLE sources (\n        id INTEGER PRIMARY KEY,\n        path TEXT NOT NULL,                    -- absolute path when the run started\n        size INTEGER NOT NULL,\n        mtime_ns INTEGER NOT NULL,\n        sha256 TEXT NOT NULL\n    )'),
        ('table', 'chunks', 'chunks',
         'CREATE TABLE chunks (\n        id INTEGER PRIMARY KEY,\n        source_id INTEGER NOT NULL REFERENCES sources(id),\n        start INTEGER NOT NULL,\n        "end" INTEGER NOT NULL,\n        counted INTEGER NOT NULL DEFAULT 0,    -- 1 once its words are in `words`\n        pretokens INTEGER                      -- pre-tokens it held (64-bit)\n    )'),
        ('table', 'words', 'words',
         'CREATE TABLE words (\n        id INTEGER PRIMARY KEY,\n        bytes BLOB NOT NULL,\n        count INTEGER NOT NULL,\n        tokens BLOB\n    )'),
        ('table', 'pair_counts', 'pair_counts',
         'CREATE TABLE pair_counts (\n        "left" INTEGER NOT NULL,\n        "right" INTEGER NOT NULL,\n        count INTEGER NOT NULL,\n        PRIMARY KEY ("left", "right")\n    ) WITHOUT ROWID'),
        ('index', 'pair_counts_by_count', 'pair_counts',
         'CREATE INDEX pair_counts_by_count ON pair_counts(count DESC)'),
        ('table', 'merges', 'merges',
         'CREATE TABLE merges (\n        rank INTEGER PRIMARY KEY,\n        "left" INTEGER NOT NULL,\n        "right" INTEGER NOT NULL,\n        token INTEGER NOT NULL,                -- the id words use for the result (see vocab)\n        count INTEGER NOT NULL                 -- the pair\'s count when it was merged\n    )'),
        ('table', 'vocab', 'vocab',
         "CREATE TABLE vocab (\n        id INTEGER PRIMARY KEY,\n        bytes BLOB NOT NULL,\n        kind TEXT NOT NULL CHECK (kind IN ('special', 'byte', 'merge'))\n    )"),
        ('table', 'checkpoints', 'checkpoints',
         'CREATE TABLE checkpoints (\n        id INTEGER PRIMARY KEY,\n        at TEXT NOT NULL,\n        phase TEXT NOT NULL,\n        chunks_counted INTEGER NOT NULL,\n        merges_done INTEGER NOT NULL,\n        elapsed_s REAL NOT NULL,               -- training time so far, summed over sessions\n        write_s REAL                           -- how long writing this checkpoint took\n    )'),
        ('view', 'merge_log', 'merge_log',
         'CREATE VIEW merge_log AS\n       SELECT m.rank, CAST(l.bytes AS TEXT) AS "left", CAST(r.bytes AS TEXT) AS "right",\n              CAST(l.bytes || r.bytes AS TEXT) AS token, m.count, m.token AS token_id\n       FROM merges m JOIN vocab l ON l.id = m."left" JOIN vocab r ON r.id = m."right"\n       ORDER BY m.rank'),
        ('view', 'top_pairs', 'top_pairs',
         'CREATE VIEW top_pairs AS\n       SELECT CAST(l.bytes AS TEXT) AS "left", CAST(r.bytes AS TEXT) AS "right", p.count,\n              p."left" AS left_id, p."right" AS right_id\n       FROM pair_counts p JOIN vocab l ON l.id = p."left" JOIN vocab r ON r.id = p."right"\n       ORDER BY p.count DESC, l.bytes DESC, r.bytes DESC'),
        ('view', 'top_words', 'top_words',
         'CREATE VIEW top_words AS\n       SELECT CAST(bytes AS TEXT) AS word, count, length(bytes) AS n_bytes,\n              CASE WHEN tokens IS NULL THEN length(bytes) ELSE length(tokens) / 4 END AS n_tokens\n       FROM words ORDER BY count DESC'),
        ('view', 'vocab_text', 'vocab_text',
         'CREATE VIEW vocab_text AS\n       SELECT id, CAST(bytes AS TEXT) AS token, hex(bytes) AS hex, kind, length(bytes) AS n_bytes\n       FROM vocab ORDER BY id'),
        ('view', 'progress', 'progress',
         'CREATE VIEW progress AS\n       SELECT r.phase,\n              (SELECT count(*) FROM chunks WHERE counted = 1) AS chunks_counted,\n              (SELECT count(*) FROM chunks) AS chunks_total,\n              (SELECT count(*) FROM merges) AS merges_done,\n              r.vocab_size - 256 - json_array_length(r.special_tokens) AS merges_target,\n              (SELECT count(*) FROM words) AS words,\n              (SELECT max(at) FROM checkpoints) AS last_checkpoint\n       FROM run r'),
        ('table', 'sessions', 'sessions',
         'CREATE TABLE sessions (\n\tid INTEGER NOT NULL, \n\tpid INTEGER, \n\thost TEXT, \n\targv TEXT, \n\tbpe_store_version TEXT, \n\tstarted_at TEXT NOT NULL, \n\tended_at TEXT, \n\toutcome TEXT, \n\tmerges_start INTEGER, \n\tmerges_end INTEGER, \n\tPRIMARY KEY (id)\n)'),
        ('index', 'sessions_by_start', 'sessions',
         'CREATE INDEX sessions_by_start ON sessions (started_at)'),
    ),
}
