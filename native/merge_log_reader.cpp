// bpe_store._core.read_merge_log: a store's merge log, vocabulary, base ids and newest checkpoint
// read natively in one read transaction, into flat arrays (MergeLog), and checked as
// bpe_store/store/result.py's result_check and base_rows.model_ids check them.
//
// Why: loading a tokenizer from a store (Tokenizer.from_store) was mostly reading rows through
// Python's sqlite3 driver (a tuple per row) and building tables from them in Python: a 32K store
// 0.39 CPU s, an extended o200k_base store (216 K merges) 3.6, against tiktoken's 0.06 / 0.70 on
// the same ranks. Here the rows go straight from sqlite3_column_* into arrays, the checks run over
// the arrays, and the encoder's tables are made from them (merge_ids, byte_ids, vocab).
//
// What it is not: the judge of a damaged store. `check` says only whether everything is as
// bpe_store writes it (at least as strictly as the Python checks); when it is not, the caller reads
// the store through Python again, whose checks say what is wrong (bpe_store/store/merge_log.py).
// Values longer than `max_value_bytes` are refused by SQLite itself (SQLITE_LIMIT_LENGTH), so a
// token tampered to hundreds of MB is never read whole (merging_rows.check_vocab_lengths' reason).
//
// It uses the one SQLite of the process (sqlite_api.h: why), opened read-only on the store's path.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "sqlite_api.h"

namespace nb = nanobind;

namespace {

using namespace bpe::sqlite;

constexpr int kNull = 5;  // SQLITE_NULL

// kinds of vocabulary rows
constexpr uint8_t kSpecial = 0, kByte = 1, kMerge = 2, kOther = 3;

struct Checkpoint {
    i64 merges_done = 0;
    bool has_digest = false;
    std::string digest;
};

struct Base {
    i64 tokens = 0, shift = 0, next_id = 0;
};

// What read_merge_log gives: every row as it is stored, in rank / id order.
struct MergeLog {
    std::vector<i64> merges;  // 5 per merge: rank, left, right, token, count
    bool merges_typed = true;  // every merge value an integer (SQLite's type)
    std::vector<i64> vocab_ids;
    std::vector<uint8_t> kinds;  // kSpecial, kByte, kMerge or kOther
    std::string blob;  // the tokens' bytes, one after another
    std::vector<size_t> offsets{0};  // token i is blob[offsets[i], offsets[i + 1])
    bool vocab_typed = true;  // ids integers, bytes blobs, kinds text
    bool has_checkpoint = false;
    Checkpoint checkpoint;
    bool has_base = false;
    Base base;
    std::vector<i64> base_ids, base_model_ids;
    bool base_typed = true;
    std::vector<i64> model;  // the model id of each vocabulary row (filled by check)

