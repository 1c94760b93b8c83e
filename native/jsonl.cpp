// The jsonl text-field extractor: the documents of a block of jsonl lines, read without Python
// objects. Given complete lines and a field name it produces what bpe_store/text/jsonl.py's Python
// path (`parse_lines`: json.loads of each line, the top-level field, str.encode) produces: the
// fields' UTF-8 joined by 0xFF, or nothing at all when it is not sure, and then Python reads
// the block itself (and says what is wrong, or applies --invalid-utf8 replace). Not sure means:
// invalid UTF-8 anywhere in the block, a line that is not one JSON object, a missing or
// non-string field, a field holding a lone surrogate (\ud800 not in a pair), nesting deeper than
// kMaxDepth, or an integer longer than kMaxNumber bytes (json calls int() on it, which refuses
// over 4300 digits; floats have no limit). Everything else is read exactly as Python's json
// module reads it:
// * whitespace between tokens is space, tab, CR (json's set; a line has no LF); a line of only
//   space, tab, CR, VT, FF is blank (bytes.strip's set) and skipped;
// * strings: raw bytes other than '"', '\' and control characters (< 0x20, refused as with
//   json's strict=True) are themselves; escapes \" \\ \/ \b \f \n \r \t \uXXXX (any hex case),
//   a high \u surrogate followed by a low \u surrogate is one character (as json's scanstring);
// * keys are compared after unescaping ("t\u0065xt" is "text"); only top-level keys count; of
//   duplicate keys the last one wins (dict semantics);
// * other values (numbers by json's grammar, true, false, null, NaN, Infinity, -Infinity, nested
//   arrays and objects) are checked and skipped.
//
// Performance notes: the block is checked to be UTF-8 first (eight ASCII bytes at a time,
// bpe::valid_utf8), so string contents are then copied as runs found eight bytes at a
// time (a SWAR test for '"', '\' and bytes < 0x20) and appended with one memcpy per run. The
// field's value is decoded straight into the output; a later duplicate key truncates it again.
// The GIL is released for the whole block, so two reader threads extract in parallel.
#include <nanobind/nanobind.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "utf8.h"

namespace nb = nanobind;

