// bpe_store._core: the Python face of the native core. Each concept lives in its own file and
// registers its functions here; this file only wires them into one module.
#include <nanobind/nanobind.h>

namespace nb = nanobind;

void register_scanner(nb::module_ &m);       // scanner.cpp: the pattern scanners and word counting
void register_word_ids(nb::module_ &m);      // word_ids.cpp: the store's words while counting
void register_merge_engine(nb::module_ &m);  // merge_engine.cpp: the incremental merge loop
void register_encoder(nb::module_ &m);       // encoder.cpp: BPE encoding by merge rank
void register_jsonl(nb::module_ &m);         // jsonl.cpp: the text field of jsonl lines
void register_splitter(nb::module_ &m);      // splitter.cpp: where text may be cut (specials, safe cuts)
void register_store_db(nb::module_ &m);      // store_db.cpp: the store's bulk writes and reads, native
void register_sql_format(nb::module_ &m);    // sql_format.cpp: sql --format csv|json|jsonl, rows formatted natively
void register_tiktoken_ranks(nb::module_ &m);  // tiktoken_ranks.cpp: .tiktoken ranks files read natively
void register_tiktoken_merges(nb::module_ &m);  // tiktoken_merges.cpp: tiktoken's rule as one merge per token
void register_words_digest(nb::module_ &m);  // words_digest.cpp: the digest of a store's words
void register_merge_log_reader(nb::module_ &m);  // merge_log_reader.cpp: a store's merge log read natively

NB_MODULE(_core, m) {
    m.doc() = "bpe_store native core: hot loops only (scanning, counting, merging, encoding).";
    m.attr("ABI_VERSION") = 1;
    register_scanner(m);
    register_word_ids(m);
    register_merge_engine(m);
    register_encoder(m);
    register_jsonl(m);
    register_splitter(m);
    register_store_db(m);
    register_sql_format(m);
    register_tiktoken_ranks(m);
    register_tiktoken_merges(m);
    register_words_digest(m);
    register_merge_log_reader(m);
}
