// The SQLite C API as the native store code uses it (store_db.cpp, bulk_rows.h, sql_format.cpp,
// merge_log_reader.cpp): declared here, resolved at run time by load_api (sqlite_api.cpp) from the
// SQLite that Python's own _sqlite3 module uses.
//
// Why no sqlite3.h and no link against libsqlite3: the process must use ONE copy of SQLite. Two
// copies in one process that open the same file each keep their own table of POSIX locks per
// inode, and closing a file descriptor in one drops the other's locks (fcntl locks are per process):
// silent corruption. So this file declares the few prototypes it needs and resolves them at run
// time from the library Python's own `_sqlite3` module uses: dlopen(_sqlite3.__file__,
// RTLD_NOLOAD) finds the already-loaded module, and dlsym on it searches its dependencies too
// (libsqlite3.so when linked dynamically; the module itself when SQLite is built in and its symbols
// are visible). Python checks the version matches sqlite3.sqlite_version_info and falls back to
// executemany when anything is missing (bpe_store/store/native_connection.py).
#pragma once

#include <string>

namespace bpe::sqlite {

using i64 = long long;

struct sqlite3;
struct sqlite3_stmt;
struct sqlite3_context;
struct sqlite3_value;
using Destructor = void (*)(void *);

constexpr int kOk = 0, kError = 1, kRow = 100, kDone = 101;
constexpr int kOpenReadWrite = 0x00000002;
// SQLITE_OPEN_NOMUTEX: no connection mutex taken by every bind/step/reset/column call (perf: ~4 %
// of enwiki-100M -> 32K was pthread mutex lock/unlock). Safe because this connection is used by
// one thread at a time: every call holds Busy (a second concurrent call is refused, never run).
constexpr int kOpenNoMutex = 0x00008000;
constexpr int kVtabDirectOnly = 3;  // SQLITE_VTAB_DIRECTONLY: never usable from a schema's views/triggers

// The virtual table API (sqlite3.h's sqlite3_module, version 1, and what it passes): its layout is
// part of SQLite's stable ABI since 3.9 (estimatedRows 3.8.2, idxFlags 3.9, colUsed 3.10).
struct sqlite3_vtab;
struct sqlite3_vtab_cursor;
struct sqlite3_index_info {
    int nConstraint;
    struct Constraint {
        int iColumn;
        unsigned char op, usable;
        int iTermOffset;
    } *aConstraint;
    int nOrderBy;
    struct OrderBy {
        int iColumn;
        unsigned char desc;
    } *aOrderBy;
    struct Usage {
        int argvIndex;
        unsigned char omit;
    } *aConstraintUsage;
    int idxNum;
    char *idxStr;
    int needToFreeIdxStr;
    int orderByConsumed;
    double estimatedCost;
    long long estimatedRows;
    int idxFlags;
    unsigned long long colUsed;
};
struct sqlite3_module {
    int iVersion;
    int (*xCreate)(sqlite3 *, void *, int, const char *const *, sqlite3_vtab **, char **);
    int (*xConnect)(sqlite3 *, void *, int, const char *const *, sqlite3_vtab **, char **);
    int (*xBestIndex)(sqlite3_vtab *, sqlite3_index_info *);
    int (*xDisconnect)(sqlite3_vtab *);
    int (*xDestroy)(sqlite3_vtab *);
    int (*xOpen)(sqlite3_vtab *, sqlite3_vtab_cursor **);
    int (*xClose)(sqlite3_vtab_cursor *);
    int (*xFilter)(sqlite3_vtab_cursor *, int, const char *, int, sqlite3_value **);
    int (*xNext)(sqlite3_vtab_cursor *);
    int (*xEof)(sqlite3_vtab_cursor *);
    int (*xColumn)(sqlite3_vtab_cursor *, sqlite3_context *, int);
    int (*xRowid)(sqlite3_vtab_cursor *, long long *);
    void *xUpdate, *xBegin, *xSync, *xCommit, *xRollback, *xFindFunction, *xRename;  // unused: NULL
};
struct sqlite3_vtab {
    const sqlite3_module *pModule;
    int nRef;
    char *zErrMsg;
};
struct sqlite3_vtab_cursor {
    sqlite3_vtab *pVtab;
};
constexpr int kInteger = 1, kFloat = 2, kText = 3, kBlob = 4;
const Destructor kStatic = nullptr;  // SQLITE_STATIC: the value outlives the statement's step

struct Api {
    int (*open_v2)(const char *, sqlite3 **, int, const char *);
    int (*close_v2)(sqlite3 *);
    int (*prepare_v2)(sqlite3 *, const char *, int, sqlite3_stmt **, const char **);
    int (*step)(sqlite3_stmt *);
    int (*reset)(sqlite3_stmt *);
    int (*finalize)(sqlite3_stmt *);
    int (*bind_parameter_count)(sqlite3_stmt *);
    int (*bind_int64)(sqlite3_stmt *, int, i64);
    int (*bind_double)(sqlite3_stmt *, int, double);
    int (*bind_blob)(sqlite3_stmt *, int, const void *, int, Destructor);
    int (*bind_text)(sqlite3_stmt *, int, const char *, int, Destructor);
    int (*bind_null)(sqlite3_stmt *, int);
    int (*column_count)(sqlite3_stmt *);
    int (*column_type)(sqlite3_stmt *, int);
    i64 (*column_int64)(sqlite3_stmt *, int);
    double (*column_double)(sqlite3_stmt *, int);
    const void *(*column_blob)(sqlite3_stmt *, int);
    const unsigned char *(*column_text)(sqlite3_stmt *, int);
    int (*column_bytes)(sqlite3_stmt *, int);
    const char *(*errmsg)(sqlite3 *);
    int (*extended_errcode)(sqlite3 *);
    int (*extended_result_codes)(sqlite3 *, int);
    int (*get_autocommit)(sqlite3 *);
    int (*libversion_number)();
    const char *(*column_name)(sqlite3_stmt *, int);
    int (*limit)(sqlite3 *, int, int);
    void (*progress_handler)(sqlite3 *, int, int (*)(void *), void *);
    int (*create_module_v2)(sqlite3 *, const char *, const sqlite3_module *, void *, Destructor);
    int (*create_function_v2)(sqlite3 *, const char *, int, int, void *,
                              void (*)(sqlite3_context *, int, sqlite3_value **),
                              void (*)(sqlite3_context *, int, sqlite3_value **), void (*)(sqlite3_context *),
                              Destructor);
    void *(*user_data)(sqlite3_context *);
    int (*value_type)(sqlite3_value *);
    i64 (*value_int64)(sqlite3_value *);
    int (*declare_vtab)(sqlite3 *, const char *);
    int (*vtab_config)(sqlite3 *, int, ...);
    void (*result_int64)(sqlite3_context *, i64);
    void (*result_double)(sqlite3_context *, double);
    void (*result_blob)(sqlite3_context *, const void *, int, Destructor);
    void (*result_text)(sqlite3_context *, const char *, int, Destructor);
    void (*result_null)(sqlite3_context *);
    void (*result_error)(sqlite3_context *, const char *, int);
};

extern Api api;           // valid once load_api has returned
extern bool api_loaded;

// Resolves the API from the SQLite that `module_file` (Python's _sqlite3 extension, already
// loaded) uses; returns sqlite3_libversion_number(). Throws RuntimeError saying what is missing.
int load_api(const std::string &module_file);

// A failed SQLite call: turned into _core.SqliteError((code, message)) by store_db.cpp's translator.
struct SqliteFailure {
    int code;
    std::string message;
};

// Opens `path` to read a store and nothing else: read-only, values at most `max_value_bytes`
// (SQLITE_LIMIT_LENGTH: a tampered huge row is refused, not read), nothing attachable, no trust in
// the schema's functions, queries only, a 10 s busy timeout. Returns SQLite's result code; `*db` is
// set even when it fails (the caller closes it, and its errmsg says why).
int open_store_read_only(const std::string &path, int max_value_bytes, sqlite3 **db);

// A zero-length blob must still have a non-NULL pointer: sqlite3_bind_blob(NULL) binds NULL.
inline const char kEmpty[1] = {0};

}  // namespace bpe::sqlite
