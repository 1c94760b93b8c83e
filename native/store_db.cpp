// bpe_store._core.StoreDb: the store's native bulk path, a SQLite connection driven from C++ so
// that a checkpoint's hundreds of thousands of rows go from the engine's memory to
// sqlite3_bind_* without a Python tuple per row (bpe_store/store/native_connection.py is its Python face).
//
// Why: on enwiki-100M -> 32K the Python driver's executemany was ~1.9 of ~4.7 CPU s (binding one
// tuple per row, plus making those tuples); the same statements fed inside SQLite cost a third.
//
// Its parts: the SQLite API resolved at run time (sqlite_api.h: why no sqlite3.h), the rows a bulk
// statement reads (bulk_rows.h); `sql --format` is sql_format.cpp.
//
// Error reporting: a failing statement raises _core.SqliteError((extended code, sqlite3_errmsg)),
// the two things Python's driver reports, which store/native_connection.py turns into the same sqlite3 exception.
// Native code never prints.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "bulk_rows.h"
#include "scanner.h"
#include "sqlite_api.h"
#include "store_db.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace nb = nanobind;

namespace {

using namespace bpe::sqlite;
using namespace bpe::bulk_rows;

PyObject *sqlite_error_type = nullptr;

class StoreDb {
  public:
    // Opens `path` (an existing store; never creates one) with the pragmas of store._configure.
    StoreDb(const std::string &path, int busy_timeout_ms, const std::string &synchronous, i64 cache_kib,
            i64 journal_size_limit) {
        if (!api_loaded) throw std::runtime_error("StoreDb: store_db_load() was not called");
        int rc;
        {
            nb::gil_scoped_release unlocked;
            rc = api.open_v2(path.c_str(), &db_, kOpenReadWrite | kOpenNoMutex, nullptr);
        }
        if (rc != kOk) {
            SqliteFailure f{rc, db_ ? api.errmsg(db_) : "unable to open database file"};
            if (db_) api.close_v2(db_);
            db_ = nullptr;
            throw f;
        }
        api.extended_result_codes(db_, 1);
        try {
            rc = api.create_module_v2(db_, "bpe_store_rows", &kRowsModule, &slot_, nullptr);
            if (rc != kOk) fail(rc);
            // SQLITE_UTF8 | SQLITE_DIRECTONLY: never callable from a schema's views or triggers
            rc = api.create_function_v2(db_, "bpe_store_lookup", 1, 1 | 0x00080000, &slot_, rows_lookup, nullptr,
                                        nullptr, nullptr);
            if (rc != kOk) fail(rc);
            configure(busy_timeout_ms, synchronous, cache_kib, journal_size_limit);
        } catch (...) {
            release();  // a constructor that throws runs no destructor
            throw;
        }
    }

    ~StoreDb() { release(); }  // no call can be running: each holds a reference to this object

    // Refused while a call runs (with the GIL released on another thread, or a generator of rows
    // calling back into it): finalizing its statement under it would be a use after free.
    void close() {
        if (busy_.exchange(true)) throw std::runtime_error("StoreDb is in use: it cannot be closed now");
        release();
        busy_.store(false);
    }

  private:
    void release() {
        if (db_ == nullptr) return;
        for (auto &kv : stmts_) api.finalize(kv.second);
        stmts_.clear();
        api.close_v2(db_);
        db_ = nullptr;
    }

    void configure(int busy_timeout_ms, const std::string &synchronous, i64 cache_kib, i64 journal_size_limit) {
        if (synchronous != "FULL" && synchronous != "OFF" && synchronous != "NORMAL")
            throw nb::value_error("synchronous must be FULL, NORMAL or OFF");
        run("PRAGMA trusted_schema = OFF");  // no schema-defined code with side effects, ever
        run("PRAGMA busy_timeout = " + std::to_string(busy_timeout_ms));
        run("PRAGMA synchronous = " + synchronous);
        run("PRAGMA journal_size_limit = " + std::to_string(journal_size_limit));
        // 0: SQLite's default cache (2 MB). Why the caller decides: a merge checkpoint wants a
        // larger one (store.CHECKPOINT_CACHE_KIB), but held from counting's first flush on it
        // would stay resident through merging, the engine's peak.
        if (cache_kib > 0) run("PRAGMA cache_size = -" + std::to_string(cache_kib));
    }

