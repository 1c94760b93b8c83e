// The GPT-2 pre-tokenizer, shared by the counter (scanner.cpp) and the encoder (encoder.cpp).
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace bpe {

// Appends to `ends` the end offset of each GPT-2 pre-token of `text`, a special-free UTF-8
// string, exactly as `regex.finditer(GPT2_PATTERN, text)` splits it (pieces are contiguous,
// so piece i is [ends[i-1], ends[i]) with ends[-1] = 0). Thread-safe; never touches Python.
void gpt2_split(std::string_view text, std::vector<size_t> &ends);

}  // namespace bpe
