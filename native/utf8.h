// The native core's one UTF-8 validator (the strict decoder's rule), used by the scanner's
// counting, the jsonl reader and the encoder.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "utf8_avx2.h"

namespace bpe {

// Offset of the first byte that is not valid UTF-8 (as Python's strict decoder sees it: no
// overlong forms, no surrogates, nothing past U+10FFFF), or n if all of it is valid.
// Why this one (there were two): explicit byte ranges read more plainly than going through the
// scanner's code-point decoder, and it was as fast or faster: enwiki-100M in 15-25 ms against
// 36-48 ms, zhwiki-20M 43-50 against 53-68 ms.
inline size_t utf8_invalid_at(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        // why: ASCII dominates; skip 8 bytes at a time while no high bit is set
        while (i + 8 <= n) {
            uint64_t w;
            std::memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        const uint8_t c = s[i];
        if (c < 0x80) {
            ++i;
            continue;
        }
        size_t len;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) len = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else return i;
        if (i + len > n) return i;
        if (s[i + 1] < lo || s[i + 1] > hi) return i;
        for (size_t k = 2; k < len; ++k)
            if ((s[i + k] & 0xC0) != 0x80) return i;
        i += len;
    }
    return n;
}

// Whether s[0, n) is well-formed UTF-8: 32 bytes at a time where the CPU has AVX2 (utf8_avx2.h:
// OWT-like text ~20 GB/s against ~6 for the loop above), else utf8_invalid_at.
inline bool valid_utf8(const uint8_t *s, size_t n) {
#ifdef BPE_UTF8_AVX2
    if (n >= 32 && cpu_has_avx2()) return valid_utf8_avx2(s, n);
#endif
    return utf8_invalid_at(s, n) == n;
}

}  // namespace bpe