  public:
    bool in_transaction() const { return db_ != nullptr && api.get_autocommit(db_) == 0; }

    // One statement with Python parameters; returns its rows as tuples (small statements only:
    // BEGIN/COMMIT, the run and checkpoints rows, tests' queries).
    nb::list execute(const std::string &sql, nb::handle params) {
        Busy busy(this);
        sqlite3_stmt *st = prepare(sql);
        Reset reset(st);
        bind_python(st, params);
        nb::list out;
        const int ncol = api.column_count(st);
        while (true) {
            int rc;
            {
                nb::gil_scoped_release unlocked;  // BEGIN IMMEDIATE may wait for busy_timeout
                rc = api.step(st);
            }
            if (rc == kDone) break;
            if (rc != kRow) fail(rc);
            nb::list row;
            for (int k = 0; k < ncol; ++k) row.append(column(st, k));
            out.append(nb::tuple(row));
        }
        return out;
    }

    // The statement once per row of `rows`, any iterable of parameter tuples (a counting flush's
    // count deltas and chunk marks; a checkpoint's large writes are bulk statements). Returns
    // the number of rows.
    size_t executemany(const std::string &sql, nb::handle rows) {
        Busy busy(this);
        sqlite3_stmt *st = prepare(sql);
        Reset reset(st);
        size_t n = 0;
        for (nb::handle row : nb::iter(rows)) {
            bind_python(st, row);
            int rc = api.step(st);  // GIL held: each row was just made by Python anyway
            if (rc != kDone && rc != kRow) fail(rc);
            api.reset(st);
            ++n;
        }
        return n;
    }

    // A bulk statement (see bpe_store_rows above): `sql` runs once, reading `rows` as the table
    // bpe_store_rows (p1, p2, ... = a row's parameters 1, 2, ...): a merge engine's checkpoint
    // stream (read from its arrays) or any iterable of parameter tuples (copied first). Returns the
    // number of rows. The GIL is released while it runs.
    size_t bulk(const std::string &sql, nb::handle rows) {
        Busy busy(this);
        sqlite3_stmt *st = prepare(sql);
        Reset reset(st);
        CheckpointRowsView v;
        if (checkpoint_rows_view(rows, v)) return run_bulk(st, ViewRows(v));
        return run_bulk(st, PyRows(rows));
    }

    // A bulk statement over a counting flush's new words as packed counts (``WordCounter.pack``,
    // ``WordIds.pack``): rows (id, bytes, count), ids first_id, first_id + 1, ... in order.
    // Why packed: 7 M words at OpenWebText scale would each be a Python tuple otherwise.
    size_t bulk_packed_words(const std::string &sql, nb::bytes packed, i64 first_id) {
        Busy busy(this);
        sqlite3_stmt *st = prepare(sql);
        Reset reset(st);
        const auto *data = static_cast<const uint8_t *>(packed.data());
        const size_t size = packed.size();
        bool too_big = false;
        try {  // valid: all or nothing, before any row is written
            bpe::unpack_counts(data, size, [&](const uint8_t *, size_t, uint64_t count) {
                too_big = too_big || count > uint64_t(INT64_MAX);
            });
        } catch (const std::invalid_argument &e) {
            throw nb::value_error(e.what());
        }
        if (too_big) throw std::overflow_error("a word count does not fit in 64 bits");
        return run_bulk(st, PackedWordRows(data, size, first_id));  // `packed` is immutable, held by the caller
    }