namespace bpe::jsonl {
namespace {

constexpr int kMaxDepth = 200;        // json recurses per level; deeper input is left to it
constexpr size_t kMaxNumber = 4000;   // int() refuses over 4300 digits (sys.get_int_max_str_digits)
constexpr size_t kFail = SIZE_MAX;    // "not sure": the caller gives up on the block
constexpr uint8_t kDocSep = 0xFF;     // inputs.DOC_SEP

inline bool is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\r'; }

inline bool is_hex(uint8_t c) { return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f'); }

inline uint32_t hex_value(uint8_t c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }

inline bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

// Whether any of the eight bytes of w is '"', '\' or below 0x20 (exact: no false positives).
inline bool has_stop(uint64_t w) {
    constexpr uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    const uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\');
    const uint64_t zero_q = (q - ones) & ~q, zero_b = (b - ones) & ~b, low = (w - ones * 0x20) & ~w;
    return ((zero_q | zero_b | low) & highs) != 0;
}

inline void put_utf8(std::string &out, uint32_t cp) {
    if (cp < 0x80) {
        out.push_back(char(cp));
    } else if (cp < 0x800) {
        out.push_back(char(0xC0 | (cp >> 6)));
        out.push_back(char(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(char(0xE0 | (cp >> 12)));
        out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(char(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(char(0xF0 | (cp >> 18)));
        out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(char(0x80 | (cp & 0x3F)));
    }
}

// The reader of one block. `s[0, n)` is valid UTF-8; `peek` gives 0 past the end, a byte that is
// valid in no position checked against it, so bounds never need a separate test.
struct Reader {
    const uint8_t *s;
    size_t n;

    uint8_t peek(size_t i) const { return i < n ? s[i] : 0; }

    size_t ws(size_t i) const {
        while (i < n && is_ws(s[i])) ++i;
        return i;
    }

    // The end of the run of plain string bytes starting at i: the first '"', '\', control byte or n.
    size_t plain_run(size_t i) const {
        while (i + 8 <= n) {
            uint64_t w;
            std::memcpy(&w, s + i, 8);
            if (has_stop(w)) break;
            i += 8;
        }
        while (i < n && s[i] != '"' && s[i] != '\\' && s[i] >= 0x20) ++i;
        return i;
    }

    // The code unit of the 4 hex digits at i, or -1.
    int32_t hex4(size_t i) const {
        if (i + 4 > n || !is_hex(s[i]) || !is_hex(s[i + 1]) || !is_hex(s[i + 2]) || !is_hex(s[i + 3])) return -1;
        return int32_t((hex_value(s[i]) << 12) | (hex_value(s[i + 1]) << 8) | (hex_value(s[i + 2]) << 4) |
                       hex_value(s[i + 3]));
    }

    // A string whose opening quote is at i - 1: returns the index after its closing quote, or
    // kFail. With `out`, appends its UTF-8 and sets `lone` if it holds a lone surrogate (whose
    // bytes are then not usable).
    size_t string(size_t i, std::string *out, bool &lone) const {
        for (;;) {
            const size_t e = plain_run(i);
            if (out) out->append(reinterpret_cast<const char *>(s + i), e - i);
            const uint8_t c = peek(e);
            if (c == '"') return e + 1;
            if (c != '\\') return kFail;  // a control byte or the end of the block
            const uint8_t x = peek(e + 1);
            i = e + 2;
            if (x == 'u') {
                const int32_t u = hex4(i);
                if (u < 0) return kFail;
                i += 4;
                uint32_t cp = uint32_t(u);
                if (cp >= 0xD800 && cp <= 0xDBFF && peek(i) == '\\' && peek(i + 1) == 'u') {
                    const int32_t lo = hex4(i + 2);  // json: "\u" after a high surrogate must be 4 hex
                    if (lo < 0) return kFail;
                    if (lo >= 0xDC00 && lo <= 0xDFFF) {
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (uint32_t(lo) - 0xDC00);
                        i += 6;
                    }
                }
                if (cp >= 0xD800 && cp <= 0xDFFF) lone = true;
                else if (out) put_utf8(*out, cp);
                continue;
            }
            char v;
            switch (x) {
                case '"': v = '"'; break;
                case '\\': v = '\\'; break;
                case '/': v = '/'; break;
                case 'b': v = '\b'; break;
                case 'f': v = '\f'; break;
                case 'n': v = '\n'; break;
                case 'r': v = '\r'; break;
                case 't': v = '\t'; break;
                default: return kFail;
            }
            if (out) out->push_back(v);
        }
    }

    size_t literal(size_t i, const char *word) const {
        const size_t len = std::strlen(word);
        return i + len <= n && std::memcmp(s + i, word, len) == 0 ? i + len : kFail;
    }

    // json's number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)? (what follows is the caller's).
    size_t number(size_t i) const {
        const size_t start = i;
        if (peek(i) == '-') ++i;
        if (peek(i) == '0') {
            ++i;
        } else if (is_digit(peek(i))) {
            while (is_digit(peek(i))) ++i;
        } else {
            return kFail;
        }
        const bool integer = peek(i) != '.' && (peek(i) | 0x20) != 'e';
        if (integer && i - start > kMaxNumber) return kFail;  // json would call int() on it
        if (peek(i) == '.') {
            if (!is_digit(peek(++i))) return kFail;
            while (is_digit(peek(i))) ++i;
        }
        if ((peek(i) | 0x20) == 'e') {
            ++i;
            if (peek(i) == '+' || peek(i) == '-') ++i;
            if (!is_digit(peek(i))) return kFail;
            while (is_digit(peek(i))) ++i;
        }
        return i;
    }

    // Any JSON value starting at i (no leading whitespace): the index after it, or kFail.
    size_t value(size_t i, int depth) const {
        bool lone = false;
        switch (peek(i)) {
            case '"': return string(i + 1, nullptr, lone);
            case '{': {
                if (depth >= kMaxDepth) return kFail;
                i = ws(i + 1);
                if (peek(i) == '}') return i + 1;
                for (;;) {
                    if (peek(i) != '"' || (i = string(i + 1, nullptr, lone)) == kFail) return kFail;
                    i = ws(i);
                    if (peek(i) != ':') return kFail;
                    if ((i = value(ws(i + 1), depth + 1)) == kFail) return kFail;
                    i = ws(i);
                    if (peek(i) == '}') return i + 1;
                    if (peek(i) != ',') return kFail;
                    i = ws(i + 1);
                }
            }
            case '[': {
                if (depth >= kMaxDepth) return kFail;
                i = ws(i + 1);
                if (peek(i) == ']') return i + 1;
                for (;;) {
                    if ((i = value(i, depth + 1)) == kFail) return kFail;
                    i = ws(i);
                    if (peek(i) == ']') return i + 1;
                    if (peek(i) != ',') return kFail;
                    i = ws(i + 1);
                }
            }
            case 't': return literal(i, "true");
            case 'f': return literal(i, "false");
            case 'n': return literal(i, "null");
            case 'N': return literal(i, "NaN");
            case 'I': return literal(i, "Infinity");
            case '-':
                if (peek(i + 1) == 'I') return literal(i, "-Infinity");
                return number(i);
            default: return number(i);
        }
    }

    // One line's object starting at i (after blank-line handling): appends `field`'s text to
    // `out` and returns the index after the object, or kFail.
    size_t record(size_t i, std::string_view field, std::string &out, std::string &key) const {
        enum { kNone, kText, kOther } have = kNone;
        const size_t doc = out.size();
        if (peek(i) != '{') return kFail;
        i = ws(i + 1);
        if (peek(i) == '}') return kFail;  // {}: no field
        for (;;) {
            if (peek(i) != '"') return kFail;
            // The key: compared in place when it has no escape (the usual case), else unescaped.
            bool lone = false, match;
            const size_t e = plain_run(i + 1);
            if (peek(e) == '"') {
                match = std::string_view(reinterpret_cast<const char *>(s + i + 1), e - i - 1) == field;
                i = e + 1;
            } else {
                key.clear();
                if ((i = string(i + 1, &key, lone)) == kFail) return kFail;
                match = !lone && key == field;
            }
            i = ws(i);
            if (peek(i) != ':') return kFail;
            i = ws(i + 1);
            if (match) {
                out.resize(doc);  // a duplicate key: json keeps the last value
                if (peek(i) == '"') {
                    lone = false;
                    if ((i = string(i + 1, &out, lone)) == kFail) return kFail;
                    have = lone ? kOther : kText;
                } else {
                    if ((i = value(i, 1)) == kFail) return kFail;
                    have = kOther;
                }
            } else if ((i = value(i, 1)) == kFail) {
                return kFail;
            }
            i = ws(i);
            if (peek(i) == '}') break;
            if (peek(i) != ',') return kFail;
            i = ws(i + 1);
        }
        return have == kText ? i + 1 : kFail;
    }
};

}  // namespace

// The documents of the jsonl lines `s[0, n)` (lines end at LF; the last one may not): each
// line's top-level `field` as UTF-8, joined by 0xFF into `out`, with `docs` the number of
// documents and `lines` the number of lines. False, with `out` unspecified, when any line is
// not certainly read as Python reads it (see the file comment).
bool extract(const uint8_t *s, size_t n, std::string_view field, std::string &out, size_t &docs, size_t &lines) {
    out.clear();
    docs = 0;
    lines = 1;
    if (!bpe::valid_utf8(s, n)) return false;
    out.reserve(n);  // a document is never longer than its line
    const Reader r{s, n};
    std::string key;
    size_t i = 0;
    for (;;) {
        // Leading blanks; a line of only blanks (bytes.strip's set) is skipped.
        size_t j = i;
        bool odd = false;  // VT / FF: blank for bytes.strip, not whitespace for json
        for (; j < n && (is_ws(s[j]) || s[j] == '\v' || s[j] == '\f'); ++j) odd |= !is_ws(s[j]);
        if (j < n && s[j] != '\n') {
            if (odd) return false;
            if (docs) out.push_back(char(kDocSep));
            j = r.record(j, field, out, key);
            if (j == kFail) return false;
            ++docs;
            j = r.ws(j);
        }
        if (j >= n) return true;
        if (s[j] != '\n') return false;  // something after the object
        i = j + 1;
        ++lines;
    }
}

}  // namespace bpe::jsonl

namespace {

nb::object py_jsonl_texts(nb::bytes data, nb::bytes field) {
    std::string out;
    size_t docs = 0, lines = 0;
    bool ok;
    {
        const auto *s = static_cast<const uint8_t *>(data.data());
        const std::string_view f(field.c_str(), field.size());
        nb::gil_scoped_release release;  // `data` and `field` are immutable bytes held by the caller
        ok = bpe::jsonl::extract(s, data.size(), f, out, docs, lines);
    }
    if (!ok) return nb::none();
    return nb::make_tuple(nb::bytes(out.data(), out.size()), docs, lines);
}

}  // namespace

void register_jsonl(nb::module_ &m) {
    m.def("jsonl_texts", &py_jsonl_texts, nb::arg("data"), nb::arg("field"),
          "``(documents joined by b'\\xff', documents, lines)`` of the jsonl lines ``data`` (field\n"
          "``field``, UTF-8), exactly as ``json.loads`` of each line reads them; None when any line is\n"
          "not certainly valid (broken JSON, a missing or non-string field, invalid UTF-8, a lone\n"
          "surrogate, ...): the caller then reads the block in Python. Releases the GIL.");
}
