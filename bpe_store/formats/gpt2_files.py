"""GPT-2's tokenizer files: ``vocab.json`` (``{token: id}``) and ``merges.txt``, in GPT-2's
byte-to-unicode alphabet; read into CS336 form with every problem named by file and line.

Below the tokenizer (``Tokenizer.from_files`` reads them) and the exports (``export`` writes
them with ``to_gpt2_str``): a file format, nothing else.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

import regex

from ..errors import InputError
from ..store.params import MAX_VOCAB_SIZE


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from the 256 bytes to printable characters: ``{byte: char}``.

    Printable Latin-1 bytes stand for themselves; the others (controls, space, ...) are moved to
    U+0100 and up, in byte order. So b" " is "Ġ" and b"\\n" is "Ċ".
    """
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table: dict[int, str] = {}
    extra = 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


@lru_cache(maxsize=1)
def unicode_to_bytes() -> dict[str, int]:
    return {c: b for b, c in bytes_to_unicode().items()}


def to_gpt2_str(token: bytes) -> str:
    """``b" the"`` -> ``"Ġthe"``."""
    table = bytes_to_unicode()
    return "".join(table[b] for b in token)


def from_gpt2_str(s: str) -> bytes:
    """``"Ġthe"`` -> ``b" the"``; a character outside the alphabet is an InputError."""
    table = unicode_to_bytes()
    try:
        return bytes(table[c] for c in s)
    except KeyError as exc:
        raise InputError(f"{s!r} is not in GPT-2's byte-to-unicode alphabet (character {exc.args[0]!r})") from None


class Gpt2FileError(InputError):
    """A GPT-2 ``vocab.json`` or ``merges.txt`` that cannot be read as one: the message names the
    file and line (exit 2 from the CLI)."""


#: The largest token id a file may name: the largest vocabulary's last id (params says why).
MAX_TOKEN_ID = MAX_VOCAB_SIZE - 1
_WS = regex.compile(r"[ \t\n\r]*")


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise Gpt2FileError(f"{path}: line {line}: invalid UTF-8 at byte {exc.start}") from None


def _gpt2_vocab_entries(path: Path, text: str) -> Iterator[tuple[str, object, int]]:
    """``(token, value, line)`` of each entry of a JSON object, in file order; JSON errors name
    the file and line. Hand-walked (not ``json.load``) so that every entry keeps its line and a
    repeated token is seen rather than silently overwritten. Lines are counted as the walk goes
    (counting from the start at each entry took 10 s for GPT-2's 50,257 entries)."""
    dec = json.JSONDecoder()
    line, counted_to = 1, 0
    try:
        i = _WS.match(text, 0).end()
        if text[i:i + 1] != "{":
            raise Gpt2FileError(f"{path}: line {_line(text, i)}: not a JSON object of {{token: id}}")
        i = _WS.match(text, i + 1).end()
        if text[i:i + 1] == "}":
            i += 1
        else:
            while True:
                if text[i:i + 1] != '"':
                    raise json.JSONDecodeError("Expecting a token in double quotes", text, i)
                at = i
                token, i = json.decoder.scanstring(text, i + 1)
                i = _WS.match(text, i).end()
                if text[i:i + 1] != ":":
                    raise json.JSONDecodeError("Expecting ':'", text, i)
                i = _WS.match(text, i + 1).end()
                value, i = dec.raw_decode(text, i)
                line, counted_to = line + text.count("\n", counted_to, at), at
                yield token, value, line
                i = _WS.match(text, i).end()
                if text[i:i + 1] == ",":
                    i = _WS.match(text, i + 1).end()
                elif text[i:i + 1] == "}":
                    i += 1
                    break
                else:
                    raise json.JSONDecodeError("Expecting ',' or '}'", text, i)
        if _WS.match(text, i).end() != len(text):
            raise json.JSONDecodeError("Extra data after the object", text, i)
    except json.JSONDecodeError as exc:
        raise Gpt2FileError(f"{path}: line {exc.lineno} column {exc.colno}: not valid JSON ({exc.msg})") from None


def read_gpt2_vocab(vocab_path: str | os.PathLike) -> dict[int, bytes]:
    """``{id: bytes}`` of a GPT-2 ``vocab.json`` (``{token: id}``); refuses, naming the file and
    line, anything but a JSON object of distinct tokens in GPT-2's alphabet to distinct ids."""
    path = Path(vocab_path)
    text = _read_text(path)
    vocab: dict[int, bytes] = {}
    where: dict[int, tuple[str, int]] = {}  # {id: (token, line)}
    seen: dict[str, int] = {}  # {token: line}
    for token, value, line in _gpt2_vocab_entries(path, text):
        at = f"{path}: line {line}"
        if type(value) is not int or not 0 <= value <= MAX_TOKEN_ID:
            raise Gpt2FileError(f"{at}: the id of {token!r} is {json.dumps(value)[:40]}, not an integer "
                                f"from 0 to {MAX_TOKEN_ID}")
        if token in seen:
            raise Gpt2FileError(f"{at}: token {token!r} is listed twice (first on line {seen[token]})")
        if value in where:
            other, oline = where[value]
            raise Gpt2FileError(f"{at}: id {value} is given to {token!r} and to {other!r} (line {oline}); "
                                "ids must be distinct")
        try:
            vocab[value] = from_gpt2_str(token)
        except InputError as exc:
            raise Gpt2FileError(f"{at}: {exc}") from None
        seen[token] = line
        where[value] = (token, line)
    if not vocab:
        raise Gpt2FileError(f"{path}: the vocabulary is empty")
    return vocab


def read_gpt2(vocab_path: str | os.PathLike, merges_path: str | os.PathLike
              ) -> tuple[dict[int, bytes], list[tuple[bytes, bytes]]]:
    """Read GPT-2 ``vocab.json`` (``{token: id}``) and ``merges.txt`` into CS336 form.

    The merges file may start with a ``#version`` line or not; blank lines are skipped. Every
    problem is one ``Gpt2FileError`` naming the file and line: bad JSON, a token outside GPT-2's
    alphabet, a repeated token or id, an id that is not an integer, a merge line that is not
    ``left right`` or whose parts or result are not in the vocabulary.
    """
    vocab = read_gpt2_vocab(vocab_path)
    known = set(vocab.values())
    mpath = Path(merges_path)
    lines = _read_text(mpath).split("\n")
    merges: list[tuple[bytes, bytes]] = []
    for n, line in enumerate(lines, 1):
        line = line.rstrip("\r")
        if not line or (n == 1 and line.startswith("#version")):
            continue
        parts = line.split(" ")
        if len(parts) != 2 or not all(parts):
            raise Gpt2FileError(f"{mpath}: line {n} is not 'left right': {line!r}")
        try:
            a, b = from_gpt2_str(parts[0]), from_gpt2_str(parts[1])
        except InputError as exc:
            raise Gpt2FileError(f"{mpath}: line {n}: {exc}") from None
        for what in (a, b, a + b):
            if what not in known:
                raise Gpt2FileError(f"{mpath}: line {n}: {to_gpt2_str(what)!r} is not in {vocab_path}")
        merges.append((a, b))
    return vocab, merges