    // A bulk statement over n rows given as columns (ColumnRows): each column an int (the row's
    // number from it), a tuple (bytes of little-endian uint32, stride, at) or a tuple (blob bytes,
    // bytes of n + 1 little-endian int64 offsets, ascending from 0 to its length). Checked whole
    // before any row is written.
    size_t bulk_columns(const std::string &sql, size_t n, nb::list columns) {
        Busy busy(this);
        sqlite3_stmt *st = prepare(sql);
        Reset reset(st);
        std::vector<ColumnRows::Column> cols;
        for (nb::handle h : columns) cols.push_back(column_of(h, n));
        return run_bulk(st, ColumnRows(n, std::move(cols)));  // the buffers are held by the caller
    }

  private:
    static ColumnRows::Column column_of(nb::handle h, size_t n) {
        using Column = ColumnRows::Column;
        Column c{};
        if (nb::isinstance<nb::int_>(h)) {
            c.kind = Column::kIndex;
            c.start = nb::cast<i64>(h);
            return c;
        }
        const nb::tuple t = nb::cast<nb::tuple>(h);
        const nb::bytes data = nb::cast<nb::bytes>(t[0]);
        c.data = static_cast<const uint8_t *>(data.data());
        if (nb::isinstance<nb::bytes>(t[1])) {  // a blob column
            const nb::bytes off = nb::cast<nb::bytes>(t[1]);
            if (off.size() != 8 * (n + 1)) throw nb::value_error("bulk_columns: a blob column needs n + 1 offsets");
            c.kind = Column::kBlob;
            c.offsets = static_cast<const uint8_t *>(off.data());
            i64 prev = 0;
            for (size_t i = 0; i <= n; ++i) {
                const i64 o = ColumnRows::i64_at(c.offsets, i);
                if (o < prev || o > i64(data.size()) || (i == 0 && o != 0) || o - prev > i64(INT32_MAX))
                    throw nb::value_error("bulk_columns: blob offsets must rise from 0 within the blob bytes");
                prev = o;
            }
            return c;
        }
        c.kind = Column::kU32;
        c.stride = nb::cast<size_t>(t[1]);
        c.at = nb::cast<size_t>(t[2]);
        if (c.stride == 0 || c.at >= c.stride || (n > 0 && 4 * ((n - 1) * c.stride + c.at + 1) > data.size()))
            throw nb::value_error("bulk_columns: a uint32 column is shorter than its rows");
        return c;
    }

  public:
    // A bulk statement over a counting flush's count deltas (WordIds.add_native's buffer: n int64
    // ids ascending, then n int64 deltas): rows (p1 delta, p2 id), keyed by id for bpe_store_lookup.
    size_t bulk_deltas(const std::string &sql, nb::bytes deltas) {
        Busy busy(this);
        sqlite3_stmt *st = prepare(sql);
        Reset reset(st);
        if (deltas.size() % 16 != 0) throw nb::value_error("count deltas: the buffer is not n ids and n deltas");
        if (reinterpret_cast<uintptr_t>(deltas.data()) % alignof(i64) != 0) {  // CPython's bytes are aligned
            std::vector<i64> aligned(deltas.size() / 8);
            std::memcpy(aligned.data(), deltas.data(), deltas.size());
            return run_bulk(st, DeltaRows(reinterpret_cast<const uint8_t *>(aligned.data()), deltas.size()));
        }
        return run_bulk(st, DeltaRows(static_cast<const uint8_t *>(deltas.data()), deltas.size()));
    }

