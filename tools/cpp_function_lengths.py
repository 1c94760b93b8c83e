"""The length of every C++ function in native/: free functions, member functions and lambdas.

    python tools/cpp_function_lengths.py [--top N] [FILES...]

A function's length is counted as Python's rule counts a ``def``: from the line holding its
name (a lambda: its ``[``) to the line of its closing brace, both included; comments above it
are not counted, comments inside it are. No compiler is needed: the source is read with a small
brace matcher after comments, strings and preprocessor lines are blanked out. A ``{`` opens a
function body when what stands before it is a parameter list ``(...)`` (possibly followed by
``const``, ``noexcept``, ``override``, ``mutable``, a trailing return type, or a constructor's
member initializers) that does not belong to ``if``/``for``/``while``/``switch``/``catch``, or a
lambda's capture list ``[...]``. ``tests/layout/test_architecture.py`` holds every function to
``MOST_LINES``; ``native/unicode_tables.h`` (generated) is not read.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
NATIVE = ROOT / "native"
GENERATED = {"unicode_tables.h"}
MOST_LINES = 60

_CONTROL = {"if", "for", "while", "switch", "catch"}
_QUALIFIERS = {"const", "noexcept", "override", "final", "mutable", "volatile", "&", "&&"}
_TOKEN = re.compile(r"::|->|[A-Za-z_]\w*|\d[\w.']*|\S")


class Function(NamedTuple):
    path: str
    name: str  # "Class::method", "function", or "function: lambda"
    first: int  # line of the name (a lambda: its capture list)
    last: int  # line of the closing brace

    @property
    def lines(self) -> int:
        return self.last - self.first + 1


def blank_noncode(text: str) -> str:
    """``text`` with comments, string and character literals and preprocessor lines turned into
    spaces (newlines kept, so line numbers stay)."""
    out: list[str] = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == "#":  # a directive, with its continuation lines
            j = i
            while j < n and (text[j] != "\n" or text[j - 1] == "\\"):
                j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if c == "/" and text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif c == "/" and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            delim = text[i + 2:text.index("(", i + 2)]
            j = text.index(")" + delim + '"', i) + len(delim) + 2
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator (1'000)
                out.append(c)
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j += 1
        else:
            out.append(c)
            if c == "\n":
                line_start = True
            elif not c.isspace():
                line_start = False
            i += 1
            continue
        out.append(re.sub(r"[^\n]", " ", text[i:j]))
        i = j
    return "".join(out)


def _tokens(code: str) -> list[tuple[str, int]]:
    toks: list[tuple[str, int]] = []
    for lineno, line in enumerate(code.split("\n"), 1):
        toks.extend((m.group(), lineno) for m in _TOKEN.finditer(line))
    return toks


def _match_back(toks: list[tuple[str, int]], k: int, close: str, open_: str) -> int:
    """The index of the bracket opening the one closed at toks[k]."""
    depth = 0
    for j in range(k, -1, -1):
        t = toks[j][0]
        if t == close:
            depth += 1
        elif t == open_:
            depth -= 1
            if depth == 0:
                return j
    return -1


def _initializer_start(toks: list[tuple[str, int]], j: int) -> int | None:
    """If toks[j] (a ``)`` or ``}``) ends a constructor's member initializers ``) : a_(x), b_{y}``,
    the index of the ``)`` closing the constructor's parameters; else None."""
    while True:
        close = toks[j][0]
        o = _match_back(toks, j, close, "(" if close == ")" else "{")
        if o < 2 or not re.fullmatch(r"[A-Za-z_]\w*", toks[o - 1][0]):
            return None
        sep = toks[o - 2][0]
        if sep == ":":
            return o - 3 if toks[o - 3][0] == ")" else None
        if sep != "," or toks[o - 3][0] not in {")", "}"}:
            return None
        j = o - 3


