"""Held-out text for evaluation: inputs read as ``train`` reads them, held whole, with what every
encoding of them is measured against (``TextIndex``: per byte, the script of the letter starting
there, and whether a character or a word starts there), computed once per file.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

#: The script groups: a token's script is that of the first letter it starts (compare.py's classes).
SCRIPTS = ("Latin", "Cyrillic", "CJK", "other letters")
#: The group of a file's tokens when it holds no letter at all.
NO_LETTERS = "no letters"
#: The characters str.isspace() takes for space and regex's \s does not (information separators).
_NOT_SPACE = {c: "x" for c in range(0x1C, 0x20)}
#: Held-out inputs are read in blocks of this many bytes, then joined (the text is held whole).
READ_BLOCK = 16 << 20


@dataclass
class HeldOutFile:
    """One held-out input: ``text`` is its UTF-8, documents joined by ``DOC_SEP``."""

    label: str
    text: bytes


@dataclass
class HeldOut:
    """The held-out inputs, in order; ``digest``: SHA-256 of their texts (what rows record)."""

    name: str
    files: list[HeldOutFile]
    digest: str = ""

    _indexes: list[TextIndex] | None = field(default=None, repr=False)

    def indexes(self) -> list[TextIndex]:
        """Each file's ``TextIndex``, computed on first use."""
        if self._indexes is None:
            self._indexes = [TextIndex.of(f.text) for f in self.files]
        return self._indexes

    def __post_init__(self) -> None:
        if not self.digest:
            h = hashlib.sha256()
            for f in self.files:
                h.update(len(f.text).to_bytes(8, "little"))
                h.update(f.text)
            self.digest = h.hexdigest()


def read_heldout(inputs: Sequence[Any], invalid_utf8: str = "strict", name: str | None = None,
                 format: str | None = None, text_field: str = "text") -> HeldOut:
    """Read held-out inputs (paths, ``FileInput`` s or one ``Stream``) as ``train`` reads them.
    Empty held-out text is an InputError (exit 2), as is invalid UTF-8 under ``strict``."""
    from ..text.inputs import FileInput, file_input
    from ..text.pretokenize import PretokenSpec
    from ..text.streams import Stream
    from ..text.whole_inputs import input_blocks

    if invalid_utf8 not in ("strict", "replace"):
        raise InputError(f"--invalid-utf8 must be strict or replace, not {invalid_utf8!r}")
    items = [i if isinstance(i, (FileInput, Stream)) else file_input(i, format, text_field) for i in inputs]
    if not items:
        raise InputError("no held-out input given (--on FILE)")
    files = []
    for item in items:
        if isinstance(item, FileInput) and not Path(item.path).is_file():
            raise InputError(f"{item.path}: no such file" if not Path(item.path).exists()
                             else f"{item.path}: is not a file")
        # no special tokens and a pattern of no native scanner: blocks never cut (they are joined)
        text = b"".join(input_blocks(item, PretokenSpec((), r"(?s).+", invalid_utf8), READ_BLOCK))
        files.append(HeldOutFile(str(item.path), text))
    if not any(f.text.replace(b"\xff", b"") for f in files):
        raise InputError("the held-out text is empty: nothing to measure tokenizers on")
    return HeldOut(name or ", ".join(f.label for f in files), files)


@dataclass
class TextIndex:
    """What every encoding of one held-out file is measured against, computed once: its bytes,
    characters and words (runs of characters that are not ``\\s``, none across documents); and,
    for script groups only (``per_byte``, computed on first use: ~0.5 s per MB), per byte of its
    text (documents' separators removed) the group of the letter starting there (-1: none), and
    whether a character and whether a word starts there."""

    text: bytes = field(repr=False)
    n: int = 0
    chars: int = 0
    words: int = 0
    _per_byte: tuple[np.ndarray, np.ndarray, np.ndarray] | None = field(default=None, repr=False)

    @classmethod
    def of(cls, text: bytes) -> TextIndex:
        docs = [d.decode("utf-8") for d in text.split(b"\xff")]
        # Why str.split: 10x faster than counting regex's \S+ runs, and the same runs once
        # U+001C..U+001F, the only characters str.isspace() and regex's \s disagree on, are no space
        words = sum(len(d.translate(_NOT_SPACE).split()) for d in docs)
        return cls(text, len(text) - text.count(b"\xff"), sum(len(d) for d in docs), words)

    def per_byte(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(letter group, character start, word start)`` of each byte (see the class)."""
        import numpy as np

        from .compare import SCRIPT_CLASSES, byte_classes

        if self._per_byte is None:
            docs = self.text.split(b"\xff")
            flat = b"".join(docs)
            classes, starts = byte_classes(flat.decode("utf-8"))
            letter = np.where(starts & (classes < len(SCRIPTS)), classes, -1).astype(np.int8)
            space = classes == SCRIPT_CLASSES.index("whitespace")
            after_space = np.ones(len(flat), dtype=bool)
            after_space[1:] = space[:-1]
            doc_starts = np.cumsum([0] + [len(d) for d in docs[:-1]])
            after_space[doc_starts[doc_starts < len(flat)]] = True
            self._per_byte = (letter, starts, starts & ~space & after_space)
        return self._per_byte