    // Every row of `sql` (id, bytes, count, tokens or NULL), into one buffer for the merge engine,
    // with the GIL released. A row of the wrong types is a ValueError naming it, as the engine
    // gives for Python rows (the store is damaged).
    WordRows read_word_rows(const std::string &sql) {
        Busy busy(this);
        sqlite3_stmt *st = prepare(sql);
        Reset reset(st);
        if (api.column_count(st) != 4) throw nb::value_error("the query must give (id, bytes, count, tokens)");
        WordRows out;
        std::string bad;
        int rc;
        {
            nb::gil_scoped_release unlocked;
            while ((rc = api.step(st)) == kRow) {
                // the message's prefix only once a row is bad (a string per row cost ~0.1 us each)
                const auto where = [&] { return "word row " + std::to_string(out.n) + ": "; };
                const int tt = api.column_type(st, 3);
                if (api.column_type(st, 0) != kInteger || api.column_type(st, 2) != kInteger) {
                    bad = where() + "ids and counts must be 64-bit integers";
                } else if (api.column_type(st, 1) != kBlob) {
                    bad = where() + "word bytes must be bytes";
                } else if (tt != kBlob && tt != 5) {  // 5: SQLITE_NULL
                    bad = where() + "tokens must be bytes or None";
                }
                if (!bad.empty()) break;
                const i64 id = api.column_int64(st, 0), count = api.column_int64(st, 2);
                const void *bytes = api.column_blob(st, 1);
                const uint32_t nb = uint32_t(api.column_bytes(st, 1));
                const void *toks = tt == kBlob ? api.column_blob(st, 3) : nullptr;
                const uint32_t nt = tt == kBlob ? uint32_t(api.column_bytes(st, 3)) : WordRows::kNull;
                const size_t at = out.data.size();
                out.data.resize(at + WordRows::kHeader + nb + (tt == kBlob ? nt : 0));
                uint8_t *p = out.data.data() + at;
                std::memcpy(p, &id, 8);
                std::memcpy(p + 8, &count, 8);
                std::memcpy(p + 16, &nb, 4);
                std::memcpy(p + 20, &nt, 4);
                if (nb) std::memcpy(p + WordRows::kHeader, bytes, nb);
                if (tt == kBlob && nt) std::memcpy(p + WordRows::kHeader + nb, toks, nt);
                ++out.n;
            }
        }
        if (!bad.empty()) throw nb::value_error(bad.c_str());
        if (rc != kDone) fail(rc);
        return out;
    }

  private:
    size_t run_bulk(sqlite3_stmt *st, const Rows &rows) {
        if (api.bind_parameter_count(st) != 0)
            throw nb::value_error("a bulk statement takes no parameters: it reads bpe_store_rows");
        struct Clear {
            RowsSlot &slot;
            ~Clear() { slot.rows = nullptr; }
        } clear{slot_};
        slot_.rows = &rows;
        slot_.keys_checked = false;
        slot_.at = RowsCursorState{};
        int rc;
        {
            nb::gil_scoped_release unlocked;
            while ((rc = api.step(st)) == kRow) {
            }
        }
        if (rc != kDone) fail(rc);
        return rows.size();
    }

    // Refuses a second call while one runs with the GIL released (another Python thread).
    struct Busy {
        StoreDb *d;
        explicit Busy(StoreDb *db) : d(db) {
            if (d->db_ == nullptr) throw std::runtime_error("StoreDb is closed");
            if (d->busy_.exchange(true)) throw std::runtime_error("StoreDb is in use by another thread");
        }
        ~Busy() { d->busy_.store(false); }
    };
    // Leaves a statement reset (no read or write lock kept by it) however the call ends.
    struct Reset {
        sqlite3_stmt *st;
        explicit Reset(sqlite3_stmt *s) : st(s) {}
        ~Reset() { api.reset(st); }
    };

    // Runs a parameterless statement, ignoring rows (the pragmas).
    void run(const std::string &sql) {
        sqlite3_stmt *st = prepare(sql);
        Reset reset(st);
        int rc;
        while ((rc = api.step(st)) == kRow) {
        }
        if (rc != kDone) fail(rc);
    }

