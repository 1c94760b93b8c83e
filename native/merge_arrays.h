// The merge engine's plain memory: its fixed-width types, and the two arrays its largest tables
// live in: PodVec (grows by realloc) and BigArray (sized once, mapped with huge pages).
// Part of the merge engine (merge_engine.h says how the parts fit).
#pragma once

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <type_traits>
#include <utility>

namespace bpe::merge {

using u8 = uint8_t;
using u32 = uint32_t;
using u64 = uint64_t;
using i64 = int64_t;

constexpr u32 kNone = 0xFFFFFFFFu;

inline u64 pair_key(u32 a, u32 b) { return (u64(a) << 32) | b; }

// Gives the free memory malloc keeps back to the OS, and from the first call on has blocks of
// 1 MiB or more mapped on their own. Why: glibc raises its mmap threshold (up to 32 MiB) each
// time a large block is freed, so later large blocks (a counter's tables, the engine's arrays as
// they grow) come from the heap, where they stay resident once freed, and realloc must copy
// them: on enwiki-100M -> 32K, 75 MB of the process's RSS was free heap when merging began, and
// the peak fell from 215 to 151 MB with the threshold fixed. Cheap: a walk over the free lists.
void release_free_memory();  // merge_engine.cpp

// Gives the whole pages inside [p, p + bytes) back to the OS (Linux: MADV_DONTNEED); they read
// as zero when next touched. For freed parts of a large array the process keeps (the pair ->
// words pool): RSS, not the address space, is what a run pays for. Elsewhere nothing.
inline void release_pages(void *p, size_t bytes) {
#if defined(__linux__) && defined(MADV_DONTNEED)
    constexpr uintptr_t kPage = 4096;  // whole pages of any larger page size are whole 4 KiB pages too
    const uintptr_t lo = (uintptr_t(p) + kPage - 1) & ~(kPage - 1);
    const uintptr_t hi = (uintptr_t(p) + bytes) & ~(kPage - 1);
    if (hi > lo) madvise(reinterpret_cast<void *>(lo), hi - lo, MADV_DONTNEED);
#else
    (void)p;
    (void)bytes;
#endif
}

// A growable array of trivially copyable T on malloc/realloc. Why not std::vector for the arrays
// that grow while merging (pair slots, heap): a vector grows by copying into a new buffer while
// the old one is still held, which made the peak of a run (22 MB of slots copied at once on
// enwiki-100M); realloc moves a large block by remapping its pages (glibc mremap), and capacity
// not yet written is not resident.
template <class T>
class PodVec {
    static_assert(std::is_trivially_copyable_v<T>, "PodVec moves elements with realloc");

  public:
    PodVec() = default;
    PodVec(const PodVec &) = delete;
    PodVec &operator=(const PodVec &) = delete;
    ~PodVec() { std::free(p_); }

    size_t size() const { return n_; }
    size_t capacity() const { return cap_; }
    bool empty() const { return n_ == 0; }
    T &operator[](size_t i) { return p_[i]; }
    const T &operator[](size_t i) const { return p_[i]; }
    T *begin() { return p_; }
    T *end() { return p_ + n_; }
    const T *begin() const { return p_; }
    const T *end() const { return p_ + n_; }
    T &back() { return p_[n_ - 1]; }
    void pop_back() { --n_; }
    void push_back(const T &v) {
        if (n_ == cap_) reserve(cap_ + cap_ / 2 + 1024);
        p_[n_++] = v;
    }
    void reserve(size_t cap) {
        if (cap <= cap_) return;
        T *q = static_cast<T *>(std::realloc(p_, cap * sizeof(T)));
        if (q == nullptr) throw std::bad_alloc();
        p_ = q;
        cap_ = cap;
    }
    void release() {
        std::free(p_);
        p_ = nullptr;
        n_ = cap_ = 0;
    }

