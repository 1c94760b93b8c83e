// The pre-tokenizers (GPT-2's `scan`, and `scan_cl100k` / `scan_o200k` for the tiktoken family,
// chosen by `scan_pattern`) and the word-counting pieces, free of Python so they can be tested
// alone (tests/text/test_scanner.py builds them under AddressSanitizer/UBSan); the one splitter
// (splitter.h) builds on the scanners, and the counter (scanner.cpp) and the encoder
// (encoder.cpp) use both. Header-only so that the scanners and the table's `add` inline into the
// callers' loops.
//
// Performance notes (why the code looks the way it does):
// * Each pattern is a fixed alternation, so instead of a backtracking regex engine we run a
//   hand-written scanner over code points: each match is decided by the class of at most two
//   characters (an optional leading character and the first character of a run), then a run of
//   one class is consumed. Where the regex backtracks (GPT-2's `\s+(?!\S)`: "a whitespace run
//   followed by a non-space character gives back its last character"; o200k's case runs) the
//   scanner computes the end the backtracking reaches, with the reason beside it.
// * Classes come from two-stage tables (GPT-2's classes ~36 KB, tiktoken's flags ~40 KB); ASCII,
//   which dominates most corpora, is looked up without decoding.
// * Counting keys are (pointer, length) views into the caller's bytes: the input stays alive
//   for the whole call, so hashing and comparing touch only the bytes already in cache.
#pragma once

// Its parts: char_classes.h (characters and runs of one class), scan_gpt2.h, scan_tiktoken.h,
// scan_superword.h (SuperBPE's stage 2),
// word_table.h (the counting table); here the patterns' dispatch.
#include <cstddef>
#include <cstdint>

#include "char_classes.h"
#include "scan_gpt2.h"
#include "scan_superword.h"
#include "scan_tiktoken.h"
#include "word_table.h"

namespace bpe::detail {

// The patterns with a native scanner, one row each: its enumerator and the name Python passes
// (a PatternSpec's `scanner` in bpe_store/text/pretokenize.py; _core.SCANNERS exports the names
// and tests/text/test_pattern_registry.py holds them equal to the registry's). A new scanner is a
// row here, its case in `scan_pattern` below and in splitter.h's cut rules (pattern_local_cut,
// same_class_at), and its PatternSpec.
#define BPE_NATIVE_PATTERNS(X) \
    X(kGpt2, "gpt2")           \
    X(kCl100k, "cl100k")       \
    X(kO200k, "o200k")         \
    X(kLlama3, "llama3")       \
    X(kQwen2, "qwen2")         \
    X(kSuperword, "superword")

// kNone: a user's own regex, which only special tokens may cut and which Python scans with `regex`.
#define BPE_PATTERN_ENUMERATOR(id, name) id,
enum class Pattern : uint8_t { kNone, BPE_NATIVE_PATTERNS(BPE_PATTERN_ENUMERATOR) };
#undef BPE_PATTERN_ENUMERATOR

// Each native pattern's name, in the table's order.
struct PatternName {
    Pattern pattern;
    const char *name;
};
#define BPE_PATTERN_NAME(id, name) {Pattern::id, name},
inline constexpr PatternName kPatternNames[] = {BPE_NATIVE_PATTERNS(BPE_PATTERN_NAME)};
#undef BPE_PATTERN_NAME

// Calls emit(start, end) for each pre-token of s[0, n) under `pattern` (not kNone). Why a switch
// per call and not per pre-token: callers scan whole special-free pieces, so the dispatch costs
// once per piece and each scanner's loop inlines `emit`.
template <class Emit>
inline void scan_pattern(Pattern pattern, const uint8_t *s, size_t n, Emit &&emit) {
    switch (pattern) {
        case Pattern::kCl100k: return scan_cl100k<true, 3>(s, n, emit);
        case Pattern::kLlama3: return scan_cl100k<false, 3>(s, n, emit);
        case Pattern::kQwen2: return scan_cl100k<false, 1>(s, n, emit);
        case Pattern::kO200k: return scan_o200k(s, n, emit);
        case Pattern::kSuperword: return scan_superword(s, n, emit);
        default: return scan(s, n, emit);
    }
}

}  // namespace bpe::detail