    // Statements are prepared once and kept: a run writes the same dozen statements each batch.
    sqlite3_stmt *prepare(const std::string &sql) {
        auto it = stmts_.find(sql);
        if (it != stmts_.end()) return it->second;
        sqlite3_stmt *st = nullptr;
        const char *tail = nullptr;
        int rc = api.prepare_v2(db_, sql.c_str(), int(sql.size()) + 1, &st, &tail);
        if (rc != kOk) fail(rc);
        if (st == nullptr) throw nb::value_error("an empty statement");
        while (tail != nullptr && (*tail == ' ' || *tail == '\n' || *tail == ';')) ++tail;
        if (tail != nullptr && *tail != 0) {
            api.finalize(st);
            throw nb::value_error("one statement at a time");
        }
        stmts_.emplace(sql, st);
        return st;
    }

    [[noreturn]] void fail(int rc) {
        int code = api.extended_errcode(db_);
        throw SqliteFailure{code != kOk ? code : rc, api.errmsg(db_)};
    }

    // Binds a Python tuple/list as the statement's parameters, as the sqlite3 driver would for
    // None, int (64-bit; OverflowError past that), float, str and bytes-like values.
    void bind_python(sqlite3_stmt *st, nb::handle params) {
        const int want = api.bind_parameter_count(st);
        PyObject *seq = params.ptr();
        if (!PyTuple_Check(seq) && !PyList_Check(seq)) throw nb::type_error("parameters must be a tuple or list");
        const Py_ssize_t have = PySequence_Fast_GET_SIZE(seq);
        if (have != want)
            throw nb::value_error(("the statement takes " + std::to_string(want) + " parameters, " +
                                   std::to_string(have) + " given").c_str());
        PyObject **items = PySequence_Fast_ITEMS(seq);
        for (int k = 0; k < want; ++k) {
            PyObject *o = items[k];
            int rc;
            if (o == Py_None) {
                rc = api.bind_null(st, k + 1);
            } else if (PyLong_Check(o)) {
                long long x = PyLong_AsLongLong(o);
                if (x == -1 && PyErr_Occurred()) throw nb::python_error();
                rc = api.bind_int64(st, k + 1, x);
            } else if (PyFloat_Check(o)) {
                rc = api.bind_double(st, k + 1, PyFloat_AS_DOUBLE(o));
            } else if (PyUnicode_Check(o)) {
                Py_ssize_t len;
                const char *s = PyUnicode_AsUTF8AndSize(o, &len);  // cached in the str: lives with it
                if (s == nullptr) throw nb::python_error();
                rc = api.bind_text(st, k + 1, s, int(len), kStatic);
            } else if (PyBytes_Check(o)) {
                rc = api.bind_blob(st, k + 1, PyBytes_AS_STRING(o), int(PyBytes_GET_SIZE(o)), kStatic);
            } else if (PyByteArray_Check(o)) {
                Py_ssize_t len = PyByteArray_GET_SIZE(o);
                rc = api.bind_blob(st, k + 1, len ? PyByteArray_AS_STRING(o) : kEmpty, int(len), kStatic);
            } else {
                throw nb::type_error(("cannot store a " + std::string(Py_TYPE(o)->tp_name) + " value").c_str());
            }
            if (rc != kOk) fail(rc);
        }
    }

    nb::object column(sqlite3_stmt *st, int k) {
        switch (api.column_type(st, k)) {
            case kInteger: return nb::steal(PyLong_FromLongLong(api.column_int64(st, k)));
            case kFloat: return nb::steal(PyFloat_FromDouble(api.column_double(st, k)));
            case kText: {
                const char *s = reinterpret_cast<const char *>(api.column_text(st, k));
                return nb::steal(PyUnicode_FromStringAndSize(s, api.column_bytes(st, k)));
            }
            case kBlob: {
                const char *p = static_cast<const char *>(api.column_blob(st, k));
                return nb::steal(PyBytes_FromStringAndSize(p, api.column_bytes(st, k)));
            }
            default: return nb::none();
        }
    }

    sqlite3 *db_ = nullptr;
    RowsSlot slot_;  // bpe_store_rows's rows while bulk() runs (the module's pAux: lives as long as db_)
    std::unordered_map<std::string, sqlite3_stmt *> stmts_;
    std::atomic<bool> busy_{false};
};

}  // namespace

