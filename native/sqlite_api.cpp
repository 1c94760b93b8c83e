// Resolves the SQLite C API (sqlite_api.h) at run time from the library Python's _sqlite3 uses:
// the one copy of SQLite in the process (sqlite_api.h says why it must be one).
#include "sqlite_api.h"

#if defined(__unix__) || defined(__APPLE__)
#include <dlfcn.h>
#define BPE_STORE_HAVE_DLOPEN 1
#endif

#include <stdexcept>
#include <string>
#include <type_traits>

namespace bpe::sqlite {

Api api;
bool api_loaded = false;

int load_api(const std::string &module_file) {
#ifdef BPE_STORE_HAVE_DLOPEN
    if (api_loaded) return api.libversion_number();
    void *h = dlopen(module_file.c_str(), RTLD_NOLOAD | RTLD_LAZY);  // never loads a second copy
    if (h == nullptr) throw std::runtime_error("_sqlite3 is not loaded from " + module_file);
    Api a{};
    auto need = [&](auto &fn, const char *name) {
        void *p = dlsym(h, name);
        if (p == nullptr) throw std::runtime_error(std::string("SQLite symbol not visible: ") + name);
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    };
    need(a.open_v2, "sqlite3_open_v2");
    need(a.close_v2, "sqlite3_close_v2");
    need(a.prepare_v2, "sqlite3_prepare_v2");
    need(a.step, "sqlite3_step");
    need(a.reset, "sqlite3_reset");
    need(a.finalize, "sqlite3_finalize");
    need(a.bind_parameter_count, "sqlite3_bind_parameter_count");
    need(a.bind_int64, "sqlite3_bind_int64");
    need(a.bind_double, "sqlite3_bind_double");
    need(a.bind_blob, "sqlite3_bind_blob");
    need(a.bind_text, "sqlite3_bind_text");
    need(a.bind_null, "sqlite3_bind_null");
    need(a.column_count, "sqlite3_column_count");
    need(a.column_type, "sqlite3_column_type");
    need(a.column_int64, "sqlite3_column_int64");
    need(a.column_double, "sqlite3_column_double");
    need(a.column_blob, "sqlite3_column_blob");
    need(a.column_text, "sqlite3_column_text");
    need(a.column_bytes, "sqlite3_column_bytes");
    need(a.errmsg, "sqlite3_errmsg");
    need(a.extended_errcode, "sqlite3_extended_errcode");
    need(a.extended_result_codes, "sqlite3_extended_result_codes");
    need(a.get_autocommit, "sqlite3_get_autocommit");
    need(a.libversion_number, "sqlite3_libversion_number");
    need(a.column_name, "sqlite3_column_name");
    need(a.limit, "sqlite3_limit");
    need(a.progress_handler, "sqlite3_progress_handler");
    need(a.create_module_v2, "sqlite3_create_module_v2");
    need(a.create_function_v2, "sqlite3_create_function_v2");
    need(a.user_data, "sqlite3_user_data");
    need(a.value_type, "sqlite3_value_type");
    need(a.value_int64, "sqlite3_value_int64");
    need(a.declare_vtab, "sqlite3_declare_vtab");
    need(a.vtab_config, "sqlite3_vtab_config");
    need(a.result_int64, "sqlite3_result_int64");
    need(a.result_double, "sqlite3_result_double");
    need(a.result_blob, "sqlite3_result_blob");
    need(a.result_text, "sqlite3_result_text");
    need(a.result_null, "sqlite3_result_null");
    need(a.result_error, "sqlite3_result_error");
    api = a;
    api_loaded = true;
    return api.libversion_number();
#else
    (void)module_file;
    throw std::runtime_error("no dlopen on this platform");
#endif
}

int open_store_read_only(const std::string &path, int max_value_bytes, sqlite3 **db) {
    int rc = api.open_v2(path.c_str(), db, 0x00000001 /* SQLITE_OPEN_READONLY */ | kOpenNoMutex, nullptr);
    if (rc != kOk) return rc;
    api.extended_result_codes(*db, 1);
    api.limit(*db, 0 /* SQLITE_LIMIT_LENGTH */, max_value_bytes);
    api.limit(*db, 7 /* SQLITE_LIMIT_ATTACHED */, 0);
    for (const char *pragma : {"PRAGMA trusted_schema = OFF", "PRAGMA query_only = ON", "PRAGMA busy_timeout = 10000"}) {
        sqlite3_stmt *st = nullptr;
        rc = api.prepare_v2(*db, pragma, -1, &st, nullptr);
        if (rc == kOk) rc = api.step(st);
        if (st) api.finalize(st);
        if (rc != kOk && rc != kDone && rc != kRow) return rc;
    }
    return kOk;
}

}  // namespace bpe::sqlite
