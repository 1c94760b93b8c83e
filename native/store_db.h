// What the store's native bulk path (store_db.cpp) reads from the other native parts without a
// Python object per row: a merge checkpoint's rows as flat arrays (merge_engine.h's RowStream).
#pragma once

#include <nanobind/nanobind.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

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

// merge_rows.cpp: fills `out` when `obj` is a MergeEngine.take_checkpoint_rows() stream that
// has not been iterated (and marks it used up: its rows are written once); false otherwise.
bool checkpoint_rows_view(nanobind::handle obj, CheckpointRowsView &out);

// Every word row of a store, (id, bytes, count, tokens or NULL) in id order, read by
// StoreDb.read_word_rows into one buffer for the merge engine (MergeEngine(WordRows, ...)).
// Why: a resume used to make a Python tuple of 4 objects per word (7 M words at OpenWebText
// scale) only for the engine to copy them. Layout per row: {i64 id, i64 count, u32 nbytes,
// u32 ntokbytes or kNull} then the word's bytes, then its token blob.
struct WordRows {
    static constexpr uint32_t kNull = 0xFFFFFFFFu;
    static constexpr size_t kHeader = 24;
    struct Row {
        int64_t id, count;
        const uint8_t *bytes, *tokens;  // tokens: nullptr for NULL (still single bytes)
        size_t nbytes, ntokbytes;
    };
    std::vector<uint8_t> data;
    size_t n = 0;

    // Row i; rows are read in order (0, 1, 2, ..., and again from 0), so a cursor finds them.
    Row row(size_t i) const {
        if (i == 0) at_ = 0, next_ = 0;
        if (i != next_ || at_ + kHeader > data.size()) throw std::logic_error("WordRows are read in order");
        Row r;
        uint32_t nb, nt;
        std::memcpy(&r.id, &data[at_], 8);
        std::memcpy(&r.count, &data[at_ + 8], 8);
        std::memcpy(&nb, &data[at_ + 16], 4);
        std::memcpy(&nt, &data[at_ + 20], 4);
        r.bytes = data.data() + at_ + kHeader;
        r.nbytes = nb;
        r.tokens = nt == kNull ? nullptr : r.bytes + nb;
        r.ntokbytes = nt == kNull ? 0 : nt;
        at_ += kHeader + nb + r.ntokbytes;
        ++next_;
        return r;
    }

  private:
    mutable size_t at_ = 0, next_ = 0;
};
