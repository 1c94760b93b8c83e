// The Python face of the one splitter (splitter.h): `bpe_store._core.Splitter`, used by the
// counting planner (count.plan_chunks), the block readers (inputs.text_blocks) and the file and
// stream encoders (tokenizer.py), so that none of them keeps its own copy of the cut rules.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "splitter.h"

namespace nb = nanobind;

std::vector<std::string> special_list(const std::vector<nb::bytes> &specials);  // scanner.cpp

// The native scanner of a pattern name (pretokenize.NATIVE_SCANNERS' values; '' = none, for a
// user's own regex). Shared with scanner.cpp and encoder.cpp: the one place names are read, from
// the one table of them (scanner_impl.h's BPE_NATIVE_PATTERNS).
bpe::detail::Pattern pattern_of(const std::string &name) {
    using bpe::detail::Pattern;
    for (const auto &p : bpe::detail::kPatternNames)
        if (name == p.name) return p.pattern;
    if (name.empty()) return Pattern::kNone;
    std::string known;  // 'gpt2', 'cl100k', ... or '' (none)
    for (const auto &p : bpe::detail::kPatternNames) known += "'" + std::string(p.name) + "', ";
    known.resize(known.size() - 2);
    throw nb::value_error(("pattern must be " + known + " or '' (none)").c_str());
}

namespace {

class Splitter {
  public:
    Splitter(const std::vector<nb::bytes> &specials, const std::string &rule)
        : specials_(special_list(specials)), pattern_(pattern_of(rule)), cutter_(specials_, pattern_) {}
    Splitter(const Splitter &) = delete;  // cutter_ refers to this object's specials_
    Splitter &operator=(const Splitter &) = delete;

    // first/last: -1 when there is none. Every call releases the GIL; `data` is immutable.
    // first/last: lo and hi are clamped to [0, len(data)] (hi <= lo: no cut).
    int64_t first_cut(nb::bytes data, int64_t lo, int64_t hi) const {
        const auto *s = static_cast<const uint8_t *>(data.data());
        const size_t n = data.size();
        nb::gil_scoped_release release;
        return as_int(cutter_.first(s, n, clamp(lo, n), clamp(hi, n)));
    }

    int64_t last_cut(nb::bytes data, int64_t lo, int64_t hi) const {
        const auto *s = static_cast<const uint8_t *>(data.data());
        const size_t n = data.size();
        nb::gil_scoped_release release;
        return as_int(cutter_.last(s, n, clamp(lo, n), clamp(hi, n)));
    }

    int64_t scan_cut(nb::bytes data, size_t target, size_t max_bytes, size_t margin) const {
        if (pattern_ == bpe::detail::Pattern::kNone) throw nb::value_error("scan_cut needs a pattern with a native scanner");
        const auto *s = static_cast<const uint8_t *>(data.data());
        const size_t n = data.size();
        nb::gil_scoped_release release;
        const size_t q = bpe::detail::plan_cut(pattern_, s, n, specials_, target, max_bytes, margin);
        return as_int(q == SIZE_MAX || specials_.spans(s, n, q) ? SIZE_MAX : q);
    }

    size_t max_len() const { return specials_.max_len(); }
    bool has_local_rule() const { return cutter_.has_local_rule(); }

  private:
    static size_t clamp(int64_t v, size_t n) { return v < 0 ? 0 : std::min(size_t(v), n); }
    static int64_t as_int(size_t q) { return q == SIZE_MAX ? -1 : int64_t(q); }
    bpe::detail::SpecialSplitter specials_;
    bpe::detail::Pattern pattern_;
    bpe::detail::Cutter cutter_;  // refers to specials_ (declared before it)
};

}  // namespace

void register_splitter(nb::module_ &m) {
    nb::list names;
    for (const auto &p : bpe::detail::kPatternNames) names.append(p.name);
    m.attr("SCANNERS") = nb::tuple(names);  // what PatternSpec.scanner may name
    nb::class_<Splitter>(m, "Splitter",
                         "Where text may be cut without changing pre-tokens or the special-token split "
                         "(native/splitter.h states the rules).")
        .def(nb::init<const std::vector<nb::bytes> &, const std::string &>(), nb::arg("specials"), nb::arg("rule"),
             "``specials``: the special tokens as UTF-8 bytes (the document separator 0xFF may be one); "
             "``rule``: the pattern's native scanner and local cut rule, 'gpt2', 'cl100k' (GPT-4), 'o200k', "
             "'llama3' or 'qwen2', or '' for a pattern without one (only special tokens are cut points).")
        .def_prop_ro("max_len", &Splitter::max_len, "Length of the longest special token (0: none).")
        .def("first_cut", &Splitter::first_cut, nb::arg("data"), nb::arg("lo"), nb::arg("hi"),
             "The first safe cut q of ``data`` with lo <= q < hi, or -1: the start of a special token, or "
             "a point its pattern's rule decides from the neighbouring characters; never inside an occurrence "
             "of a special. ``data`` may begin anywhere; bytes from hi on are context only.")
        .def_prop_ro("has_local_rule", &Splitter::has_local_rule,
                     "Whether the pattern has cut points besides special tokens.")
        .def("last_cut", &Splitter::last_cut, nb::arg("data"), nb::arg("lo"), nb::arg("hi"),
             "As ``first_cut``, the last such q.")
        .def("scan_cut", &Splitter::scan_cut, nb::arg("data"), nb::arg("target"), nb::arg("max_bytes"),
             nb::arg("margin"),
             "The first offset >= ``target`` where a chunk may start, found by scanning pre-tokens from "
             "the start of ``data``, which must be a chunk start (a pattern with a native scanner only; see "
             "plan_cut in splitter.h), or -1; the last ``margin`` bytes are context only.");
}
