"""The package's layout, checked: no module in bpe_store/ runs over 700 lines (generated ones
aside) and no function over 60 lines (the rule for C++ too: tests/layout/test_native_layout.py).

A function's length is counted as the C++ counter counts one: from the line of its ``def`` to its
last line, both included, its docstring and any function nested in it included (decorators and
comments above it are not). A module's length is its number of lines.

``STILL_LONG`` names the functions and modules known to break the rule, each to be split: the
test fails when anything else breaks it, and also when a listed one no longer does (take it off
the list), so the list can only shrink.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "bpe_store"
MOST_MODULE_LINES = 700
MOST_FUNCTION_LINES = 60
#: Modules written by a tool, not by hand: ``{path under bpe_store/: the tool}``.
GENERATED = {"store/schemas.py": "tools/gen_schemas.py"}
#: Known offenders, ``path under bpe_store/`` for a module, ``path: qualified name`` for a function.
STILL_LONG: set[str] = set()


class Function(NamedTuple):
    name: str  # "function", "Class.method", "function.inner"
    first: int  # line of the def
    last: int

    @property
    def lines(self) -> int:
        return self.last - self.first + 1


def functions(source: str) -> list[Function]:
    """Every function and method defined in ``source``, nested ones too, by qualified name."""
    found: list[Function] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append(Function(prefix + child.name, child.lineno, child.end_lineno))
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def modules() -> dict[str, str]:
    """``{path under bpe_store/: source}`` of every Python module of the package."""
    return {p.relative_to(PACKAGE).as_posix(): p.read_text(encoding="utf-8")
            for p in sorted(PACKAGE.rglob("*.py"))}


def too_long() -> dict[str, int]:
    """``{offender: lines}``: modules over MOST_MODULE_LINES (generated ones aside) and functions
    over MOST_FUNCTION_LINES, named as in STILL_LONG."""
    out: dict[str, int] = {}
    for path, source in modules().items():
        n = len(source.splitlines())
        if n > MOST_MODULE_LINES and path not in GENERATED:
            out[path] = n
        out.update({f"{path}: {f.name}": f.lines for f in functions(source) if f.lines > MOST_FUNCTION_LINES})
    return out


SAMPLE = textwrap.dedent('''
    import functools


    @functools.cache
    def decorated(a,
                  b):
        """A docstring
        of two lines."""
        return a + b


    class Outer:
        def method(self):
            def inner():
                return 1
            return inner()

        class Inner:
            async def run(self):
                x = [
                    1,
                ]
                return x


    if True:
        def conditional():
            pass
''')


def test_the_counter_finds_every_kind_of_function():
    got = sorted((f.name, f.lines) for f in functions(SAMPLE))
    assert got == sorted([
        ("decorated", 5),           # from its def (not the decorator), a docstring and a split signature
        ("Outer.method", 4),        # with the function inside it
        ("Outer.method.inner", 2),
        ("Outer.Inner.run", 5),     # async, in a nested class, ending in a bracket's line
        ("conditional", 2),         # defined under an if
    ]), got


def test_no_module_over_700_lines_and_no_function_over_60():
    found = too_long()
    new = {k: n for k, n in found.items() if k not in STILL_LONG}
    assert new == {}, (f"over {MOST_MODULE_LINES} lines (a module) or {MOST_FUNCTION_LINES} lines (a function): "
                       f"split them by what they do: {new}")


def test_every_known_offender_is_still_long():
    # a function split, a module cut, or a name that no longer exists: off the list
    fixed = STILL_LONG - set(too_long())
    assert fixed == set(), f"within the limits now (or gone): remove them from STILL_LONG: {sorted(fixed)}"


def test_the_generated_modules_exist_and_say_so():
    for path, tool in GENERATED.items():
        head = (PACKAGE / path).read_text(encoding="utf-8")[:400]
        assert "GENERATED" in head and tool in (PACKAGE / path).read_text(encoding="utf-8"), path
        assert (ROOT / tool).is_file(), tool