void register_store_db(nb::module_ &m) {
    sqlite_error_type = PyErr_NewExceptionWithDoc(
        "bpe_store._core.SqliteError", "A SQLite call of StoreDb failed: args are (extended code, message).",
        PyExc_Exception, nullptr);
    m.attr("SqliteError") = nb::handle(sqlite_error_type);
    nb::register_exception_translator([](const std::exception_ptr &p, void *) {
        try {
            std::rethrow_exception(p);
        } catch (const SqliteFailure &f) {
            nb::object args = nb::make_tuple(f.code, nb::str(f.message.c_str()));
            PyErr_SetObject(sqlite_error_type, args.ptr());
        }
    });
    m.def("store_db_load", &load_api, nb::arg("sqlite3_module_file"),
          "Resolve SQLite from the library Python's _sqlite3 (this file, already loaded) uses; "
          "returns sqlite3_libversion_number(). RuntimeError when that is not possible.");
    nb::class_<WordRows>(m, "WordRows", "A store's word rows in one buffer (StoreDb.read_word_rows).")
        .def("__len__", [](const WordRows &r) { return r.n; })
        .def_prop_ro("nbytes", [](const WordRows &r) { return r.data.size(); }, "Bytes of the buffer.")
        .def(
            "extend",
            [](WordRows &r, WordRows &more) {
                r.data.insert(r.data.end(), more.data.begin(), more.data.end());
                r.n += more.n;
                std::vector<uint8_t>().swap(more.data);  // its rows are in r now
                more.n = 0;
            },
            nb::arg("more"), "Append the rows of more (which is emptied): read in parts, loaded as one.");
    nb::class_<StoreDb>(m, "StoreDb", "A native connection to a store for its bulk writes (bpe_store.store.native_connection).")
        .def(nb::init<const std::string &, int, const std::string &, i64, i64>(), nb::arg("path"),
             nb::arg("busy_timeout_ms"), nb::arg("synchronous"), nb::arg("cache_kib"), nb::arg("journal_size_limit"))
        .def("execute", &StoreDb::execute, nb::arg("sql"), nb::arg("params") = nb::tuple(),
             "Run one statement; its rows as tuples.")
        .def("executemany", &StoreDb::executemany, nb::arg("sql"), nb::arg("rows"),
             "Run the statement for each row of parameter tuples.")
        .def("bulk", &StoreDb::bulk, nb::arg("sql"), nb::arg("rows"),
             "Run sql once over rows read as the table bpe_store_rows (p1, p2, ... = a row's parameters): "
             "a checkpoint RowStream (from its arrays) or tuples. Returns the number of rows.")
        .def("bulk_packed_words", &StoreDb::bulk_packed_words, nb::arg("sql"), nb::arg("packed"),
             nb::arg("first_id"),
             "Run sql once over the words of packed counts as bpe_store_rows (p1 id from first_id, p2 bytes, "
             "p3 count).")
        .def("bulk_columns", &StoreDb::bulk_columns, nb::arg("sql"), nb::arg("n"), nb::arg("columns"),
             "Run sql once over n rows given as columns as bpe_store_rows (p1, p2, ... = columns 1, 2, ...): "
             "an int (the row number from it), (uint32 bytes, stride, at) or (blob bytes, n + 1 int64 offsets).")
        .def("bulk_deltas", &StoreDb::bulk_deltas, nb::arg("sql"), nb::arg("deltas"),
             "Run sql once over count deltas (WordIds.add_native) as bpe_store_rows (p1 delta, p2 id).")
        .def("read_word_rows", &StoreDb::read_word_rows, nb::arg("sql"),
             "Every row of sql (id, bytes, count, tokens or NULL) as one WordRows buffer, for MergeEngine.")
        .def("close", &StoreDb::close)
        .def_prop_ro("in_transaction", &StoreDb::in_transaction);
}
