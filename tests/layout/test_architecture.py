"""The package's structure, checked: the import layers of pyproject.toml (import-linter), the lint
rules of pyproject.toml (ruff), and module names that cannot shadow the standard library."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "bpe_store"

#: import-linter in a child process: it puts its working directory first on sys.path and builds
#: the import graph of the package found there, with no cache left behind.
LINT = ("import sys; from importlinter.cli import lint_imports; "
        "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    pytest.importorskip("importlinter")
    return subprocess.run([sys.executable, "-c", LINT], cwd=root, capture_output=True, text=True, timeout=300)


def test_no_module_shadows_the_standard_library():
    # A module named like a stdlib one (bpe_store/inspect.py did) is imported instead of the stdlib's
    # by a script run from inside the package directory, and confuses readers and tools.
    ours = {p.stem for p in PACKAGE.glob("*.py")} | {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert sorted(ours & sys.stdlib_module_names) == []


def test_imports_keep_the_layers():
    r = lint_imports(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout


@pytest.mark.parametrize("module,line,importer,target", [
    # counting is a map step: no store
    ("counting/count.py", "from ..store.store import Store", "counting", "store"),
    # the store knows nothing above it
    ("store/store.py", "from ..training.train import train", "store", "training"),
    # inside the tokenizer's wing, the exports sit above the tokenizer
    ("tokenizer/tokenizer.py", "from .export import FORMATS", "tokenizer.tokenizer", "tokenizer.export"),
    # the package root
    ("training/train.py", "from .. import __version__", "training.train", None),
])
def test_the_contract_catches_an_import_across_layers(tmp_path, module, line, importer, target):
    # a copy under another name: the editable install's import hook would find the real bpe_store
    shutil.copytree(PACKAGE, tmp_path / "copied_pkg", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    config = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text(config.replace("bpe_store", "copied_pkg"), encoding="utf-8")
    with open(tmp_path / "copied_pkg" / module, "a", encoding="utf-8") as f:
        f.write(f"\n{line}  # noqa\n")
    r = lint_imports(tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    importer, imported = f"copied_pkg.{importer}", "copied_pkg" + (f".{target}" if target else "")
    said = " ".join(r.stdout.split())
    assert f"{importer} is not allowed to import {imported}:" in said, r.stdout


def test_ruff_finds_nothing():
    # the rules are [tool.ruff] in pyproject.toml; the report lists every finding with its place
    pytest.importorskip("ruff")
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


#: The longest function train.py may hold, in lines from ``def`` to its end, its docstring aside
#: (the rule: "train.py reads top to bottom as the numbered steps its docstring lists, each a
#: function of <= 40 lines"). A docstring is documentation, not recipe: ``train``'s lists its 22 arguments.
RECIPE_MOST_LINES = 40


def _code_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    lines = fn.end_lineno - fn.lineno + 1
    first = fn.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        lines -= first.end_lineno - first.lineno + 1
    return lines


def test_train_py_functions_are_short():
    tree = ast.parse((PACKAGE / "training" / "train.py").read_text(encoding="utf-8"))
    long = {f"{fn.name} (line {fn.lineno})": _code_lines(fn) for fn in ast.walk(tree)
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and _code_lines(fn) > RECIPE_MOST_LINES}
    assert long == {}, f"functions in train.py longer than {RECIPE_MOST_LINES} lines (docstring aside): {long}"


def test_train_py_lists_its_steps_in_the_order_their_modules_define_them():
    # train.py's docstring's "N. name  (``function``)" lines are the recipe: numbered 1, 2, 3, ... and
    # each function (but the last, read_result, imported) defined in the step modules, in that
    # order: plan, count_step, merge_step, and within each module in the order listed
    tree = ast.parse((PACKAGE / "training" / "train.py").read_text(encoding="utf-8"))
    steps = re.findall(r"^(\d+)\. +\w+ +\(``(\w+)``\)", ast.get_docstring(tree), re.MULTILINE)
    assert [int(n) for n, _ in steps] == list(range(1, len(steps) + 1)) and len(steps) >= 5, steps
    modules = ["plan", "count_step", "merge_step"]
    defined = {m: [node.name for node in ast.parse((PACKAGE / "training" / f"{m}.py").read_text(encoding="utf-8")).body
                   if isinstance(node, ast.FunctionDef)] for m in modules}
    where = [(modules.index(m), defined[m].index(name))
             for _, name in steps[:-1] for m in modules if name in defined[m]]
    assert len(where) == len(steps) - 1, (steps, defined)
    assert where == sorted(where), (steps, defined)


def _draw_wings():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import draw_wings
    finally:
        sys.path.remove(str(ROOT / "tools"))
    return draw_wings


def test_the_wings_drawing_is_current_and_every_arrow_points_down():
    draw_wings = _draw_wings()
    counts = draw_wings.edges()
    assert draw_wings.upward(counts) == []
    assert draw_wings.block(counts) in (ROOT / "docs" / "design.md").read_text(encoding="utf-8"), (
        "docs/design.md's drawing of the wings is stale: run python tools/draw_wings.py --write")
    # the drawing's levels are import-linter's: the first contract's layers, the basics last
    config = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    layers = re.search(r"layers = \[\n(.*?)\n\]", config, re.S).group(1)
    levels = [tuple(name.strip() for name in m.group(1).split("|"))
              for m in re.finditer(r'^\s*"([^"]+)"', layers, re.M)]
    assert tuple(levels[:-1]) == draw_wings.LEVELS[:-1]


def test_the_wings_drawing_sees_an_upward_import(tmp_path, monkeypatch):
    draw_wings = _draw_wings()
    package = tmp_path / "bpe_store"
    for wing in ("store", "cli"):
        (package / wing).mkdir(parents=True)
        (package / wing / "__init__.py").write_text("")
    (package / "store" / "rows.py").write_text("def f():\n    from ..cli import app\n")
    monkeypatch.setattr(draw_wings, "ROOT", tmp_path)
    monkeypatch.setattr(draw_wings, "PACKAGE", package)
    assert draw_wings.upward(draw_wings.edges()) == [("store", "cli")]


@pytest.mark.parametrize("rule, pattern", [
    ("the cut context", r"max\([\w.]*max_len, 4\)"),
    ("a GPT-2 pattern test", r"[=!]= GPT2_PATTERN|GPT2_PATTERN [=!]="),
    ("special tokens longest first", r"key=lambda s: \(-len\(s\)"),
])
def test_each_rule_is_stated_once_in_python(rule, pattern):
    """The cut context, what a GPT-2 pattern is and the longest-first order of special tokens are
    each written once (bpe_store/text/pretokenize.py) and imported everywhere else."""
    found = [f"{p.relative_to(PACKAGE)}:{i}" for p in sorted(PACKAGE.rglob("*.py"))
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(pattern, line) and not line.lstrip().startswith(">>>")]  # doctests aside
    assert found == [f for f in found if f.startswith("text/pretokenize.py")] and len(found) == 1, (rule, found)


#: The one file outside the package allowed to spell a known pattern's words: tiktoken's own
#: spelling of GPT-2's regex (possessive), which the test compares with tiktoken's.
_OWN_SPELLINGS = {"tests/tokenizer/test_from_tiktoken.py"}


@pytest.mark.parametrize("fragment", [r"ll|ve|re)", r"'s|'t|'re|'ve|'m|'ll|'d"])
def test_tests_and_bench_import_the_patterns(fragment):
    """The shipped patterns' contractions (GPT-2's and cl100k's; o200k's, Llama 3's and Qwen2's)
    are written in bpe_store/text/pretokenize.py only: tests, bench and tools import the
    patterns instead of copying them (two copies of cl100k's once lacked its ``\\s++$``)."""
    found = sorted(str(p.relative_to(ROOT)) for d in ("tests", "bench", "tools") for p in (ROOT / d).rglob("*.py")
                   if p.resolve() != Path(__file__).resolve() and fragment in p.read_text(encoding="utf-8"))
    assert [f for f in found if f not in _OWN_SPELLINGS] == [], found


def _names_core(node: ast.AST) -> bool:
    """Whether ``node`` is an import of the compiled core ``_core``."""
    if isinstance(node, ast.ImportFrom):
        return (node.module or "").split(".")[-1] == "_core" or any(a.name == "_core" for a in node.names)
    return isinstance(node, ast.Import) and any(a.name.endswith("._core") for a in node.names)


def _imports_core(tree: ast.AST) -> list[int]:
    """The lines of ``tree``'s imports of the compiled core ``_core`` that run (not the ones under
    ``if TYPE_CHECKING:``, which name its types for checkers only)."""
    hidden = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
              and getattr(node.test, "id", None) == "TYPE_CHECKING" for n in ast.walk(node)}
    return [node.lineno for node in ast.walk(tree) if id(node) not in hidden and _names_core(node)]


