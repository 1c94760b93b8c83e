// bpe_store._core.write_query: `bpe-store sql --format csv|json|jsonl`, rows formatted here as
// Python's csv / json write them (bpe_store/inspection/answers.py, write_query, is its Python face).
//
// Why native: `bpe-store sql` made a Python tuple per row and formatted each value in Python
// (csv.writer, json), ~4x the CPU of `sqlite3 -csv` for 1 M rows. Here each value goes from the
// statement to an output buffer, with the same text as bpe_store.cli.output.write_rows makes.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "sqlite_api.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace nb = nanobind;

namespace {

using namespace bpe::sqlite;

// Length of the valid UTF-8 sequence at s (as Python's strict decoder accepts: no overlong form,
// no surrogate, nothing past U+10FFFF), or 0 when none starts there.
size_t utf8_seq(const unsigned char *s, size_t n) {
    const unsigned char b = s[0];
    auto cont = [&](size_t k) { return k < n && (s[k] & 0xC0) == 0x80; };
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) return cont(1) ? 2 : 0;
    if (b >= 0xE0 && b <= 0xEF) {
        if (n < 2) return 0;
        const unsigned char c = s[1];
        const bool ok1 = b == 0xE0 ? (c >= 0xA0 && c <= 0xBF) : b == 0xED ? (c >= 0x80 && c <= 0x9F) : cont(1);
        return ok1 && cont(2) ? 3 : 0;
    }
    if (b >= 0xF0 && b <= 0xF4) {
        if (n < 2) return 0;
        const unsigned char c = s[1];
        const bool ok1 = b == 0xF0 ? (c >= 0x90 && c <= 0xBF) : b == 0xF4 ? (c >= 0x80 && c <= 0x8F) : cont(1);
        return ok1 && cont(2) && cont(3) ? 4 : 0;
    }
    return 0;
}

// display.plain: UTF-8 as it is, each byte of an invalid sequence as \xNN (Python's backslashreplace)
void put_plain(std::string &out, const unsigned char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    size_t i = 0;
    while (i < n) {
        size_t run = i;  // a run of valid sequences, copied at once (ASCII: no call per byte)
        for (size_t k; run < n;) {
            if (s[run] < 0x80) {
                ++run;
                continue;
            }
            if ((k = utf8_seq(s + run, n - run)) == 0) break;
            run += k;
        }
        out.append(reinterpret_cast<const char *>(s + i), run - i);
        i = run;
        if (i < n) {
            const char esc[4] = {'\\', 'x', hex[s[i] >> 4], hex[s[i] & 15]};
            out.append(esc, 4);
            ++i;
        }
    }
}

// A JSON string as json.dumps(ensure_ascii=False) writes one
void put_json_string(std::string &out, const std::string &v) {
    static const char hex[] = "0123456789abcdef";
    out.push_back('"');
    size_t done = 0;  // v[done..i) needs no escape: appended at once
    for (size_t i = 0; i < v.size(); ++i) {
        const unsigned char c = static_cast<unsigned char>(v[i]);
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        out.append(v, done, i - done);
        done = i + 1;
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
            const char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            out.append(esc, 6);
        }
    }
    out.append(v, done, v.size() - done);
    out.push_back('"');
}

// A CSV field as csv.writer (QUOTE_MINIMAL, lineterminator "\n") writes it; `quote_cr`: whether
// this Python's csv quotes a field holding "\r" (probed by the caller).
void put_csv_field(std::string &out, const std::string &v, bool quote_cr) {
    bool quote = false;
    for (char c : v)
        if (c == ',' || c == '"' || c == '\n' || (c == '\r' && quote_cr)) {
            quote = true;
            break;
        }
    if (!quote) {
        out += v;
        return;
    }
    out.push_back('"');
    for (char c : v) {
        if (c == '"') out.push_back('"');
        out.push_back(c);
    }
    out.push_back('"');
}

// repr(float) (csv), and json's spelling of the non-finite ones
std::string float_text(double d, bool json) {
    if (std::isnan(d)) return json ? "NaN" : "nan";
    if (std::isinf(d)) return d > 0 ? (json ? "Infinity" : "inf") : (json ? "-Infinity" : "-inf");
    nb::gil_scoped_acquire gil;  // PyOS_double_to_string allocates with PyMem
    char *p = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, nullptr);
    if (p == nullptr) throw nb::python_error();
    std::string s(p);
    PyMem_Free(p);
    return s;
}

