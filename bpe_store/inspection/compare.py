"""Compression by script, and beside other tokenizers (the report's "by script" section): each
token of an encoding is put in the class of the first character it starts that is not whitespace
(``SCRIPT_CLASSES``), and each class's bytes are divided by its tokens; ``compare_tokenizer``
encodes the same text with a ``.tiktoken`` ranks file or a byte-level ``tokenizer.json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import InputError

#: The classes compression is measured for, by the script of a token's first character.
SCRIPT_CLASSES = ("Latin", "Cyrillic", "CJK", "other letters", "digits", "punctuation and symbols", "whitespace")
_WS = SCRIPT_CLASSES.index("whitespace")
#: ``(class, regex)`` applied in order, each character taking the first that matches (the last
#: takes the rest): see ``byte_classes``.
_CLASS_RULES = ((6, r"\s"), (4, r"\p{N}"), (0, r"\p{Script=Latin}"), (1, r"\p{Script=Cyrillic}"),
                (2, r"[\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}\p{Script=Hangul}\p{Script=Bopomofo}]"),
                (3, r"[\p{L}\p{M}]"), (5, r"[^\uE000-\uE006]"))
#: The pattern of OpenAI's ranks files, by file name (``--compare FILE`` without ``=PATTERN``).
TIKTOKEN_PATTERNS = {"cl100k_base": "cl100k", "o200k_base": "o200k", "r50k_base": "gpt2", "p50k_base": "gpt2"}


def byte_classes(text: str) -> tuple[Any, Any]:
    """``(class of each byte, whether a character starts there)`` of ``text``'s UTF-8: a byte's
    class (an index in ``SCRIPT_CLASSES``) is its character's, by ``_CLASS_RULES``.

    Why regex passes: each replaces the characters of one class by a private-use code point
    (after the text's own U+E000..U+E006 became punctuation), in C; a Python call per character
    would take seconds on a few megabytes.

    >>> cls, starts = byte_classes("a б 中1")
    >>> [SCRIPT_CLASSES[c] for c in cls[starts]]
    ['Latin', 'whitespace', 'Cyrillic', 'whitespace', 'CJK', 'digits']
    """
    import numpy as np
    import regex

    s = regex.sub(r"[\uE000-\uE006]", "\uE005", text)
    for code, rule in _CLASS_RULES:
        s = regex.sub(rule, chr(0xE000 + code), s)
    chars = np.frombuffer(s.encode("utf-32-le"), dtype=np.uint32).astype(np.int64) - 0xE000
    cps = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    lens = 1 + (cps >= 0x80) + (cps >= 0x800) + (cps >= 0x10000)
    starts = np.zeros(int(lens.sum()), dtype=bool)
    starts[np.cumsum(lens) - lens] = True
    return np.repeat(chars, lens), starts


def by_script(classes: Any, starts: Any, lengths: Any) -> dict[str, dict[str, float]]:
    """``{class: {"bytes", "tokens", "bytes_per_token"}}`` of an encoding whose tokens spell
    ``lengths`` bytes each, in order, over the text of ``byte_classes``: a token is in the class of
    the first character it starts that is not whitespace; whitespace if it starts none; the class
    of the character it is inside when it starts no character at all (partial UTF-8)."""
    import numpy as np

    n = len(classes)
    lengths = np.asarray(lengths, dtype=np.int64)
    if int(lengths.sum()) != n:
        raise InputError(f"the tokens spell {int(lengths.sum())} bytes of a {n}-byte text")
    pos = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    ends = pos + lengths
    idx = np.where(starts & (classes != _WS), np.arange(n), n)
    nxt = np.append(np.minimum.accumulate(idx[::-1])[::-1], n)  # next non-space character start
    j = nxt[pos]
    cls = np.where(j < ends, classes[np.minimum(j, n - 1)], classes[pos])
    out = {}
    for c, name in enumerate(SCRIPT_CLASSES):
        mask = cls == c
        b, t = int(lengths[mask].sum()), int(mask.sum())
        out[name] = {"bytes": b, "tokens": t, "bytes_per_token": b / t if t else None}
    return out


def lengths_of(vocab: dict[int, bytes]) -> Any:
    """Each token id's length in bytes, as an array indexed by id."""
    import numpy as np

    lengths = np.zeros(max(vocab) + 1, dtype=np.int64)
    for i, b in vocab.items():
        lengths[i] = len(b)
    return lengths


def compare_tokenizer(spec: str, text: str, threads: int = 0) -> dict[str, Any]:
    """``--compare FILE``: ``{"name", "kind", "path", "vocab_size", "ids"}`` of ``text`` encoded
    with a ``.tiktoken`` ranks file (``FILE=PATTERN``, or OpenAI's file names, whose pattern is
    known: ``TIKTOKEN_PATTERNS``) or a byte-level ``tokenizer.json``; ``lengths``: each token's
    bytes. Special tokens are not looked for in the text: it is encoded as ordinary text."""
    import numpy as np

    path, eq, pattern = spec.rpartition("=")
    if not eq or not path:
        path, pattern = spec, ""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such file (--compare)")
    name = p.name
    for suffix in (".gz", ".tiktoken", ".json"):
        name = name.removesuffix(suffix)
    if p.name.endswith(".json"):
        return _compare_hf(p, name, text)
    if not pattern:
        pattern = TIKTOKEN_PATTERNS.get(name, "")
        if not pattern:
            raise InputError(f"{p}: which pattern were these ranks made with? Give --compare '{p}=PATTERN' "
                             "(cl100k, o200k, gpt2, ... or a regex)")
    from ..tokenizer.tokenizer import Tokenizer

    tok = Tokenizer.from_tiktoken(p, pattern=pattern)
    # a str: the held-out text is ordinary text (no special token is looked for)
    ids = tok.encode_to_array(text, threads)
    return {"name": name, "kind": "tiktoken", "path": str(p), "pattern": pattern, "vocab_size": len(tok.vocab),
            "ids": ids, "lengths": lengths_of(tok.vocab)[ids] if len(ids) else np.zeros(0, dtype=np.int64)}


def hf_tokenizer(p: Path) -> Any:
    """The ``tokenizers`` package's Tokenizer of the file ``p``; InputError (exit 2) when the
    package is missing or does not read the file."""
    try:
        from tokenizers import Tokenizer as HFTokenizer
    except ImportError:
        raise InputError("a tokenizer.json is read with the tokenizers package: pip install tokenizers") from None
    try:
        return HFTokenizer.from_file(str(p))
    except Exception as exc:  # noqa: BLE001 - the library's own errors for a file it cannot read
        raise InputError(f"{p}: not a tokenizer.json the tokenizers package reads ({exc})") from None


def _compare_hf(p: Path, name: str, text: str) -> dict[str, Any]:
    import numpy as np

    from ..formats.gpt2_files import unicode_to_bytes

    hf = hf_tokenizer(p)
    ids = hf.encode(text, add_special_tokens=False).ids
    to_byte = unicode_to_bytes()
    for tid in set(ids):
        tok = hf.id_to_token(tid)
        if tok is None or any(ch not in to_byte for ch in tok):
            raise InputError(f"{p}: token {tid} ({tok!r}) is not byte-level (GPT-2's byte alphabet): only "
                             "byte-level tokenizer.json files can be compared byte for byte")
    table = {tid: len(hf.id_to_token(tid)) for tid in set(ids)}
    lengths = np.array([table[t] for t in ids], dtype=np.int64)
    return {"name": name, "kind": "tokenizer.json", "path": str(p), "vocab_size": hf.get_vocab_size(),
            "ids": np.asarray(ids, dtype=np.int64), "lengths": lengths}
