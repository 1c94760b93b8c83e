"""Generate native/unicode_tables.h: the character classes of the native scanners, taken from `regex`.

The native scanner must split text exactly as ``regex.finditer(GPT2_PATTERN, text)`` does, so the
classes it needs (``\\p{L}``, ``\\p{N}``, ``\\s``) are read from the installed ``regex`` module
itself, not from ``unicodedata`` or a Unicode data file: ``regex`` carries its own Unicode
version, and its ``\\s`` is the White_Space property (``\\x1c``-``\\x1f`` are *not* spaces there,
unlike ``str.isspace``).

Usage (from the repository root, in the project's venv)::

    python tools/gen_unicode_tables.py            # rewrite native/unicode_tables.h
    python tools/gen_unicode_tables.py --check    # exit 1 if the checked-in header is stale

Two tables, each two-stage (``stage1[cp >> SHIFT]`` names a block of ``1 << SHIFT`` bytes in
``stage2``; identical blocks are stored once, tens of KB instead of a 1.1 M-entry array):

* the GPT-2 classes, one of other / ``\\p{L}`` / ``\\p{N}`` / ``\\s`` per code point (disjoint);
* the tiktoken flags, a bit set per code point for the classes tiktoken's cl100k and o200k
  patterns use, which overlap (o200k's "upper" and "lower" letter sets share ``\\p{Lm}``,
  ``\\p{Lo}`` and the marks ``\\p{M}``, which are not letters for ``\\p{L}``).

It also lists the code points that ``(?i:x)`` matches for the letters of the contractions
(``'s``, ``'ll``, ...): beside ASCII, ``regex`` folds U+017F LATIN SMALL LETTER LONG S to ``s``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import regex

OUT = Path(__file__).resolve().parent.parent / "native" / "unicode_tables.h"
MAX_CP = 0x110000

# Class codes; must match `bpe::CharClass` in native/scanner.cpp and the tests.
OTHER, LETTER, NUMBER, SPACE = 0, 1, 2, 3
CLASSES: list[tuple[int, str]] = [(LETTER, r"\p{L}"), (NUMBER, r"\p{N}"), (SPACE, r"\s")]

# Flag bits of the tiktoken table; must match `bpe::detail::Flag` in native/char_classes.h and the
# tests. CRLF is [\r\n] (two ASCII characters, kept here so one load answers every question).
FLAGS: list[tuple[int, str]] = [
    (1, r"\p{L}"), (2, r"\p{N}"), (4, r"\s"),
    (8, r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"),   # o200k's "upper" set
    (16, r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"),         # o200k's "lower" set
    (32, r"[\r\n]"),
]
#: The letters of the contractions both tiktoken patterns know ('s 't 're 've 'm 'll 'd).
CONTRACTION_LETTERS = "sdmtlvre"


#: Characters each Unicode version assigns (graphic, format, line and paragraph separators; not
#: controls, private use, surrogates or noncharacters), as the Unicode Consortium counts them, and
#: for 18.0 as regex 2026.11.19 (which supports Unicode 18.0.0) assigns them: a check on the
#: version the package names, since a wrong name would make a wrong claim in the header.
ASSIGNED_BY_VERSION: dict[str, int] = {
    "13.0.0": 143_859, "14.0.0": 144_697, "15.0.0": 149_186, "15.1.0": 149_813, "16.0.0": 154_998,
    "17.0.0": 159_801, "18.0.0": 172_808,
}


def assigned_characters() -> int:
    """How many code points the installed ``regex`` knows as assigned characters (Unicode's count:
    not \\p{Cn}, \\p{Co}, \\p{Cs} or \\p{Cc})."""
    every = "".join(map(chr, range(MAX_CP)))
    return len(regex.findall(r"[^\p{Cn}\p{Co}\p{Cs}\p{Cc}]", every))


def unicode_version() -> str:
    """The Unicode version of the installed ``regex``'s tables: the one its package description
    names ("This module supports Unicode X.Y.Z."), checked against the characters its tables
    assign when that version's count is known here."""
    from importlib.metadata import metadata

    meta = metadata("regex")
    found = re.search(r"supports Unicode (\d+\.\d+\.\d+)", meta.get_payload() or meta.get("Description") or "")
    if found is None:
        raise SystemExit("the installed regex does not name its Unicode version; add it to ASSIGNED_BY_VERSION")
    version = found.group(1)
    expected = ASSIGNED_BY_VERSION.get(version)
    if expected is not None and assigned_characters() != expected:
        raise SystemExit(f"regex names Unicode {version} ({expected} characters) but assigns {assigned_characters()}")
    return version


def classify() -> bytearray:
    """``classes[cp]`` for every code point, as the installed ``regex`` module sees it."""
    # One string holding every code point (lone surrogates included: a str may hold them) and
    # one finditer per class: seconds, instead of 1.1 M separate regex.match calls.
    every = "".join(map(chr, range(MAX_CP)))
    classes = bytearray(MAX_CP)
    for code, pattern in CLASSES:
        for m in regex.finditer(pattern, every):
            cp = m.start()
            if classes[cp] != OTHER:
                raise SystemExit(f"U+{cp:04X} is in two classes; the scanner assumes they are disjoint")
            classes[cp] = code
    return classes