def _function_start(toks: list[tuple[str, int]], k: int) -> tuple[str, int] | None:
    """For the ``{`` at toks[k]: (name, index of its first token) if it opens a function body."""
    j = k - 1
    while j >= 0 and toks[j][0] in _QUALIFIERS:
        j -= 1
    if j < 0:
        return None
    # a trailing return type: `) -> T {`
    arrow = next((a for a in range(j, max(j - 12, -1), -1) if toks[a][0] == "->"), None)
    if arrow is not None and toks[arrow - 1][0] in _QUALIFIERS | {")"}:
        j = arrow - 1
        while toks[j][0] in _QUALIFIERS:
            j -= 1
    if toks[j][0] == "]":  # a lambda without parameters: [&] {
        return "lambda", _match_back(toks, j, "]", "[")
    if toks[j][0] in {")", "}"}:
        params = _initializer_start(toks, j)
        if params is not None:
            j = params
    if toks[j][0] != ")":
        return None
    o = _match_back(toks, j, ")", "(")
    if o <= 0 or toks[o - 1][0] in _CONTROL:
        return None
    before = toks[o - 1][0]
    if before == "]":
        b = _match_back(toks, o - 1, "]", "[")
        if b > 0 and toks[b - 1][0] == "operator":  # operator[](...)
            return "operator[]", b - 1
        return "lambda", b
    name_at = o - 1
    if before == ">":  # a template's arguments: f<T>(...)
        name_at = _match_back(toks, o - 1, ">", "<") - 1
    if before == ")":  # operator()(...)
        name_at = o - 3
    if name_at < 0:
        return "?", 0
    name = toks[name_at][0]
    while name_at >= 2 and toks[name_at - 1][0] == "::":  # Class::method defined outside its class
        q = name_at - 2
        if toks[q][0] == ">":  # Box<T>::method
            q = _match_back(toks, q, ">", "<") - 1
        name_at = q
        name = f"{toks[q][0]}::{name}"
    return name, name_at


def functions(path: Path) -> list[Function]:
    """Every function body in the file at ``path``, outer ones before those they hold."""
    toks = _tokens(blank_noncode(path.read_text(encoding="utf-8")))
    found: list[Function] = []
    stack: list[tuple[str, str | None, int]] = []  # (kind, name, index of its Function or -1)
    for k, (t, line) in enumerate(toks):
        if t == "{":
            fn = _function_start(toks, k)
            if fn is not None:
                name, at = fn
                owner = next((s for s in reversed(stack) if s[0] in {"class", "function"}), None)
                if owner is not None and owner[0] == "function" and name == "lambda":
                    name = f"{owner[1]}: lambda"
                elif owner is not None and owner[0] == "class":
                    name = f"{owner[1]}::{name}"
                found.append(Function(str(path), name, toks[at][1], -1))
                stack.append(("function", name, len(found) - 1))
                continue
            s = k - 1
            while s >= 0 and toks[s][0] not in {";", "{", "}"}:
                s -= 1
            head = [x[0] for x in toks[s + 1:k]]
            kind = next((h for h in reversed(head) if h in {"class", "struct", "union"}), None)
            if kind and not {"=", "("} & set(head):
                cls = head[len(head) - 1 - head[::-1].index(kind) + 1]  # template <class T> class X
                stack.append(("class", cls, -1))
            else:
                stack.append(("block", None, -1))
        elif t == "}" and stack:
            kind, _, idx = stack.pop()
            if kind == "function":
                found[idx] = found[idx]._replace(last=line)
    return found


def native_files() -> list[Path]:
    return sorted(p for p in NATIVE.iterdir() if p.suffix in {".cpp", ".h"} and p.name not in GENERATED)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--top", type=int, default=20, help="how many of the longest to list")
    args = ap.parse_args(argv)
    fns = [f for p in (args.files or native_files()) for f in functions(p)]
    for f in sorted(fns, key=lambda f: -f.lines)[:args.top]:
        print(f"{f.lines:4d}  {Path(f.path).name}:{f.first}  {f.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