  private:
    T *p_ = nullptr;
    size_t n_ = 0, cap_ = 0;
};

// A fixed-size, zero-filled array of trivially copyable T for the engine's largest arrays (the
// words' records and tokens), sized once when the words are loaded. Why not std::vector: these
// arrays are read at random by every merge (a frequent pair's holders are scattered over all
// words), and with 4 KiB pages nearly every visit also misses the TLB; on a VM (nested paging)
// a TLB miss costs a two-level page walk. An array of 4 MiB or more is mapped on 2 MiB
// boundaries with MADV_HUGEPAGE (Linux's THP in "madvise" mode, the common default), so one TLB
// entry covers 2 MiB instead of 4 KiB. Elsewhere, or if the kernel refuses, it is plain memory.
template <class T>
class BigArray {
    static_assert(std::is_trivially_copyable_v<T>, "BigArray holds plain records");
    static constexpr size_t kHuge = size_t(2) << 20;

  public:
    BigArray() = default;
    BigArray(const BigArray &) = delete;
    BigArray &operator=(const BigArray &) = delete;
    ~BigArray() { release(); }

    // n zero-filled elements (the old ones are dropped).
    void assign_zero(size_t n) {
        release();
        if (n == 0) return;
        if (n > (SIZE_MAX - 2 * kHuge) / sizeof(T)) throw std::bad_alloc();
        const size_t bytes = n * sizeof(T);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
        if (bytes >= 2 * kHuge) {
            const size_t len = (bytes + kHuge - 1) / kHuge * kHuge + kHuge;  // room to align
            void *m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (m == MAP_FAILED) throw std::bad_alloc();
            const uintptr_t at = (uintptr_t(m) + kHuge - 1) & ~uintptr_t(kHuge - 1);
            madvise(reinterpret_cast<void *>(at), len - (at - uintptr_t(m)), MADV_HUGEPAGE);  // a hint
            map_ = m;
            map_len_ = len;
            p_ = reinterpret_cast<T *>(at);  // fresh anonymous pages are zero
            n_ = n;
            return;
        }
#endif
        p_ = static_cast<T *>(std::calloc(n, sizeof(T)));
        if (p_ == nullptr) throw std::bad_alloc();
        n_ = n;
    }
    void release() {
#if defined(__linux__)
        if (map_ != nullptr) munmap(map_, map_len_);
        else std::free(p_);
#else
        std::free(p_);
#endif
        map_ = nullptr;
        map_len_ = 0;
        p_ = nullptr;
        n_ = 0;
    }

    // Keeps the first n elements (n <= size()) and gives the memory past them back. Why: the
    // merge engine's arena is sized for its words as bytes, and a replay of many merges (SuperBPE's
    // stage 2: a quarter of that) leaves the rest as padding (MergeEngine::compact_arena).
    void shrink(size_t n) {
        if (n >= n_) return;
#if defined(__linux__)
        if (map_ != nullptr) {
            const uintptr_t page = 4096, end = uintptr_t(map_) + map_len_;
            const uintptr_t keep = (uintptr_t(p_ + n) + page - 1) & ~(page - 1);
            if (keep < end) {
                munmap(reinterpret_cast<void *>(keep), end - keep);
                map_len_ = keep - uintptr_t(map_);
            }
            n_ = n;
            return;
        }
#endif
        if (n == 0) {
            release();
            return;
        }
        T *q = static_cast<T *>(std::realloc(p_, n * sizeof(T)));
        if (q != nullptr) p_ = q;
        n_ = n;
    }
    void swap(BigArray &o) {
        std::swap(p_, o.p_);
        std::swap(n_, o.n_);
        std::swap(map_, o.map_);
        std::swap(map_len_, o.map_len_);
    }

    size_t size() const { return n_; }
    size_t capacity() const { return n_; }
    T &operator[](size_t i) { return p_[i]; }
    const T &operator[](size_t i) const { return p_[i]; }
    T *data() { return p_; }

  private:
    T *p_ = nullptr;
    size_t n_ = 0;
    void *map_ = nullptr;  // the mapping p_ lies in, when mapped
    size_t map_len_ = 0;
};

}  // namespace bpe::merge