def flags() -> bytearray:
    """``flags[cp]``: the tiktoken flag bits of every code point, as ``regex`` sees them."""
    every = "".join(map(chr, range(MAX_CP)))
    out = bytearray(MAX_CP)
    for bit, pattern in FLAGS:
        for m in regex.finditer(pattern, every):
            out[m.start()] |= bit
    return out


def case_folds() -> list[tuple[int, str]]:
    """``[(cp, letter)]``: the non-ASCII code points ``(?i:letter)`` matches, for each letter of
    the contractions."""
    every = "".join(map(chr, range(128, MAX_CP)))
    return sorted((m.start() + 128, letter) for letter in CONTRACTION_LETTERS
                  for m in regex.finditer(f"(?i:{letter})", every))


def two_stage(classes: bytearray, max_blocks: int = 256) -> tuple[int, list[int], list[bytes]]:
    """The smallest ``(shift, stage1, blocks)`` whose block count fits ``max_blocks``, with block
    0 holding U+0000..U+007F (the scanners read ASCII from stage 2 directly)."""
    best = None
    for shift in range(7, 11):
        size = 1 << shift
        index: dict[bytes, int] = {}
        stage1 = [index.setdefault(bytes(classes[i:i + size]), len(index)) for i in range(0, MAX_CP, size)]
        if len(index) > max_blocks:
            continue
        total = len(stage1) * (1 if max_blocks <= 256 else 2) + len(index) * size
        if best is None or total < best[0]:
            best = (total, shift, stage1, list(index))
    assert best is not None
    return best[1], best[2], best[3]


def rows(values: list[int]) -> str:
    return "\n".join("    " + ",".join(str(v) for v in values[i:i + 32]) + ","
                     for i in range(0, len(values), 32))


def render_flags(table: bytearray) -> str:
    """The tiktoken flag table and the case folds, as C++ (namespace scope of the header)."""
    shift, stage1, blocks = two_stage(table, max_blocks=65536)
    flat = [b for block in blocks for b in block]
    kind = "uint8_t" if len(blocks) <= 256 else "uint16_t"
    folds = case_folds()
    fold_rows = "\n".join(f"    {{0x{cp:04X}, '{letter}'}}," for cp, letter in folds)
    return f"""
// tiktoken flags (bits: 1 \\p{{L}}, 2 \\p{{N}}, 4 \\s, 8 [\\p{{Lu}}\\p{{Lt}}\\p{{Lm}}\\p{{Lo}}\\p{{M}}],
// 16 [\\p{{Ll}}\\p{{Lm}}\\p{{Lo}}\\p{{M}}], 32 [\\r\\n]); the flags of cp are
//   kFlagStage2[(kFlagStage1[cp >> kFlagShift] << kFlagShift) | (cp & kFlagMask)]
// ({len(stage1)} x {kind} + {len(flat)} bytes).
constexpr unsigned kFlagShift = {shift};
constexpr uint32_t kFlagMask = {(1 << shift) - 1};

inline constexpr {kind} kFlagStage1[{len(stage1)}] = {{
{rows(stage1)}
}};

inline constexpr uint8_t kFlagStage2[{len(flat)}] = {{
{rows(flat)}
}};

// Non-ASCII code points that `(?i:x)` matches for a letter x of the contractions, with x.
struct CaseFold {{
    uint32_t cp;
    char letter;
}};
inline constexpr CaseFold kContractionFolds[{len(folds)}] = {{
{fold_rows}
}};
"""


def render(classes: bytearray, flag_table: bytearray) -> str:
    shift, stage1, blocks = two_stage(classes)
    counts = [classes.count(c) for c in (OTHER, LETTER, NUMBER, SPACE)]
    flat = [b for block in blocks for b in block]
    return f"""\
// GENERATED by tools/gen_unicode_tables.py from regex {regex.__version__} (Unicode {unicode_version()}); do not edit.
// Regenerate: python tools/gen_unicode_tables.py  (tests/text/test_scanner.py checks every code point
// against the installed `regex`, so a regex upgrade that moves a character fails loudly).
//
// GPT-2 character classes: 0 other, 1 \\p{{L}} ({counts[1]} cps), 2 \\p{{N}} ({counts[2]} cps),
// 3 \\s ({counts[3]} cps). Two stages: the class of cp is
//   kClassStage2[(kClassStage1[cp >> kClassShift] << kClassShift) | (cp & kClassMask)]
// ({len(stage1)} + {len(flat)} bytes).
#pragma once

#include <cstdint>

namespace bpe::tables {{

constexpr unsigned kClassShift = {shift};
constexpr uint32_t kClassMask = {(1 << shift) - 1};

inline constexpr uint8_t kClassStage1[{len(stage1)}] = {{
{rows(stage1)}
}};

inline constexpr uint8_t kClassStage2[{len(flat)}] = {{
{rows(flat)}
}};
{render_flags(flag_table)}
}}  // namespace bpe::tables
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check that the header is current")
    args = ap.parse_args()
    text = render(classify(), flags())
    if args.check:
        # a release of `regex` with the same tables is current too: only its version line differs
        def tables(header: str) -> str:
            return re.sub(r"from regex \S+ ", "from regex ", header, count=1)

        current = OUT.read_text() if OUT.exists() else ""
        if tables(current) != tables(text):
            sys.exit(f"{OUT} is stale for regex {regex.__version__}; run tools/gen_unicode_tables.py")
        print(f"{OUT} is current")
        return
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(text)} characters)")


if __name__ == "__main__":
    main()
