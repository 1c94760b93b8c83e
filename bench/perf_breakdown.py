#!/usr/bin/env python3
"""Group a ``perf record`` profile of encoding into its steps (docs/performance.md's table).

    perf record -F 4000 -g -o en.data python -c "...Tokenizer.from_tiktoken(...).encode_to_array(data, 1)"
    python bench/perf_breakdown.py en.data

Reads ``perf report --sort sym`` and sums each step's functions as a share of the encoding's
samples (loading the ranks and Python are left out). Build the core ``RelWithDebInfo`` first
(``pip install -e . --no-deps --no-build-isolation -Ccmake.build-type=RelWithDebInfo``), so its
symbols stay.
"""

from __future__ import annotations

import re
import subprocess
import sys

#: step -> the functions (a regex over perf's symbol names) whose samples it sums, first match wins
STEPS = {
    "the pattern's scan (scanner, character classes)":
        r"scan_cl100k|scan_o200k|scan_gpt2|fchar|decode_cp|flag_run_end|punct_end",
    "the piece loop: ends, hashing, prefetching": r"Encoder::encode_plain",
    "BPE of a piece: cache hit, whole-token probe, array merges": r"PieceBpe::bpe$|PieceBpe::bpe\b|merge_short",
    "pair lookups": r"PairTable::find",
    "long pieces (the heap)": r"bpe_heap|heap_rounds|adjust_heap|push_heap|pop_heap",
    "the UTF-8 check": r"utf8_",
    "plan, blocks, output": r"run_blocks|plan|memmove|memcpy|\bencode\b",
    "first touch of memory (page faults)": r"clear_page|page_fault|do_anonymous|handle_mm",
}
LOADING = r"TiktokenRanks|Encoder::Encoder|TokenIndex::build|PairTable::build|build_lists|build_bytes"


def main() -> None:
    report = subprocess.run(["perf", "report", "-i", sys.argv[1], "--no-children", "--stdio", "--sort", "sym",
                             "-g", "none", "--percentage", "relative"], capture_output=True, text=True,
                            check=True).stdout
    shares = dict.fromkeys(STEPS, 0.0)
    for line in report.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+\[[.k]\]\s+(.*)", line)
        if not m or re.search(LOADING, m.group(2)):
            continue
        step = next((k for k, pat in STEPS.items() if re.search(pat, m.group(2))), None)
        if step:
            shares[step] += float(m.group(1))
    total = sum(shares.values())
    for step, share in shares.items():
        print(f"| {step} | {100 * share / total:.1f} % |")
    print(f"(the encoding is {total:.1f} % of the process's samples)")


if __name__ == "__main__":
    main()
