// What scanner.cpp offers the rest of the native core (the scanners themselves: scanner_impl.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace bpe {

// Calls f(word, length, count) for each word of packed counts (``WordCounter.pack``), in their
// order; throws std::invalid_argument on a malformed buffer (before calling f: all or nothing).
// The merge engine loads the words of a first counting flush this way (merge_build.cpp).
void unpack_counts(const uint8_t *p, size_t n, const std::function<void(const uint8_t *, size_t, uint64_t)> &f);

}  // namespace bpe
