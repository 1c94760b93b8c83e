"""The package as a library: ``train``'s signature and docstring, type information, declared dependencies."""

from __future__ import annotations

import inspect
import pydoc
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from cli_helpers import ROOT

import bpe_store
from bpe_store import train
from bpe_store.training.options import TrainOptions


def test_train_shows_its_real_signature_and_docstring():
    sig = inspect.signature(train)
    params = sig.parameters
    assert list(params)[:4] == ["inputs", "db", "vocab_size", "special_tokens"]
    assert params["checkpoint_seconds"].default == TrainOptions.checkpoint_seconds
    assert params["engine"].kind is inspect.Parameter.KEYWORD_ONLY
    assert sig.return_annotation == "TrainResult"
    assert train.__name__ == "train" and train.__module__ == "bpe_store.training.train"
    text = pydoc.render_doc(train, renderer=pydoc.plaintext)
    assert "vocab_size" in text and "*args" not in text
    for name in ("inputs", "db", "vocab_size", "special_tokens", "progress", "stop", "engine"):
        assert f"    {name}:" in train.__doc__, name


def test_train_still_turns_sqlite_failures_into_store_errors(tmp_path):
    from bpe_store.errors import StoreError

    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world " * 50)
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"SQLite format 3\x00" + b"\x00" * 84 + b"garbage" * 200)
    with pytest.raises(StoreError):
        train(corpus, bad, 300)
    with pytest.raises(StoreError):
        train(corpus, db=bad, vocab_size=300)


def test_py_typed_is_in_the_package():
    assert (Path(bpe_store.__file__).parent / "py.typed").is_file()


def _declared(requirements: list[str]) -> set[str]:
    import re

    return {re.split(r"[<>=!~ ;\[]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_version_has_one_source():
    # pyproject.toml names no version of its own: scikit-build-core reads bpe_store/_version.py's
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in config["project"] and config["project"]["dynamic"] == ["version"]
    assert config["tool"]["scikit-build"]["metadata"]["version"] == {
        "provider": "scikit_build_core.metadata.regex", "input": "bpe_store/_version.py"}


def test_directly_imported_third_party_packages_are_declared():
    import re

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    deps = _declared(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])
    # every third-party module imported at the top level or lazily by the package itself
    imported = set()
    for f in (ROOT / "bpe_store").rglob("*.py"):
        for line in f.read_text(encoding="utf-8").splitlines():
            m = re.match(r"\s*(?:from|import) ([A-Za-z_]\w*)", line)
            if m:
                imported.add(m.group(1))
    third_party = {m for m in imported if m not in sys.stdlib_module_names and m not in {"bpe_store", "__future__"}}
    optional = {"tiktoken", "tokenizers", "transformers", "matplotlib", "ray", "pyarrow", "zstandard", "isal"}
    missing = {m for m in third_party - optional if m.lower() not in deps}
    assert not missing, f"imported but not in [project] dependencies: {sorted(missing)}"


@pytest.mark.slow
def test_the_wheel_ships_py_typed_migrations_and_declares_rich(tmp_path):
    """The wheel (built by pip in isolation, as a release is, in a build directory of its own)
    holds py.typed and every migration and declares rich. Built without the native core (CMakeLists.txt's
    ``core`` install component): compiling it again at -O3 was 91 of the suite's ~1000 CPU s, while
    the editable install every test imports (``pip install -e .``, the README's command) compiles the
    same target and installs it by the same rule, so no proof is lost; that the core is left out,
    and only it, is checked too (a build that compiled it would pass unnoticed otherwise)."""
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(tmp_path),
                          "-C", f"build-dir={tmp_path / 'build'}", "-C", "build.targets=list_install_components",
                          "-C", "install.components=files"], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    (wheel,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = Parser().parsestr(z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode())
    assert "bpe_store/py.typed" in names and "bpe_store/migrations/env.py" in names
    assert "rich" in _declared(meta.get_all("Requires-Dist") or [])
    assert not any("_core" in n for n in names) and not list((tmp_path / "build").glob("**/*.o"))
    migrations = {p.relative_to(ROOT).as_posix() for p in (ROOT / "migrations").rglob("*.py")}
    assert {"bpe_store/" + m for m in migrations} <= names  # every migration, not only env.py


def test_importing_the_train_module_first_does_not_hide_the_function():
    code = ("import bpe_store.training.train, bpe_store\nfrom bpe_store import train\n"
            "assert callable(train) and train.__name__ == 'train', train\n"
            "assert bpe_store.train is train\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr


def test_train_options_have_one_source():
    """``TrainOptions`` is the one statement of a run's settings and their defaults: ``train``'s
    keyword parameters are its fields with its defaults, and the CLI's train options default to the
    same values."""
    import dataclasses

    import typer.main

    from bpe_store.cli.main import app

    fields = {f.name: f.default for f in dataclasses.fields(TrainOptions)}
    keywords = {name: p.default for name, p in inspect.signature(train).parameters.items()
                if p.kind is inspect.Parameter.KEYWORD_ONLY and name not in ("progress", "stop", "on_checkpoint")}
    assert keywords == fields
    command = typer.main.get_command(app).commands["train"]
    cli = {p.name: getattr(p.default, "value", p.default) for p in command.params}
    shared = set(cli) & set(fields) - {"pattern"}  # --pattern's None is "gpt2" by name: the same regex
    assert shared >= {"chunk_size", "checkpoint_merges", "checkpoint_seconds", "text_field", "workers",
                      "invalid_utf8", "restart", "engine", "min_frequency", "max_token_length", "max_pretoken_bytes"}
    assert {k: cli[k] for k in shared} == {k: fields[k] for k in shared}


@pytest.mark.parametrize("column, value, ok", [
    ("max_pretoken_bytes", 1 << 26, True), ("max_pretoken_bytes", (1 << 26) + 1, False),
    ("max_pretoken_bytes", 3, False), ("max_token_length", 1 << 32, True), ("max_token_length", 1, False),
    ("min_frequency", (1 << 63) - 1, True), ("pattern", r"\w+|\s+", True), ("pattern", "a|" * 5000 + "b", False),
    ("pattern", "(a|aa)+$", False),
])
def test_the_store_and_the_options_hold_a_run_to_the_same_bounds(tmp_path, column, value, ok):
    """What ``train`` accepts for a new run, a store's run row may hold, and nothing else: both read
    the bounds from ``bpe_store.store.params``."""
    import dataclasses

    from bpe_store.errors import InputError, StoreError
    from bpe_store.store.params import check_run

    row = {"special_tokens": "[]", "vocab_size": 300, "chunk_size": 1, "phase": "counting", "stop_reason": None,
           "invalid_utf8": "strict", "min_frequency": 1, "max_token_length": None, "max_pretoken_bytes": None,
           "pattern": TrainOptions.pattern, column: value}
    options = dataclasses.replace(TrainOptions(), **{column: value})
    if ok:
        check_run(tmp_path / "s.db", row)
        options.checked(300, [])
    else:
        with pytest.raises(StoreError):
            check_run(tmp_path / "s.db", row)
        with pytest.raises(InputError):
            options.checked(300, [])


def test_train_documents_every_option_from_train_options():
    """``help(train)`` lists each option once, from ``TrainOptions``' docstring, where it is said."""
    import dataclasses

    doc = train.__doc__
    for f in dataclasses.fields(TrainOptions):
        assert doc.count(f"\n    {f.name}: ") == 1, f.name
    assert "(the options:" not in doc
    assert inspect.cleandoc(TrainOptions.__doc__).split("Attributes:\n", 1)[1] in doc
