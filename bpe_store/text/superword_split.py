"""Stage 2 of SuperBPE: the pre-tokenization that is still applied, and the superword rule.

SuperBPE (Liu et al., arXiv 2503.13423) trains ordinary BPE up to a transition point t, then
resumes merging under a much weaker pre-tokenizer, so that tokens may span words. The authors'
stage-2 pre-tokenizer (PythonNut/superbpe, scripts/extend_tokenizer.sh: ``regex_string``; used by
utils.py ``train_or_extend_tokenizer`` as ``Split(pattern, behavior="isolated")`` then
``ByteLevel(use_regex=False)``) cuts out only digit groups, runs of two or more punctuation
characters, and runs of spaces not followed by a non-space; everything between two such matches
is one piece. ``STAGE2_SPLIT`` is that regex verbatim; ``STAGE2_PATTERN`` is the same split
written as a pattern whose ``regex.finditer`` matches tile the text (every other pattern of
bpe_store is used that way): its last alternative is the text between two matches of
``STAGE2_SPLIT``, one character at a time while no match starts there.

The superword rule (tokenizers-superbpe, tokenizers/src/models/bpe/trainer.rs,
``BpeTrainer::do_train_extend``, commit a27d8bf "limit to 4-word tokens and special case
colon"): a stage-2 merge is skipped when its token contains ``": "`` or splits on spaces into
more than ``MAX_WORDS`` non-empty parts. docs/superword.md states both with their sources.

>>> import regex
>>> [m.group() for m in regex.finditer(STAGE2_PATTERN, "In 2024, they said: 'ok...'  yes")]
['In ', '202', '4', ", they said: 'ok", "...'", ' ', ' yes']
"""

from __future__ import annotations

#: The authors' stage-2 split regex, verbatim (Split, behavior "isolated").
STAGE2_SPLIT = r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]{2,}[\r\n/]*| +(?!\S)"
_PUNCT = r"[^\s\p{L}\p{N}]"
#: ``STAGE2_SPLIT``'s pieces as ``finditer`` matches: a match of it, or the longest run of
#: characters at none of which it matches. Why the three branches before the last: no match of
#: ``STAGE2_SPLIT`` starts at a letter, at a space before a letter, or at a punctuation mark not
#: followed by another, so they take those characters without testing ``STAGE2_SPLIT`` at each
#: (the ``regex`` module: 9.5 MB/s a core on English instead of 2.7 with the last branch alone;
#: tests/training/test_superword.py holds the two forms equal). Counting and encoding use its
#: native scanner, ``superword`` (native/scan_superword.h, registered in ``pretokenize``
#: unlisted: a pattern bpe_store applies itself, not a name users give), ~150 MB/s.
STAGE2_PATTERN = (STAGE2_SPLIT + r"|(?:\p{L}+| (?=\p{L})|" + _PUNCT + r"(?!" + _PUNCT + r")|(?!" + STAGE2_SPLIT
                  + r")[\s\S])+")
#: The authors' limit on words per token (non-empty parts between spaces).
MAX_WORDS = 4


def split_isolated(text: str) -> list[str]:
    """``text`` cut as HF's ``Split(STAGE2_SPLIT, "isolated")`` cuts it: each match is a piece,
    and so is each non-empty stretch between matches (the plain statement ``STAGE2_PATTERN`` is
    tested against)."""
    import regex

    out: list[str] = []
    at = 0
    for m in regex.finditer(STAGE2_SPLIT, text):
        if m.start() > at:
            out.append(text[at:m.start()])
        out.append(m.group())
        at = m.end()
    if at < len(text):
        out.append(text[at:])
    return out


def word_parts(token: bytes) -> int:
    """The words a token spans: its non-empty parts between spaces (the authors count the parts
    of the byte-level string between ``Ġ``, which is the byte 0x20).

    >>> word_parts(b" of the"), word_parts(b"  "), word_parts(b"a, b c")
    (2, 0, 3)
    """
    return sum(1 for part in token.split(b" ") if part)


def superword_allowed(left: bytes, right: bytes, max_words: int = MAX_WORDS) -> bool:
    """Whether stage 2 may merge ``left`` and ``right``: their token holds no ``": "`` and spans
    at most ``max_words`` words.

    >>> superword_allowed(b" in", b" order"), superword_allowed(b"note:", b" this")
    (True, False)
    """
    token = left + right
    return b": " not in token and word_parts(token) <= max_words