void write_all(int fd, std::string &buf) {
    size_t at = 0;
    while (at < buf.size()) {
        ssize_t w = ::write(fd, buf.data() + at, buf.size() - at);
        if (w < 0) {
            if (errno == EINTR) {
                nb::gil_scoped_acquire gil;
                if (PyErr_CheckSignals() != 0) throw nb::python_error();
                continue;
            }
            nb::gil_scoped_acquire gil;
            PyErr_SetFromErrno(PyExc_OSError);  // EPIPE: BrokenPipeError
            throw nb::python_error();
        }
        at += size_t(w);
    }
    buf.clear();
}

// A read-only connection to a store and the one statement `write_query` runs on it; both closed
// with it (after the GIL is taken back, as the caller's scope ends).
struct QueryConn {
    sqlite3 *db = nullptr;
    sqlite3_stmt *st = nullptr;
    bool signalled = false;  // the progress handler saw a Python signal's exception

    QueryConn() = default;
    QueryConn(const QueryConn &) = delete;
    QueryConn &operator=(const QueryConn &) = delete;
    ~QueryConn() {
        if (st) api.finalize(st);
        if (db) api.close_v2(db);
    }
    SqliteFailure failed(int rc) const { return {rc, db ? api.errmsg(db) : "unable to open database file"}; }
    // a step's failure: the signal handler's exception (KeyboardInterrupt) if it stopped the step
    SqliteFailure failed_step(int rc) const {
        if (signalled) {
            nb::gil_scoped_acquire gil;
            throw nb::python_error();
        }
        return failed(rc);
    }

    // Opens `path` read-only, values at most `max_value_bytes`, nothing attachable, no trust in the
    // schema's functions, and Ctrl-C seen while SQLite works between rows (a sort before the first):
    // a Python signal handler runs every ~100 K virtual machine steps, and an exception stops it.
    void open(const std::string &path, int max_value_bytes) {
        int rc = open_store_read_only(path, max_value_bytes, &db);
        if (rc != kOk) throw failed(rc);
        api.progress_handler(db, 100000, [](void *flag) -> int {
            nb::gil_scoped_acquire gil;
            if (PyErr_CheckSignals() == 0) return 0;
            *static_cast<bool *>(flag) = true;
            return 1;  // SQLITE_INTERRUPT
        }, &signalled);
    }

    void prepare(const std::string &sql) {
        int rc = api.prepare_v2(db, sql.c_str(), int(sql.size()), &st, nullptr);
        if (rc != kOk) throw failed(rc);
        if (st == nullptr) throw SqliteFailure{kError, "not a statement"};
    }
};

// How `write_query` spells rows: csv as Python's csv.writer, json/jsonl as json.dumps of
// {column: value} (display.plain's text for TEXT and BLOB values).
struct RowFormat {
    bool csv, json_array;  // json_array: "json" (one array), else "jsonl" (an object a line)
    bool quote_cr, quote_lone_empty;  // what this Python's csv does (probed by the caller)
    int ncol = 0;
    std::vector<std::string> names;
    std::vector<std::pair<std::string, int>> keys;  // json: `"name": ` and the column it takes
    std::string field;  // scratch for one value's text

    // The statement's column names; json: a key per distinct name, where it first appears, with
    // the value of its last column (what {c: v for c, v in zip(columns, row)} makes)
    void columns(sqlite3_stmt *st) {
        ncol = api.column_count(st);
        names.assign(size_t(std::max(ncol, 0)), std::string());
        for (int c = 0; c < ncol; ++c) {
            const char *nm = api.column_name(st, c);
            names[c] = nm ? nm : "";
        }
        if (csv) return;
        std::unordered_map<std::string, size_t> at;
        for (int c = 0; c < ncol; ++c) {
            auto it = at.find(names[c]);
            if (it == at.end()) {
                at.emplace(names[c], keys.size());
                keys.emplace_back(names[c], c);
            } else {
                keys[it->second].second = c;
            }
        }
        for (auto &k : keys) {  // the key's text as JSON once
            std::string quoted;
            put_json_string(quoted, k.first);
            k.first = quoted + ": ";
        }
    }

    void csv_header(std::string &buf) const {
        for (int c = 0; c < ncol; ++c) {
            if (c) buf.push_back(',');
            put_csv_field(buf, names[c], quote_cr);
        }
        if (ncol == 1 && names[0].empty() && quote_lone_empty) buf += "\"\"";
        buf.push_back('\n');
    }

