// The merge engine's words saved to a file and read back (SuperBPE's stage 2, docs/superword.md):
// the arena as a replay left it (every word's header and tokens, packed), so that a resume starts
// from it plus the merges logged since, instead of reading every piece from the store and replaying
// stage 1's merges on it again. See merge_engine.h for the whole.
//
// Why: stage 2's checkpoints log merges only (merge_step.py), so a resume used to rebuild the whole
// engine: the pieces read as bytes (~1 byte per input byte), loaded at 4 bytes a byte, stage 1's
// tens of thousands of merges replayed on them; that was most of stage 2's time, and all of what a
// kill -9 cost besides the second of merges it lost. The file is what the replay made (about a
// byte per input byte after the packing); reading it back is a sequential read, and replaying the
// few thousand superword merges logged since is cheap beside stage 1's.
//
// Format (host byte order: the file never leaves the machine that wrote it, and its header says
// whose it is): a header of nine u64 (magic, version, words, arena cells, big counts, the tag the
// caller names the file's contents with (bpe_store/training/stage2_words.py), the hash of the rest,
// how many merges the words reflect, 0), the arena's cells, then (offset, count) of each count of 2^32 or more. A file whose
// header, tag, size or hash is not right is refused (ValueError): the caller then builds from the
// store, so a damaged or stale file costs time, never a wrong merge.
#include "merge_engine.h"

#include <cstdio>
#include <memory>
#include <string>

namespace bpe::merge {

namespace {

constexpr u64 kFileMagic = 0x3153445257535042ull;  // "BPSWRDS1"
constexpr u64 kFileVersion = 1;
constexpr size_t kFileHeader = 9;

// A 64-bit hash of n u32 cells, 2 at a time (multiply and fold); detects damage, not malice.
u64 hash_cells(const u32 *p, size_t n, u64 h) {
    size_t i = 0;
    for (; i + 1 < n; i += 2) {
        const u64 v = u64(p[i]) | u64(p[i + 1]) << 32;
        h = (h ^ v) * 0x9E3779B97F4A7C15ull;
        h ^= h >> 29;
    }
    if (i < n) h = ((h ^ p[i]) * 0x9E3779B97F4A7C15ull) ^ (h >> 31);
    return h;
}

struct FileCloser {
    void operator()(std::FILE *f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

}  // namespace

// Writes the words (the arena as it is, padding included) to `path`.
void MergeEngine::save_words(const std::string &path, u64 tag, u64 merges) {
    Busy busy(this);
    nb::gil_scoped_release unlocked;
    std::vector<u64> big;
    for (const auto &[o, c] : big_counts_) big.insert(big.end(), {u64(o), u64(c)});
    u64 h = hash_cells(ar_.data(), ar_.size(), tag);
    h = hash_cells(reinterpret_cast<const u32 *>(big.data()), 2 * big.size(), h);
    const u64 head[kFileHeader] = {kFileMagic, kFileVersion, n_words_, ar_.size(), big.size() / 2, tag, h, merges, 0};
    File f(std::fopen(path.c_str(), "wb"));
    bool ok = f != nullptr && std::fwrite(head, sizeof(u64), kFileHeader, f.get()) == kFileHeader &&
              std::fwrite(ar_.data(), sizeof(u32), ar_.size(), f.get()) == ar_.size() &&
              std::fwrite(big.data(), sizeof(u64), big.size(), f.get()) == big.size();
    ok = f != nullptr && std::fflush(f.get()) == 0 && ok;
    if (!ok) throw std::runtime_error("cannot write the words file " + path);
}

// Reads the words `save_words` wrote into the arena; ValueError when the file is not one, not
// whole, or not named `tag`.
void MergeEngine::load_words_file(const std::string &path, u64 tag) {
    File f(std::fopen(path.c_str(), "rb"));
    if (!f) throw nb::value_error(("cannot read the words file " + path).c_str());
    u64 head[kFileHeader];
    if (std::fread(head, sizeof(u64), kFileHeader, f.get()) != kFileHeader || head[0] != kFileMagic || head[1] != kFileVersion)
        throw nb::value_error("not a words file of this bpe_store");
    if (head[5] != tag) throw nb::value_error("the words file holds other words or merges");
    if (head[3] >= kNone || head[2] > head[3]) throw nb::value_error("the words file is damaged");
    std::vector<u64> big(2 * head[4]);
    bool ok;
    {
        nb::gil_scoped_release unlocked;
        ar_.assign_zero(head[3]);
        ok = std::fread(ar_.data(), sizeof(u32), ar_.size(), f.get()) == ar_.size() &&
             std::fread(big.data(), sizeof(u64), big.size(), f.get()) == big.size() &&
             std::fgetc(f.get()) == EOF;
        u64 h = hash_cells(ar_.data(), ar_.size(), tag);
        ok = ok && hash_cells(reinterpret_cast<const u32 *>(big.data()), 2 * big.size(), h) == head[6];
    }
    if (!ok) throw nb::value_error("the words file is damaged (its size or hash)");
    n_words_ = head[2];
    for (size_t i = 0; i < big.size(); i += 2) big_counts_.emplace(u32(big[i]), i64(big[i + 1]));
}

// The engine from a words file (save_words), then `replay` (the merges logged since) as a resume
// applies them, its pairs counted pruned (merge_prune.cpp) whether or not anything was replayed.
MergeEngine::MergeEngine(const std::string &path, u64 tag, nb::list token_bytes, u32 n_specials,
                         u32 first_merge_id, i64 next_rank, u64 max_token_length, u32 max_words, nb::bytes replay)
    : first_merge_id_(first_merge_id), next_rank_(next_rank), min_count_(1), max_len_(max_token_length),
      max_words_(max_words) {
    check_limits(next_rank, 1);
    load_vocab(token_bytes);
    load_words_file(path, tag);
    size_t words = 0;
    for (size_t o = 0; o < ar_.size(); o = next_word(o), ++words) {  // lengths and ids: checked once
        if (o + kHdr > ar_.size() || o + kHdr + ar_[o + kLen] > ar_.size())
            throw nb::value_error("the words file is damaged (a word's length)");
        for (u32 i = 0; i < ar_[o + kLen]; ++i)
            if (ar_[o + kHdr + i] >= tb_.size() || !tb_ok_[ar_[o + kHdr + i]])
                throw nb::value_error("the words file holds a token the vocabulary lacks");
    }
    if (words != n_words_) throw nb::value_error("the words file is damaged (its number of words)");
    build(n_specials, replay, true);
}

}  // namespace bpe::merge