def test_only_the_native_face_imports_the_core():
    """One module is the face of the native core, with one "built and current" policy
    (bpe_store/native.py); every other module reaches the core through it."""
    found = [f"{p.relative_to(PACKAGE)}:{line}" for p in sorted(PACKAGE.rglob("*.py"))
             for line in _imports_core(ast.parse(p.read_text(encoding="utf-8")))]
    assert [f for f in found if not f.startswith("native.py:")] == []
    assert found, "the face itself imports the core"


def _core_names_read(tree: ast.AST) -> set[str]:
    """The names ``tree`` reads from the core: ``core.X``, ``native_core.X``, ``native.core.X``,
    ``_core.X`` (and ``self._core.X``, the encoder's methods among them)."""
    def is_core(node: ast.AST) -> bool:
        return (isinstance(node, ast.Name) and node.id in ("core", "native_core", "_core")) or \
            (isinstance(node, ast.Attribute) and node.attr in ("core", "_core"))
    return {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute) and is_core(node.value)}


def test_every_core_name_the_package_reads_is_checked_by_the_face():
    """A build older than its sources must fail at import with the ImportError naming what it lacks
    (``native.NAMES``), not with an AttributeError in the middle of a run: every module-level name
    of the core that the package reads is in ``NAMES``."""
    from bpe_store import native

    if not native.BUILT:
        pytest.skip("the native core is not built")
    read = set().union(*(_core_names_read(ast.parse(p.read_text(encoding="utf-8"))) for p in PACKAGE.rglob("*.py")))
    assert sorted(n for n in read if hasattr(native.core, n) and n not in native.NAMES) == []


def test_the_core_check_sees_an_import_of_the_core():
    tree = ast.parse("from .. import _core\nif TYPE_CHECKING:\n    from .._core import WordIds\n"
                     "def f():\n    from .._core import Encoder\n")
    assert _imports_core(tree) == [1, 5]


def _private_imports(tree: ast.AST) -> list[str]:
    """The names starting with one underscore that ``tree`` imports from a module of the package."""
    return [a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level
            for a in node.names if a.name.startswith("_") and not a.name.startswith("__")
            and a.name not in ("_core", "_version")]


def test_no_module_imports_what_another_keeps_private():
    """What a module offers to others has no leading underscore; an underscore says "this module's
    own" (the compiled ``_core`` and ``_version`` are modules, named so by convention)."""
    found = [f"{p.relative_to(PACKAGE)}: {name}" for p in sorted(PACKAGE.rglob("*.py"))
             for name in _private_imports(ast.parse(p.read_text(encoding="utf-8")))]
    assert found == []
    assert _private_imports(ast.parse("from .job import _Job, Job\nfrom .. import _core\n")) == ["_Job"]
