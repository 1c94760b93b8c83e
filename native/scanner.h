// The GPT-2 pre-tokenizer, shared by the counter (scanner.cpp) and the encoder (encoder.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

namespace bpe {

// Appends to `ends` the end offset of each GPT-2 pre-token of `text`, a special-free UTF-8
// string, exactly as `regex.finditer(GPT2_PATTERN, text)` splits it (pieces are contiguous,
// so piece i is [ends[i-1], ends[i]) with ends[-1] = 0). Thread-safe; never touches Python.
void gpt2_split(std::string_view text, std::vector<size_t> &ends);

// Calls f(word, length, count) for each word of packed counts (``WordCounter.pack``), in their
// order; throws std::invalid_argument on a malformed buffer (before calling f: all or nothing).
// The merge engine loads the words of a first counting flush this way (merge_engine.cpp).
void unpack_counts(const uint8_t *p, size_t n, const std::function<void(const uint8_t *, size_t, uint64_t)> &f);

}  // namespace bpe
