// UTF-8 validation 32 bytes at a time with AVX2, where the CPU has it.
//
// Why: planning checks every byte of every input once before anything is counted, and counting
// checks each chunk again; the scalar loop (utf8.h's utf8_invalid_at) ran at ~6 GB/s on OWT-like
// text, where one byte in ~80 is not ASCII and each such character takes a few branches. This
// is the lookup algorithm of Keiser and Lemire ("Validating UTF-8 in less than one instruction
// per byte", Software: Practice and Experience, 2021): each byte is judged together with the
// byte before it through three 16-entry tables (that byte's high nibble, its low nibble, this
// byte's high nibble), whose AND has a bit set for every error a two-byte window can show; the
// one rule that needs a longer window (a third or fourth byte must be a continuation, and only
// then) is checked with the bytes two and three back. No branch depends on the text but "is this
// block all ASCII". Compiled for AVX2 by a function attribute and chosen at run time, so the
// extension still runs on any x86-64 (and on other CPUs the scalar loop is used). It says only
// whether the bytes are valid; utf8_invalid_at finds where they are not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define BPE_UTF8_AVX2 1
#endif

namespace bpe {

#ifdef BPE_UTF8_AVX2

inline bool cpu_has_avx2() {
    static const bool has = __builtin_cpu_supports("avx2");
    return has;
}

namespace utf8_avx2 {

// The error bits: each names a way two adjacent bytes can be wrong (the byte before, this byte).
constexpr uint8_t kTooShort = 1 << 0;    // a lead byte not followed by a continuation
constexpr uint8_t kTooLong = 1 << 1;     // ASCII followed by a continuation
constexpr uint8_t kOverlong3 = 1 << 2;   // E0 followed by 80..9F
constexpr uint8_t kTooLarge = 1 << 3;    // F4 90.., F5.. and above: past U+10FFFF
constexpr uint8_t kSurrogate = 1 << 4;   // ED followed by A0..BF
constexpr uint8_t kOverlong2 = 1 << 5;   // C0, C1
constexpr uint8_t kTooLarge1000 = 1 << 6;  // F5.. followed by 80..8F
constexpr uint8_t kOverlong4 = 1 << 6;   // F0 followed by 80..8F (shares the bit: same second byte)
constexpr uint8_t kTwoConts = 1 << 7;    // a continuation after a continuation: right only as a 3rd/4th byte
constexpr uint8_t kCarry = kTooShort | kTooLong | kTwoConts;  // decided by the high nibbles alone

__attribute__((target("avx2"))) inline __m256i table(uint8_t a0, uint8_t a1, uint8_t a2, uint8_t a3, uint8_t a4,
                                                     uint8_t a5, uint8_t a6, uint8_t a7, uint8_t a8, uint8_t a9,
                                                     uint8_t a10, uint8_t a11, uint8_t a12, uint8_t a13,
                                                     uint8_t a14, uint8_t a15) {
    return _mm256_setr_epi8(char(a0), char(a1), char(a2), char(a3), char(a4), char(a5), char(a6), char(a7),
                            char(a8), char(a9), char(a10), char(a11), char(a12), char(a13), char(a14), char(a15),
                            char(a0), char(a1), char(a2), char(a3), char(a4), char(a5), char(a6), char(a7),
                            char(a8), char(a9), char(a10), char(a11), char(a12), char(a13), char(a14), char(a15));
}

struct State {
    __m256i error, prev, prev_incomplete;
};

// Judges the 32 bytes `in` following `st.prev`, accumulating into `st.error`.
__attribute__((target("avx2"))) inline void step(State &st, __m256i in) {
    if (_mm256_movemask_epi8(in) == 0) {  // all ASCII: only a character the last block cut off is wrong
        st.error = _mm256_or_si256(st.error, st.prev_incomplete);
        st.prev = in;
        return;
    }
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    // the bytes 1, 2 and 3 before each byte of `in` (across the block boundary)
    const __m256i joined = _mm256_permute2x128_si256(st.prev, in, 0x21);
    const __m256i prev1 = _mm256_alignr_epi8(in, joined, 15);
    const __m256i prev2 = _mm256_alignr_epi8(in, joined, 14);
    const __m256i prev3 = _mm256_alignr_epi8(in, joined, 13);
    const __m256i byte1_high = _mm256_shuffle_epi8(
        table(kTooLong, kTooLong, kTooLong, kTooLong, kTooLong, kTooLong, kTooLong, kTooLong,  // 0_______
              kTwoConts, kTwoConts, kTwoConts, kTwoConts,                                      // 10______
              kTooShort | kOverlong2,                                                          // 1100____
              kTooShort,                                                                       // 1101____
              kTooShort | kOverlong3 | kSurrogate,                                             // 1110____
              kTooShort | kTooLarge | kTooLarge1000 | kOverlong4),                             // 1111____
        _mm256_and_si256(_mm256_srli_epi16(prev1, 4), low4));
    const uint8_t big = kCarry | kTooLarge | kTooLarge1000;
    const __m256i byte1_low = _mm256_shuffle_epi8(
        table(kCarry | kOverlong3 | kOverlong2 | kOverlong4,  // ____0000
              kCarry | kOverlong2,                            // ____0001
              kCarry, kCarry,                                 // ____001_
              kCarry | kTooLarge,                             // ____0100
              big, big, big,                                  // ____0101, ____011_
              big, big, big, big, big,                        // ____1000 .. ____1100
              big | kSurrogate,                               // ____1101
              big, big),                                      // ____111_
        _mm256_and_si256(prev1, low4));
    const uint8_t cont = kTooLong | kOverlong2 | kTwoConts;
    const __m256i byte2_high = _mm256_shuffle_epi8(
        table(kTooShort, kTooShort, kTooShort, kTooShort, kTooShort, kTooShort, kTooShort, kTooShort,  // 0_______
              cont | kOverlong3 | kTooLarge1000 | kOverlong4,                                         // 1000____
              cont | kOverlong3 | kTooLarge,                                                          // 1001____
              cont | kSurrogate | kTooLarge, cont | kSurrogate | kTooLarge,                           // 101_____
              kTooShort, kTooShort, kTooShort, kTooShort),                                            // 11______
        _mm256_and_si256(_mm256_srli_epi16(in, 4), low4));
    const __m256i special = _mm256_and_si256(_mm256_and_si256(byte1_high, byte1_low), byte2_high);
    // a byte 2 after a 3- or 4-byte lead, or 3 after a 4-byte lead, must be a continuation (the
    // kTwoConts bit says it is one after another): saturating subtraction leaves bit 7 set only
    // for a lead of E0.. two bytes back or F0.. three bytes back
    const __m256i must23 = _mm256_or_si256(_mm256_subs_epu8(prev2, _mm256_set1_epi8(char(0xE0 - 0x80))),
                                           _mm256_subs_epu8(prev3, _mm256_set1_epi8(char(0xF0 - 0x80))));
    const __m256i must23_80 = _mm256_and_si256(must23, _mm256_set1_epi8(char(0x80)));
    st.error = _mm256_or_si256(st.error, _mm256_xor_si256(must23_80, special));
    // a lead byte too near the block's end for its continuations: wrong unless the next block has them
    const __m256i max_complete = _mm256_setr_epi8(
        char(0xFF), char(0xFF), char(0xFF), char(0xFF), char(0xFF), char(0xFF), char(0xFF), char(0xFF),
        char(0xFF), char(0xFF), char(0xFF), char(0xFF), char(0xFF), char(0xFF), char(0xFF), char(0xFF),
        char(0xFF), char(0xFF), char(0xFF), char(0xFF), char(0xFF), char(0xFF), char(0xFF), char(0xFF),
        char(0xFF), char(0xFF), char(0xFF), char(0xFF), char(0xFF), char(0xF0 - 1), char(0xE0 - 1), char(0xC0 - 1));
    st.prev_incomplete = _mm256_subs_epu8(in, max_complete);
    st.prev = in;
}

}  // namespace utf8_avx2

// Whether s[0, n) is well-formed UTF-8, by the rules of the strict decoder (no overlongs,
// surrogates or code points above U+10FFFF). Needs AVX2 (cpu_has_avx2).
__attribute__((target("avx2"))) inline bool valid_utf8_avx2(const uint8_t *s, size_t n) {
    utf8_avx2::State st{_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    size_t i = 0;
    for (; i + 32 <= n; i += 32) utf8_avx2::step(st, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(s + i)));
    if (i < n) {  // the last bytes, followed by zeros (ASCII): a character they cut short shows
        uint8_t last[32] = {0};
        std::memcpy(last, s + i, n - i);
        utf8_avx2::step(st, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(last)));
    }
    st.error = _mm256_or_si256(st.error, st.prev_incomplete);
    return _mm256_testz_si256(st.error, st.error) != 0;
}

#endif  // BPE_UTF8_AVX2

}  // namespace bpe
