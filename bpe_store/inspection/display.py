"""How tokens and text are shown to people: one escaped form, widths in terminal cells.

A BPE token is bytes, and many are unreadable as printed: only spaces or newlines, half of a
UTF-8 character, a zero-width joiner. Every table, tree, progress bar and report shows them in
one escaped form, ``escape``:

* valid UTF-8 is shown as text; a byte that is not part of valid UTF-8 is ``\\xNN``;
* ``\\`` is ``\\\\`` (so ``\\xNN`` always means a byte), tab/newline/return are ``\\t \\n \\r``,
  other control characters are ``\\xNN`` (below U+0080) or ``\\uNNNN``;
* invisible or blank characters other than the space (NBSP, U+3000, zero-width ones, line and
  paragraph separators) are ``\\uNNNN``, so a token is never shown as blank;

and ``quote`` adds quotes (``' the'``), so a space at either end can be seen. Text read by
``bpe-store sql`` arrives with invalid bytes as lone surrogates (``surrogateescape``), which
``escape`` turns back into ``\\xNN``; ``plain`` gives the text for CSV/JSON, where the format
itself escapes control characters.

Widths: ``width`` is the number of terminal cells (CJK and most emoji take two, combining
marks none), so ``ljust``/``rjust`` align columns of any script.
"""

from __future__ import annotations

import unicodedata

from rich.cells import cell_len

_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\\": "\\\\"}


def _escape_char(ch: str) -> str:
    o = ord(ch)
    if ch in _SHORT:
        return _SHORT[ch]
    if 0xDC80 <= o <= 0xDCFF:  # surrogateescape: the byte o - 0xDC00 was not valid UTF-8
        return f"\\x{o - 0xDC00:02x}"
    if o < 0x20 or 0x7F <= o < 0xA0:
        return f"\\x{o:02x}"
    if ch == " ":
        return ch
    cat = unicodedata.category(ch)
    # Z* (blank: NBSP, U+3000, separators), Cf (zero-width, bidi marks), Cs/Co/Cn (no glyph)
    if cat[0] == "Z" or cat in ("Cf", "Cs", "Co", "Cn"):
        return f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}"
    return ch


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value


def escape(value: bytes | str) -> str:
    """Token bytes (or text) in the one escaped form.

    >>> escape(b" the"), escape(b"\\n\\n"), escape("a\\\\b"), escape(b"\\xe2\\x80"), escape("\\u3000")
    (' the', '\\\\n\\\\n', 'a\\\\\\\\b', '\\\\xe2\\\\x80', '\\\\u3000')
    """
    s = _text(value)
    if s.isprintable() and "\\" not in s:  # lone surrogates (bad bytes) are not printable
        return s  # the common case: nothing to escape
    return "".join(_escape_char(ch) for ch in s)


def quote(value: bytes | str) -> str:
    """``escape`` in quotes: ``' the'``, ``'\\n'``, ``'\\xe2'``."""
    return "'" + escape(value) + "'"


def needs_quotes(value: bytes | str) -> bool:
    """Would the text be misread unquoted: empty, or a space at either end."""
    s = _text(value)
    return not s or s[0].isspace() or s[-1].isspace()


def plain(value: bytes | str) -> str:
    """Text for CSV/JSON: UTF-8 as is, a byte that is not valid UTF-8 as ``\\xNN``."""
    return _text(value).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def width(text: str) -> int:
    """Terminal cells ``text`` takes: 2 per wide (CJK) character, 0 per combining mark.

    >>> width("abc"), width("日本語"), width("e\\u0301")
    (3, 6, 1)
    """
    return len(text) if text.isascii() else cell_len(text)  # ASCII: the fast, common case


def ljust(text: str, cells: int) -> str:
    """``text`` padded with spaces to ``cells`` terminal cells."""
    return text + " " * max(cells - width(text), 0)


def rjust(text: str, cells: int) -> str:
    """``text`` padded on the left to ``cells`` terminal cells."""
    return " " * max(cells - width(text), 0) + text
