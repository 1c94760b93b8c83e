// What the store's native bulk path (store_db.cpp) reads from the other native parts without a
// Python object per row: a merge checkpoint's rows as flat arrays (merge_engine.cpp's RowStream).
#pragma once

#include <nanobind/nanobind.h>

#include <cstddef>
#include <cstdint>

// One checkpoint statement's rows in memory, in the order of the statement's parameters:
// kWords (token blob, word id): row i's tokens are toks[a[i] .. a[i+1]), c[i] its word id;
// kDeletes (left, right) = (a[i], b[i]); kInserts (left, right, count) = (a[i], b[i], c[i]);
// kUpdates (count, left, right) = (c[i], a[i], b[i]). Valid while the stream object lives.
struct CheckpointRowsView {
    enum Kind { kWords, kDeletes, kInserts, kUpdates };
    Kind kind;
    size_t n;
    const uint32_t *toks;
    const uint64_t *a;
    const uint32_t *b;
    const int64_t *c;
};

// merge_engine.cpp: fills `out` when `obj` is a MergeEngine.take_checkpoint_rows() stream that
// has not been iterated (and marks it used up: its rows are written once); false otherwise.
bool checkpoint_rows_view(nanobind::handle obj, CheckpointRowsView &out);