    // A TEXT or BLOB value: the common case (printable ASCII, nothing to escape) as it is
    void put_text(const unsigned char *p, int n, std::string &out) {
        bool simple = true;
        for (int k = 0; k < n && simple; ++k)
            simple = p[k] >= 0x20 && p[k] < 0x7F && p[k] != '"' && p[k] != '\\' && p[k] != ',';
        if (simple && n > 0) {
            if (!csv) out.push_back('"');
            out.append(reinterpret_cast<const char *>(p), size_t(n));
            if (!csv) out.push_back('"');
            return;
        }
        field.clear();
        if (p) put_plain(field, p, size_t(n));
        if (!csv) put_json_string(out, field);
        else if (ncol == 1 && field.empty() && quote_lone_empty) out += "\"\"";
        else put_csv_field(out, field, quote_cr);
    }

    void put_value(sqlite3_stmt *st, int c, std::string &out) {
        switch (api.column_type(st, c)) {
        case kInteger: {
            char num[24];  // why to_chars: no string allocated per value
            auto r = std::to_chars(num, num + sizeof num, api.column_int64(st, c));
            out.append(num, size_t(r.ptr - num));
            break;
        }
        case kFloat: out += float_text(api.column_double(st, c), !csv); break;
        case kText:
        case kBlob:  // the bytes as stored
            put_text(static_cast<const unsigned char *>(api.column_blob(st, c)), api.column_bytes(st, c), out);
            break;
        default:  // NULL
            if (!csv) out += "null";
            else if (ncol == 1 && quote_lone_empty) out += "\"\"";
        }
    }

    // the current row of `st`, the `index`-th written
    void put_row(sqlite3_stmt *st, i64 index, std::string &buf) {
        if (csv) {
            for (int c = 0; c < ncol; ++c) {
                if (c) buf.push_back(',');
                put_value(st, c, buf);
            }
            buf.push_back('\n');
            return;
        }
        buf += json_array ? (index ? ",\n {" : "[\n {") : "{";
        for (size_t k = 0; k < keys.size(); ++k) {
            if (k) buf += ", ";
            buf += keys[k].first;
            put_value(st, keys[k].second, buf);
        }
        buf += json_array ? "}" : "}\n";
    }
};

// Runs `sql` (one statement the caller checked is read-only) on the store at `path`, opened
// read-only, and writes its rows to `fd` as csv, json or jsonl; at most `limit` rows (-1: all).
// Returns the number of rows. Ctrl-C is seen every 1024 rows (KeyboardInterrupt).
i64 write_query(const std::string &path, const std::string &sql, int fd, const std::string &format, i64 limit,
                int max_value_bytes, bool quote_cr, bool quote_lone_empty) {
    if (!api_loaded) throw std::runtime_error("write_query: store_db_load() was not called");
    if (format != "csv" && format != "json" && format != "jsonl") throw nb::value_error("format: csv, json or jsonl");
    RowFormat f{format == "csv", format == "json", quote_cr, quote_lone_empty};
    QueryConn q;
    i64 rows = 0;
    std::string buf;
    {
        nb::gil_scoped_release unlocked;
        q.open(path, max_value_bytes);
        q.prepare(sql);
        f.columns(q.st);
        if (f.csv) f.csv_header(buf);
        while (limit < 0 || rows < limit) {
            const int rc = api.step(q.st);
            if (rc == kDone) break;
            if (rc != kRow) throw q.failed_step(rc);
            f.put_row(q.st, rows, buf);
            ++rows;
            if (buf.size() >= (1u << 20)) write_all(fd, buf);
            if ((rows & 1023) == 0) {
                nb::gil_scoped_acquire gil;
                if (PyErr_CheckSignals() != 0) throw nb::python_error();
            }
        }
        if (f.json_array) buf += rows ? "\n]\n" : "[]\n";
        write_all(fd, buf);
    }
    return rows;
}

}  // namespace

void register_sql_format(nb::module_ &m) {
    m.def("write_query", &write_query, nb::arg("path"), nb::arg("sql"), nb::arg("fd"), nb::arg("format"),
          nb::arg("limit"), nb::arg("max_value_bytes"), nb::arg("quote_cr"), nb::arg("quote_lone_empty"),
          "Run a read-only statement on the store at path (opened read-only) and write its rows to fd as "
          "csv, json or jsonl, as bpe_store.cli.output.write_rows writes them; returns the number of rows.");
}
