"""The native jsonl text-field extractor (``_core.jsonl_texts``, native/jsonl.cpp) against the
reference reading of jsonl (``jsonl.parse_lines``: ``json.loads`` per line): whatever the
extractor accepts it reads byte for byte as Python does, under both ``--invalid-utf8`` policies;
what it is not sure of it leaves to Python (None), and it is sure of every valid record.

Random JSON objects are written by hand (``write_value``) so that the bytes vary as real files
do: escaped or raw non-ASCII, ``\\/``, upper-case hex, surrogate pairs as escapes, whitespace
between any tokens, duplicate keys, the field nested deeper, keys written with escapes, blank
and CRLF lines; then some are broken (a byte changed, inserted or dropped)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bpe_store.errors import InputError
from bpe_store.text.jsonl import jsonl_lines_documents, parse_lines
from bpe_store.text.pretokenize import DOC_SEP

_core = pytest.importorskip("bpe_store._core")
jsonl_texts = _core.jsonl_texts

NASTY = ['"', "\\", "/", "\b", "\f", "\n", "\r", "\t", "\x00", "\x1f", "\x7f", "é", "日", "😀", "\u2028",
         "\ufeff", "\ud800", "\udc00", "\udbff", "\U0010ffff", " ", "text", "a"]
strings = st.lists(st.one_of(st.sampled_from(NASTY), st.characters()), max_size=8).map("".join)
FIELDS = ["text", "t", "é", "😀", 'a"b', "x\\y", "te xt", "/"]
fields = st.one_of(st.sampled_from(FIELDS), st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=4))
numbers = st.one_of(st.integers(), st.integers(-10**30, 10**30), st.floats(allow_nan=True, allow_infinity=True))
scalars = st.one_of(st.none(), st.booleans(), numbers, strings)


def keys_with(field: str):
    return st.one_of(st.sampled_from([field, field, "id", "meta", "x"]), strings)


def objects(field: str):
    """Objects as lists of (key, value) pairs, so a key may repeat; values nest, and may hold the
    field again (which must not count)."""
    values = st.recursive(scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.lists(st.tuples(keys_with(field), inner), max_size=3).map(Obj)),
        max_leaves=8)
    return st.lists(st.tuples(keys_with(field), st.one_of(values, strings)), max_size=5).map(Obj)


class Obj(list):
    """A JSON object as its (key, value) pairs, in order, duplicates kept."""


def write_string(s: str, draw) -> str:
    out = ['"']
    for ch in s:
        cp = ord(ch)
        how = draw(st.integers(0, 9))
        if ch in '"\\' or cp < 0x20 or 0xD800 <= cp <= 0xDFFF:
            short = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
            out.append(short[ch] if ch in short and how < 5 else f"\\u{cp:04x}" if how < 8 else f"\\u{cp:04X}")
        elif ch == "/" and how < 5:
            out.append("\\/")
        elif how == 0 and cp > 0xFFFF:  # an astral character as a surrogate pair of escapes
            hi, lo = 0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF)
            out.append(f"\\u{hi:04x}\\u{lo:04X}")
        elif how == 1:
            out.append(f"\\u{cp:04x}" if cp <= 0xFFFF else ch)
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def write_value(v, draw) -> str:
    def ws() -> str:
        return draw(st.sampled_from(["", "", "", " ", "  ", "\t", "\r", " \r "]))

    if isinstance(v, Obj):
        if not v:
            return "{" + ws() + "}"
        items = [ws() + write_string(k, draw) + ws() + ":" + ws() + write_value(x, draw) + ws() for k, x in v]
        return "{" + ",".join(items) + "}"
    if isinstance(v, list):
        return "[" + ws() + ",".join(ws() + write_value(x, draw) + ws() for x in v) + "]"
    if isinstance(v, str):
        return write_string(v, draw)
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    return json.dumps(v)


@st.composite
def blocks(draw, broken: bool = True):
    """``(jsonl bytes, field)``: lines of objects, blank lines, CRLF; with ``broken``, also lines
    that are not objects and bytes changed at random."""
    field = draw(fields)
    lines = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.integers(0, 9))
        if kind == 0:
            lines.append(draw(st.sampled_from(["", "\r", "  ", "\t \r", "\x0b", " \x0c "])))
            continue
        obj = draw(objects(field))
        if kind < 5 or not broken:  # most records have the field, a string, as the last of its name
            obj.append((field, draw(strings)))
            if draw(st.booleans()):
                obj.insert(draw(st.integers(0, len(obj))), ("id", draw(scalars)))
        elif kind == 5:
            obj = draw(st.sampled_from([[], "s", 3, None, [Obj([(field, "x")])]]))
        line = draw(st.sampled_from(["", " ", "\t"])) + write_value(obj, draw) + draw(st.sampled_from(["", " ", "\r"]))
        lines.append(line)
    data = "\n".join(lines).encode("utf-8", "surrogatepass") + draw(st.sampled_from([b"", b"\n"]))
    if broken and data and draw(st.booleans()):
        at = draw(st.integers(0, len(data) - 1))
        byte = bytes([draw(st.sampled_from([0x22, 0x5C, 0x7B, 0x7D, 0x2C, 0x3A, 0x0A, 0x20, 0x80, 0xFF, 0x00]))])
        data = draw(st.sampled_from([data[:at] + byte + data[at + 1:], data[:at] + byte + data[at:],
                                     data[:at] + data[at + 1:]]))
    return data, field


def python_reading(data: bytes, field: str, policy: str):
    """What the Python path gives: ``(joined documents, count, lines)``, or the InputError."""
    lines = data.split(b"\n")
    try:
        docs = parse_lines(lines, field, "f.jsonl", 1, policy)
    except InputError as exc:
        return exc
    return DOC_SEP.join(docs), len(docs), len(lines)


@pytest.mark.slow
@given(blocks())
def test_whatever_the_extractor_accepts_it_reads_exactly_as_json_loads(case):
    data, field = case
    got = jsonl_texts(data, field.encode("utf-8"))
    if got is None:
        return
    for policy in ("strict", "replace"):
        assert python_reading(data, field, policy) == got


@pytest.mark.slow
@given(blocks(broken=False))
def test_the_extractor_is_sure_of_every_valid_record(case):
    """Records whose field's last value is a string without a lone surrogate, and whose bytes
    are UTF-8, are read natively, never left to Python."""
    data, field = case
    want = python_reading(data, field, "strict")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return  # a lone surrogate written raw: Python says where
    if isinstance(want, InputError):  # a lone surrogate in the field, or "id" was the field
        assert jsonl_texts(data, field.encode("utf-8")) is None
        return
    assert jsonl_texts(data, field.encode("utf-8")) == want


# (line(s), field, documents or None for "left to Python")
CASES = {
    "escapes": (rb'{"text": "a\/b\\c\"d\n\t\r\b\f\u00e9\u00E9\u65e5"}', "text", ["a/b\\c\"d\n\t\r\b\féé日"]),
    "surrogate pair": (rb'{"text": "\ud83d\ude00 \uD83D\uDE00"}', "text", ["😀 😀"]),
    "raw UTF-8": ('{"text": "naïve 日本 😀"}'.encode(), "text", ["naïve 日本 😀"]),
    "duplicate keys: the last": (b'{"text": "a", "id": 1, "text": "b"}', "text", ["b"]),
    "duplicate, last not a string": (b'{"text": "a", "text": 1}', "text", None),
    "duplicate, last a string": (b'{"text": 1, "text": "b"}', "text", ["b"]),
    "nested key does not count": (b'{"meta": {"text": "no"}, "text": "yes", "a": [{"text": 1}]}', "text", ["yes"]),
    "only nested": (b'{"meta": {"text": "no"}}', "text", None),
    "key with escapes": (rb'{"t\u0065xt": "x", "\ud800": 1, "\u00e9": 2}', "text", ["x"]),
    "non-ASCII field": (rb'{"\u00e9": "e", "text": 1}', "é", ["e"]),
    "empty field value": (b'{"text": ""}\n{"text": "z"}', "text", ["", "z"]),
    "other values skipped": (b'{"a": [1, -0.5e+3, 2E-2, true, false, null, NaN, Infinity, -Infinity, {}, []], '
                             b'"text": "v"}', "text", ["v"]),
    "whitespace": (b' \t{ "text" \r: \t"v" , "b" :{ } }\t\r', "text", ["v"]),
    "blank lines and CRLF": (b'\n\r\n{"text": "a"}\r\n  \n\t\x0b\x0c\n{"text": "b"}\r\n', "text", ["a", "b"]),
    "lone surrogate": (rb'{"text": "a\ud800b"}', "text", None),
    "lone low surrogate": (rb'{"text": "\udc00"}', "text", None),
    "lone surrogate elsewhere is fine": (rb'{"id": "\ud800", "text": "ok"}', "text", ["ok"]),
    "high then non-low escape": (rb'{"text": "\ud800\u0041"}', "text", None),
    "bad \\u escape": (rb'{"text": "\u12g4"}', "text", None),
    "bad escape": (rb'{"text": "\x"}', "text", None),
    "raw control character": (b'{"text": "a\tb"}', "text", None),
    "invalid UTF-8": (b'{"text": "\xff"}', "text", None),
    "BOM": ('\ufeff{"text": "a"}'.encode(), "text", None),
    "form feed before the object": (b'\x0c{"text": "a"}', "text", None),
    "two objects on a line": (b'{"text": "a"} {"text": "b"}', "text", None),
    "trailing comma": (b'{"text": "a",}', "text", None),
    "leading zero": (b'{"n": 01, "text": "a"}', "text", None),
    "bare minus": (b'{"n": -, "text": "a"}', "text", None),
    "not an object": (b'["text"]', "text", None),
    "empty object": (b'{}', "text", None),
    "an int too long for int()": (b'{"n": ' + b"1" * 5000 + b', "text": "a"}', "text", None),
    "a long float is fine": (b'{"n": 0.' + b"1" * 5000 + b'e5, "text": "a"}', "text", ["a"]),
    "deep nesting left to Python": (b'{"a": ' + b"[" * 300 + b"]" * 300 + b', "text": "a"}', "text", None),
    "moderate nesting": (b'{"a": ' + b"[" * 150 + b"]" * 150 + b', "text": "a"}', "text", ["a"]),
    # Each line alone is broken; joined into one JSON array (the old Python shortcut) they parse.
    "lines that only parse joined": (b'{"text": "t", "a": "}\n{"}\n{"text": "x"},{"text": "y"}', "text", None),
}


@pytest.mark.parametrize("name", list(CASES))
def test_targeted_cases(name):
    data, field, want = CASES[name]
    got = jsonl_texts(data, field.encode("utf-8"))
    python = python_reading(data, field, "strict")
    if want is None:
        assert got is None
    else:
        assert got == (DOC_SEP.join(d.encode("utf-8") for d in want), len(want), data.count(b"\n") + 1)
        assert python == got


def test_what_is_left_to_python_keeps_its_errors_and_policies():
    """A block the extractor refuses reads as parse_lines reads it: the same error, the same
    line number, the same replacement under --invalid-utf8 replace."""
    good = b'{"text": "ok"}\n'
    lone = good * 3 + rb'{"text": "a\ud800b"}'
    with pytest.raises(InputError, match=r"f.jsonl: line 4: the text holds a lone surrogate"):
        jsonl_lines_documents(lone, "text", "f.jsonl", 1, "strict", b"text")
    assert jsonl_lines_documents(lone, "text", "f.jsonl", 1, "replace", b"text") == (
        DOC_SEP.join([b"ok"] * 3 + ["a\ufffdb".encode()]), 4, 4)
    bad_utf8 = good + b'{"text": "a\xffb"}'
    assert jsonl_lines_documents(bad_utf8, "text", "f.jsonl", 7, "replace", b"text")[0] == (
        b"ok" + DOC_SEP + "a\ufffdb".encode())
    with pytest.raises(InputError, match=r"f.jsonl: line 8: invalid UTF-8 at column 12"):
        jsonl_lines_documents(bad_utf8, "text", "f.jsonl", 7, "strict", b"text")
    with pytest.raises(InputError, match=r"f.jsonl: line 11: field 'text' is a number"):
        jsonl_lines_documents(good * 2 + b'{"text": 5}', "text", "f.jsonl", lambda: 9, "strict", b"text")
    with pytest.raises(InputError, match=r"f.jsonl: line 1: broken JSON"):
        jsonl_lines_documents(CASES["lines that only parse joined"][0], "text", "f.jsonl", 1, "strict", b"text")