    size_t n_merges() const { return merges.size() / 5; }
    size_t n_vocab() const { return vocab_ids.size(); }
    std::string_view token(size_t i) const { return {blob.data() + offsets[i], offsets[i + 1] - offsets[i]}; }
};

// A read-only connection, closed however the read ends.
struct Reader {
    sqlite3 *db = nullptr;
    sqlite3_stmt *st = nullptr;
    ~Reader() {
        if (st) api.finalize(st);
        if (db) api.close_v2(db);
    }
    SqliteFailure failed(int rc) const { return {rc, db ? api.errmsg(db) : "unable to open database file"}; }
    void open(const std::string &path, int max_value_bytes) {
        int rc = open_store_read_only(path, max_value_bytes, &db);
        if (rc != kOk) throw failed(rc);
    }
    // Prepares `sql` as the current statement (the previous one finalized).
    void prepare(const char *sql) {
        if (st) api.finalize(st);
        st = nullptr;
        int rc = api.prepare_v2(db, sql, -1, &st, nullptr);
        if (rc != kOk) throw failed(rc);
    }
    // Steps the current statement: true for a row, false when done.
    bool row() {
        int rc = api.step(st);
        if (rc == kRow) return true;
        if (rc == kDone) return false;
        throw failed(rc);
    }
    void run(const char *sql) {
        prepare(sql);
        while (row()) {
        }
    }
    bool integer(int c) const { return api.column_type(st, c) == 1 /* SQLITE_INTEGER */; }
    i64 i(int c) const { return api.column_int64(st, c); }
    std::string_view text(int c) const {
        const auto *p = reinterpret_cast<const char *>(api.column_text(st, c));
        return p ? std::string_view(p, size_t(api.column_bytes(st, c))) : std::string_view();
    }
};

uint8_t kind_of(std::string_view k) {
    if (k == "special") return kSpecial;
    if (k == "byte") return kByte;
    if (k == "merge") return kMerge;
    return kOther;
}

void read_merges(Reader &r, MergeLog &log) {
    r.prepare("SELECT rank, \"left\", \"right\", token, count FROM merges ORDER BY rank");
    while (r.row()) {
        for (int c = 0; c < 5; ++c) {
            log.merges_typed = log.merges_typed && r.integer(c);
            log.merges.push_back(r.i(c));
        }
    }
}

void read_vocab(Reader &r, MergeLog &log) {
    r.prepare("SELECT id, bytes, kind FROM vocab ORDER BY id");
    while (r.row()) {
        const bool blob = api.column_type(r.st, 1) == kBlob;
        log.vocab_typed = log.vocab_typed && r.integer(0) && blob && api.column_type(r.st, 2) == kText;
        log.vocab_ids.push_back(r.i(0));
        if (blob) {
            const void *p = api.column_blob(r.st, 1);
            const size_t n = size_t(api.column_bytes(r.st, 1));
            if (n) log.blob.append(static_cast<const char *>(p), n);
        }
        log.offsets.push_back(log.blob.size());
        log.kinds.push_back(api.column_type(r.st, 2) == kText ? kind_of(r.text(2)) : kOther);
    }
}

void read_checkpoint(Reader &r, MergeLog &log) {
    r.prepare("SELECT merges_done, merge_digest FROM checkpoints ORDER BY id DESC LIMIT 1");
    if (!r.row()) return;
    log.has_checkpoint = true;
    // a merges_done that is not an integer never equals a count of merges: -1 says so
    log.checkpoint.merges_done = r.integer(0) ? r.i(0) : -1;
    log.checkpoint.has_digest = api.column_type(r.st, 1) == kText;
    if (log.checkpoint.has_digest) log.checkpoint.digest = std::string(r.text(1));
}

// The base row and its ids, where the schema has them (older stores have no base tables).
void read_base(Reader &r, MergeLog &log) {
    r.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'base'");
    if (!r.row()) return;
    r.prepare("SELECT tokens, shift, next_id FROM base WHERE id = 1");
    if (!r.row()) return;
    log.has_base = true;
    log.base_typed = r.integer(0) && r.integer(1) && r.integer(2);
    log.base = Base{r.i(0), r.i(1), r.i(2)};
    r.prepare("SELECT id, model_id FROM base_ids ORDER BY id");
    while (r.row()) {
        log.base_typed = log.base_typed && r.integer(0) && r.integer(1);
        log.base_ids.push_back(r.i(0));
        log.base_model_ids.push_back(r.i(1));
    }
}

// Every table in one read transaction: the rows agree with each other and with the checkpoint
// even while a training writes to the store.
MergeLog *read_merge_log(const std::string &path, int max_value_bytes) {
    if (!api_loaded) throw std::runtime_error("read_merge_log: store_db_load() was not called");
    auto log = std::make_unique<MergeLog>();
    {
        nb::gil_scoped_release unlocked;
        Reader r;
        r.open(path, max_value_bytes);
        r.run("BEGIN");
        read_merges(r, *log);
        read_vocab(r, *log);
        read_checkpoint(r, *log);
        read_base(r, *log);
        r.run("COMMIT");
    }
    return log.release();
}

// ---- the checks --------------------------------------------------------------------------------

// A hash of a token's bytes, 8 at a time (std::hash of a string_view and std::unordered_map's node
// per entry made the checks and tables of 216 K tokens cost ~0.3 s each; this table ~0.01 s).
inline uint64_t bytes_hash(std::string_view t) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ t.size();
    size_t i = 0;
    for (; i + 8 <= t.size(); i += 8) {
        uint64_t w;
        std::memcpy(&w, t.data() + i, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
    }
    uint64_t w = 0;
    std::memcpy(&w, t.data() + i, t.size() - i);
    h = (h ^ w) * 0x94D049BB133111EBull;
    return h ^ (h >> 29);
}

// Rows keyed by their bytes, open addressing: `at(t)` is the slot of the row holding t, or the
// empty slot (kEmptyRow) where it would go.
struct RowIndex {
    static constexpr uint32_t kEmptyRow = 0xFFFFFFFFu;
    const MergeLog &log;
    std::vector<uint32_t> slots;
    size_t mask;
    RowIndex(const MergeLog &l, size_t n) : log(l) {
        size_t cap = 16;
        while (cap < 2 * n + 2) cap <<= 1;
        slots.assign(cap, kEmptyRow);
        mask = cap - 1;
    }
    uint32_t &at(std::string_view t) {
        for (size_t i = bytes_hash(t) & mask;; i = (i + 1) & mask) {
            uint32_t &s = slots[i];
            if (s == kEmptyRow || log.token(s) == t) return s;
        }
    }
};

// The model id of each vocabulary row (base_rows.model_ids: the base's ids, then id + shift), or
// false where base_rows.model_ids would refuse them.
bool model_ids(MergeLog &log) {
    const size_t n = log.n_vocab();
    log.model.resize(n);
    if (!log.has_base) {
        for (size_t i = 0; i < n; ++i) log.model[i] = i64(i);
        return true;
    }
    const Base &b = log.base;
    if (!log.base_typed || i64(log.base_ids.size()) != b.tokens || b.tokens + b.shift != b.next_id) return false;
    for (size_t i = 0; i < log.base_ids.size(); ++i)
        if (log.base_ids[i] != i64(i)) return false;
    for (size_t i = 0; i < n; ++i) {
        const i64 m = i < log.base_model_ids.size() ? log.base_model_ids[i] : i64(i) + b.shift;
        if (m < 0 || m > i64(0xFFFFFFFEu)) return false;
        log.model[i] = m;
    }
    std::vector<i64> sorted(log.model);
    std::sort(sorted.begin(), sorted.end());
    return std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();  // no two rows with one model id
}

// result_check's row-shape tests: ids and ranks 0..n-1, kinds in order, each merge's ids below it.
bool shapes_ok(const MergeLog &log, size_t n_special) {
    const size_t first = n_special + 256, nm = log.n_merges(), nv = log.n_vocab();
    if (!log.merges_typed || !log.vocab_typed || nv != first + nm) return false;
    for (size_t i = 0; i < nv; ++i) {
        const uint8_t want = i < n_special ? kSpecial : i < first ? kByte : kMerge;
        if (log.vocab_ids[i] != i64(i) || log.kinds[i] != want) return false;
    }
    for (size_t r = 0; r < nm; ++r) {
        const i64 *m = &log.merges[r * 5];
        const i64 limit = i64(first + r);
        if (m[0] != i64(r) || m[1] < 0 || m[1] >= limit || m[2] < 0 || m[2] >= limit || m[3] < 0 || m[3] > limit ||
            m[4] < 0)
            return false;
    }
    return true;
}

// result_check's byte tests: the specials' and bytes' rows, each merge's token its parts joined, and
// every merge naming its parts and token by the lowest id of their bytes (specials aside).
bool bytes_ok(const MergeLog &log, const std::vector<std::string> &specials) {
    const size_t ns = specials.size(), first = ns + 256, nm = log.n_merges(), nv = log.n_vocab();
    for (size_t i = 0; i < ns; ++i)
        if (log.token(i) != specials[i]) return false;
    for (size_t b = 0; b < 256; ++b) {
        std::string_view t = log.token(ns + b);
        if (t.size() != 1 || uint8_t(t[0]) != b) return false;
    }
    RowIndex lowest(log, nv);
    for (size_t i = ns; i < nv; ++i) {
        uint32_t &slot = lowest.at(log.token(i));
        if (slot == RowIndex::kEmptyRow) slot = uint32_t(i);  // keeps the first (lowest)
    }
    for (size_t r = 0; r < nm; ++r) {
        const i64 *m = &log.merges[r * 5];
        std::string_view l = log.token(size_t(m[1])), rt = log.token(size_t(m[2])), t = log.token(first + r);
        if (t.size() != l.size() + rt.size() || t.compare(0, l.size(), l) != 0 || t.compare(l.size(), rt.size(), rt) != 0)
            return false;
        auto low = [&](std::string_view s) {
            const uint32_t row = lowest.at(s);
            return row == RowIndex::kEmptyRow ? i64(-1) : i64(row);
        };
        if (low(l) != m[1] || low(rt) != m[2] || low(t) != m[3]) return false;
    }
    return true;
}

// Whether the log is as bpe_store writes it (`specials`: the run's special tokens, UTF-8); the
// model ids are computed on the way.
bool check(MergeLog &log, const std::vector<nb::bytes> &specials) {
    std::vector<std::string> sp;
    for (const auto &s : specials) sp.emplace_back(s.c_str(), s.size());
    nb::gil_scoped_release unlocked;
    return shapes_ok(log, sp.size()) && bytes_ok(log, sp) && model_ids(log);
}

// ---- what a tokenizer is built from ------------------------------------------------------------

// The first n rows by their bytes, each slot the row of the lowest model id with them: Tokenizer's
// first_ids.
RowIndex first_model_ids(const MergeLog &log, size_t n) {
    RowIndex first(log, n);
    for (size_t i = 0; i < n; ++i) {
        uint32_t &slot = first.at(log.token(i));
        if (slot == RowIndex::kEmptyRow || log.model[i] < log.model[slot]) slot = uint32_t(i);
    }
    return first;
}

void need_checked(const MergeLog &log, size_t n_rows) {
    if (log.model.size() != log.n_vocab()) throw std::logic_error("MergeLog: check() first");
    if (n_rows > log.n_vocab()) throw std::out_of_range("MergeLog: more rows than it holds");
}

// The encoder's tables for the first n_merges merges (and the rows they use): each byte's first id,
// and (left, right, token) per merge in rank order as first model ids (tables._from_result's
// `later`: a token whose bytes a special token has is named by the special's id), packed uint32.
nb::tuple encoder_tables(const MergeLog &log, size_t n_special, size_t n_merges) {
    const size_t n = n_special + 256 + n_merges;
    need_checked(log, n);
    std::vector<uint32_t> byte_ids(256), special_ids;
    std::string packed(n_merges * 12, '\0');
    {
        nb::gil_scoped_release unlocked;
        auto first = first_model_ids(log, n);
        auto id_of = [&](i64 store_id) { return uint32_t(log.model[first.at(log.token(size_t(store_id)))]); };
        for (size_t b = 0; b < 256; ++b) byte_ids[b] = id_of(i64(n_special + b));
        auto *out = reinterpret_cast<uint32_t *>(packed.data());
        for (size_t r = 0; r < n_merges; ++r) {
            const i64 *m = &log.merges[r * 5];
            out[3 * r] = id_of(m[1]);
            out[3 * r + 1] = id_of(m[2]);
            out[3 * r + 2] = id_of(m[3]);
        }
        for (size_t i = 0; i < n_special; ++i) special_ids.push_back(id_of(i64(i)));
    }
    return nb::make_tuple(byte_ids, nb::bytes(packed.data(), packed.size()), special_ids);
}

// {model id: bytes} of the first n rows (Tokenizer.vocab).
nb::dict vocab_dict(const MergeLog &log, size_t n) {
    need_checked(log, n);
    nb::dict out;
    for (size_t i = 0; i < n; ++i) {
        std::string_view t = log.token(i);
        out[nb::int_(log.model[i])] = nb::bytes(t.data(), t.size());
    }
    return out;
}

// [(left bytes, right bytes)] of the first n merges (Tokenizer.merges, CS336's).
nb::list merge_pairs(const MergeLog &log, size_t n) {
    if (n > log.n_merges()) throw std::out_of_range("MergeLog: more merges than it holds");
    nb::list out;
    for (size_t r = 0; r < n; ++r) {
        std::string_view l = log.token(size_t(log.merges[r * 5 + 1])), t = log.token(size_t(log.merges[r * 5 + 2]));
        out.append(nb::make_tuple(nb::bytes(l.data(), l.size()), nb::bytes(t.data(), t.size())));
    }
    return out;
}

template <class T>
nb::bytes packed(const std::vector<T> &v) {
    return nb::bytes(reinterpret_cast<const char *>(v.data()), v.size() * sizeof(T));
}

}  // namespace

