// Memory for the encoder's large random-access tables (the piece cache, the pair table, the token
// index) on 2 MiB pages where the OS gives them (Linux transparent huge pages, asked for with
// madvise: the default setting, "madvise", gives them only to regions that ask).
//
// Why: every piece the encoder sees reads a random slot of a 4 MiB piece cache, and every piece it
// has not cached a random slot of a 4-8 MiB token index and of the pair table. On 4 KiB pages each
// such read is also a TLB miss and a page walk (perf put 40 % of the piece loop's samples on the
// instruction after its slot prefetch: a prefetch that misses the TLB walks the page table first).
// On 2 MiB pages these tables are a handful of TLB entries.
//
// Blocks under 2 MiB come from operator new (a huge page would be mostly empty). Elsewhere than
// Linux, or where the kernel refuses, the memory is ordinary pages: the same results, slower.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace bpe::enc {

constexpr size_t kHugePage = size_t(1) << 21;

inline size_t huge_length(size_t bytes) { return (bytes + kHugePage - 1) & ~(kHugePage - 1); }

// `bytes` of zeroed memory (an anonymous mapping: pages are zero until first touched); free it with
// huge_free(p, bytes).
inline void *huge_alloc(size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (bytes >= kHugePage) {
        const size_t len = huge_length(bytes);
        // one huge page more, to start on a 2 MiB boundary; the ends are given back
        void *m = mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) throw std::bad_alloc();
        const uintptr_t base = reinterpret_cast<uintptr_t>(m);
        const uintptr_t at = (base + kHugePage - 1) & ~uintptr_t(kHugePage - 1);
        if (at > base) munmap(m, at - base);
        if (const uintptr_t end = base + len + kHugePage; end > at + len)
            munmap(reinterpret_cast<void *>(at + len), end - (at + len));
        madvise(reinterpret_cast<void *>(at), len, MADV_HUGEPAGE);  // a refusal leaves 4 KiB pages
        return reinterpret_cast<void *>(at);
    }
#endif
    return ::operator new(bytes);
}

inline void huge_free(void *p, size_t bytes) noexcept {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (bytes >= kHugePage) {
        munmap(p, huge_length(bytes));
        return;
    }
#endif
    ::operator delete(p);
}

// A std::vector allocator over huge_alloc: vector<T, HugeAlloc<T>> of a large table.
template <class T>
struct HugeAlloc {
    using value_type = T;
    HugeAlloc() = default;
    template <class U>
    HugeAlloc(const HugeAlloc<U> &) noexcept {}
    T *allocate(size_t n) { return static_cast<T *>(huge_alloc(n * sizeof(T))); }
    void deallocate(T *p, size_t n) noexcept { huge_free(p, n * sizeof(T)); }
    template <class U>
    bool operator==(const HugeAlloc<U> &) const noexcept { return true; }
    template <class U>
    bool operator!=(const HugeAlloc<U> &) const noexcept { return false; }
};

}  // namespace bpe::enc