void register_merge_log_reader(nb::module_ &m) {
    nb::class_<MergeLog>(m, "MergeLog",
                         "A store's merge log, vocabulary, base ids and newest checkpoint, read natively "
                         "(read_merge_log).")
        .def_prop_ro("n_merges", &MergeLog::n_merges)
        .def_prop_ro("n_vocab", &MergeLog::n_vocab)
        .def_prop_ro("merge_rows", [](const MergeLog &l) { return packed(l.merges); },
                     "(rank, left, right, token, count) per merge as native int64s, in rank order: what the "
                     "merge digest hashes (numpy.frombuffer(..., int64).reshape(-1, 5)).")
        .def_prop_ro("token_blob", [](const MergeLog &l) { return nb::bytes(l.blob.data(), l.blob.size()); },
                     "The vocabulary rows' bytes one after another (store ids).")
        .def_prop_ro("token_offsets", [](const MergeLog &l) { return packed(l.offsets); },
                     "n_vocab + 1 native size_t offsets into token_blob.")
        .def_prop_ro("checkpoint",
                     [](const MergeLog &l) -> std::optional<std::pair<i64, std::optional<std::string>>> {
                         if (!l.has_checkpoint) return std::nullopt;
                         std::optional<std::string> d;
                         if (l.checkpoint.has_digest) d = l.checkpoint.digest;
                         return std::make_pair(l.checkpoint.merges_done, d);
                     },
                     "(merges_done, merge_digest or None) of the newest checkpoint, or None without one "
                     "(merges_done -1 when it is not an integer).")
        .def_prop_ro("has_base", [](const MergeLog &l) { return l.has_base; })
        .def_prop_ro("model_ids", [](const MergeLog &l) { return packed(l.model); },
                     "The model id of each vocabulary row as native int64s (after check()).")
        .def("check", &check, nb::arg("specials"),
             "Whether the rows are as bpe_store writes them (result_check and base_rows.model_ids, as "
             "strictly or more), given the run's special tokens as UTF-8; computes the model ids.")
        .def("encoder_tables", &encoder_tables, nb::arg("n_special"), nb::arg("n_merges"),
             "(byte ids, (left, right, token) per merge as packed uint32, special ids) in first model ids, "
             "for the first n_merges merges (after check()).")
        .def("vocab", &vocab_dict, nb::arg("n_rows"), "{model id: bytes} of the first n_rows rows (after check()).")
        .def("merge_pairs", &merge_pairs, nb::arg("n_merges"), "[(left bytes, right bytes)] of the first n_merges merges.");
    m.def("read_merge_log", &read_merge_log, nb::arg("path"), nb::arg("max_value_bytes"),
          nb::rv_policy::take_ownership,
          "Read a store's merges, vocabulary, base ids and newest checkpoint in one read transaction "
          "(read-only; values over max_value_bytes are refused by SQLite: SqliteError). store_db_load() first.");
}
