"""The command line as a whole: entry points, help and docs for every command, errors and exit codes."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from cli_helpers import ROOT, env, run, run_sub

from bpe_store import errors
from bpe_store.cli.input_args import expand_inputs
from bpe_store.cli.main import app
from bpe_store.cli.output import Format, render
from bpe_store.cli.train_cmd import resume_command


def _commands(group=None, prefix: str = "") -> dict[str, object]:
    """``{"train": cmd, "db upgrade": cmd, ...}``: every leaf command of the app."""
    group = group or typer.main.get_command(app)
    out = {}
    for name in group.list_commands(None):
        cmd = group.get_command(None, name)
        if hasattr(cmd, "list_commands"):
            out.update(_commands(cmd, f"{prefix}{name} "))
        else:
            out[f"{prefix}{name}"] = cmd
    return out


COMMANDS = sorted(_commands())


def test_the_expected_commands_exist():
    assert {"train", "status", "sql", "show", "why", "db upgrade"} <= set(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_a_one_line_summary_and_an_example(name):
    result = run(*name.split(), "--help")
    assert result.exit_code == 0, result.output
    cmd = _commands()[name]
    summary = (cmd.help or "").strip().splitlines()[0]
    assert 10 < len(summary) <= 100 and summary.endswith("."), summary
    example = re.search(r"Example: (bpe-store \S+.*)", result.stdout)
    assert example, f"`{name} --help` has no 'Example: bpe-store ...'"
    assert example.group(1).startswith(f"bpe-store {name}")
    # every example is a command line the command accepts: its own parser reads it (an option
    # renamed, a choice or type changed, a missing argument all fail here)
    examples = re.findall(r"Example: (bpe-store .*)", cmd.help or "")
    assert examples
    for line in examples:
        words = shlex.split(line)
        assert words[:1 + len(name.split())] == ["bpe-store", *name.split()], line
        with cmd.make_context(f"bpe-store {name}", words[1 + len(name.split()):]) as ctx:
            assert not ctx.args, (line, ctx.args)


def test_the_readme_lists_every_command_and_exit_code():
    doc = "README.md"
    text = (ROOT / doc).read_text(encoding="utf-8")
    missing = [n for n in COMMANDS if f"bpe-store {n}" not in text]
    assert not missing, f"{doc} does not mention: {', '.join('bpe-store ' + n for n in missing)}"
    for code in errors.EXIT_CODES:
        assert re.search(rf"\b{code}\b", text), f"{doc} does not document exit code {code}"


@pytest.mark.parametrize("how", [["-m", "bpe_store"], [str(ROOT / "cli.py")], ["console"]])
def test_three_ways_to_run_the_same_app(how):
    if how == ["console"]:
        exe = Path(sys.executable).with_name("bpe-store")
        if not exe.exists():
            pytest.skip("the bpe-store console script is not installed in this environment")
        argv = [str(exe), "--help"]
    else:
        argv = [sys.executable, *how, "--help"]
    out = subprocess.run(argv, capture_output=True, text=True, env=env(), timeout=60)
    assert out.returncode == 0, out.stderr
    for name in ("train", "status", "sql", "show", "why", "db"):
        assert re.search(rf"^\s+{name}\s", out.stdout, re.M), name


def test_exit_codes_are_distinct_and_documented_in_help():
    # each error's code is the one whose documented meaning is that error's (it used to restate
    # [2, 3, 4], which a class given another documented code would still pass)
    meaning = {errors.InputError: "usage:", errors.ResumeMismatch: "resume refused:",
               errors.StoreError: "store problem:", errors.Interrupted: "interrupted by SIGINT"}
    for cls, words in meaning.items():
        assert errors.EXIT_CODES[cls.exit_code].startswith(words), cls
    assert len({cls.exit_code for cls in meaning} | {errors.EXIT_OK, errors.EXIT_FAILED}) == len(meaning) + 2
    text = run("--help").stdout
    for code, meaning in errors.EXIT_CODES.items():
        assert str(code) in text and meaning[:20] in text


def test_usage_errors_exit_2_with_usage_not_a_traceback():
    r = run("show", "x.db", "nothing")
    assert r.exit_code == 2
    assert "Traceback" not in r.output and "Usage:" in r.stderr


def test_a_missing_input_is_one_line_and_exit_2(tmp_path):
    r = run("train", tmp_path / "nope.txt", "--db", tmp_path / "r.db", "--vocab-size", "300")
    assert r.exit_code == 2
    assert r.stderr.splitlines() == [f"error: {tmp_path / 'nope.txt'}: no such file"]
    assert not (tmp_path / "r.db").exists()


def test_not_a_store_exits_4(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("hello")
    for args in (["status", p], ["sql", p, "SELECT 1"], ["show", p, "merges"], ["why", p, "a"]):
        r = run(*args)
        assert r.exit_code == 4, args
        assert r.stderr.startswith("error: ") and "not a SQLite database" in r.stderr
        assert "Traceback" not in r.output


def test_verbose_shows_the_traceback(tmp_path):
    quiet = run("status", tmp_path / "none.db")
    loud = run("--verbose", "status", tmp_path / "none.db")
    loud_after = run("status", tmp_path / "none.db", "--verbose")
    assert quiet.exit_code == loud.exit_code == loud_after.exit_code == 4
    assert "Traceback" not in quiet.stderr
    assert "Traceback" in loud.stderr and "Traceback" in loud_after.stderr
    assert "no such store" in loud.stderr


def test_an_unexpected_error_is_one_line_and_exit_1(tmp_path, monkeypatch):
    import bpe_store.inspection.answers as inspect_mod

    def boom(*_a, **_k):
        raise RuntimeError("something broke")

    monkeypatch.setattr(inspect_mod, "status", boom)
    r = run("status", tmp_path / "x.db")
    assert r.exit_code == 1
    assert r.stderr.strip() == ("error: unexpected RuntimeError: something broke "
                                "(run with --verbose for the traceback)")


def test_subprocess_errors_never_print_a_traceback(tmp_path):
    out = run_sub("train", str(tmp_path / "missing.txt"), "--db", str(tmp_path / "r.db"), "--vocab-size", "300")
    assert out.returncode == 2 and "Traceback" not in out.stderr and "no such file" in out.stderr


# -- inputs: files, directories, globs ---------------------------------------------------------


def test_expand_inputs_files_directories_and_globs(tmp_path):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    for name in ("d/b.txt", "d/a.txt", "d/c.md", "d/.hidden.txt", "d/sub/e.txt"):
        (tmp_path / name).write_text("x")
    db = tmp_path / "d" / "run.db"
    db.write_text("")
    d = str(tmp_path / "d")
    assert [p.name for p in expand_inputs([d], "*", db)] == ["a.txt", "b.txt", "c.md"]
    assert [p.name for p in expand_inputs([d], "**/*.txt", db)] == ["a.txt", "b.txt", "e.txt"]
    assert [p.name for p in expand_inputs([f"{d}/*.txt", f"{d}/a.txt"], "*", db)] == ["a.txt", "b.txt"]
    with pytest.raises(errors.InputError, match="no file matching"):
        expand_inputs([d], "*.csv", db)
    with pytest.raises(errors.InputError, match="no file matches"):
        expand_inputs([f"{d}/*.csv"], "*", db)


def test_render_formats():
    cols, rows = ["token", "count"], [(b" the", 12), (b"\n\xe2", None)]
    assert render(cols, rows, Format.table).splitlines() == [
        "token     count", "--------  -----", "' the'       12", "'\\n\\xe2'"]
    assert render(cols, rows, Format.csv).splitlines() == ["token,count", " the,12", '"', '\\xe2",']
    assert '"token": " the"' in render(cols, rows, Format.json)


def test_resume_command_drops_restart():
    class Ctx:
        info_name = "python -m bpe_store"
        meta = {"bpe_store.argv": ["train", "a b.txt", "--db", "r.db", "--restart", "--vocab-size", "300"]}

        def find_root(self):
            return self

    assert resume_command(Ctx()) == "python -m bpe_store train 'a b.txt' --db r.db --vocab-size 300"


# -- manners: --version, completion, help without odd placeholders ------------------------------

#: Options that take one of a fixed set of values: their help must list the choices.
ENUM_OPTIONS = {"--format", "--engine", "--invalid-utf8", "--progress"}


def _choices_of(param) -> list[str] | None:
    desc = getattr(param, "type_descriptor", None)
    if desc is None or not desc.is_choice:
        return None
    return [str(getattr(c, "value", c)) for c in desc.choices]


@pytest.mark.parametrize("name", COMMANDS)
def test_help_uses_plain_metavars_and_lists_choices(name):
    text = run(*name.split(), "--help").stdout
    usage = text.splitlines()[0]
    assert usage.startswith(f"Usage: bpe-store {name} [OPTIONS]"), usage
    assert not re.search(r"<[a-z][\w\[\]., ]*>", text), f"a <type> placeholder in `{name} --help`"
    assert not re.search(r"\{\w+\}", text), f"a {{NAME}} placeholder in `{name} --help`"
    cmd = _commands()[name]
    for param in cmd.params:
        choices = _choices_of(param)
        if param.param_type_name == "argument":
            shown = "|".join(choices) if choices else param.name.upper()
            assert re.search(rf"(^| ){re.escape(shown)}(\.\.\.)?( |$)", usage), (shown, usage)
            assert re.search(rf"^  {re.escape(shown)}(\.\.\.)?  ", text, re.M), shown
            continue
        if getattr(param, "is_flag", False):
            continue
        opt = max(param.opts, key=len)
        line = re.search(rf"^  (?:-\w, )?{re.escape(param.opts[0])}[^\n]*", text, re.M)
        assert line, f"{opt} is not in `{name} --help`"
        if choices:
            assert f"[{'|'.join(choices)}]" in line.group(0), line.group(0)
        else:
            assert opt not in ENUM_OPTIONS, f"{opt} of `{name}` takes fixed values but is not a choice"
            assert re.fullmatch(r"[A-Z][A-Z_]*", param.metavar or ""), (opt, param.metavar, line.group(0))


def test_version_is_the_same_everywhere():
    # the installed command, the package and the installed metadata (what pip shows) say one version
    from importlib.metadata import version

    import bpe_store

    script = Path(sys.executable).with_name("bpe-store")  # the console script pip installed
    r = subprocess.run([str(script), "--version"], capture_output=True, text=True, env=env(), timeout=60)
    assert r.returncode == 0 and r.stdout == f"bpe-store {bpe_store.__version__}\n", r.stderr
    assert version("bpe-store") == bpe_store.__version__
    assert run("--version").stdout == r.stdout


def test_shell_completion_is_enabled():
    from typer.testing import CliRunner

    text = run("--help").stdout
    assert "--install-completion" in text and "--show-completion" in text
    # the script for a named shell; Why not `--show-completion bash`: Typer's flag takes no value and
    # detects the shell from the parent processes, which fails under nohup or a daemon (exit 1)
    script = CliRunner().invoke(app, [], prog_name="bpe-store", env={"_BPE_STORE_COMPLETE": "source_bash"})
    assert script.exit_code == 0 and "_BPE_STORE_COMPLETE=complete_bash" in script.stdout, script.output
    done = CliRunner().invoke(app, [], prog_name="bpe-store", env={
        "_BPE_STORE_COMPLETE": "complete_bash", "COMP_WORDS": "bpe-store sql run.db q --format ", "COMP_CWORD": "5"})
    assert done.stdout.split() == ["table", "csv", "json", "jsonl"]
    cmds = CliRunner().invoke(app, [], prog_name="bpe-store", env={
        "_BPE_STORE_COMPLETE": "complete_bash", "COMP_WORDS": "bpe-store sh", "COMP_CWORD": "1"})
    assert cmds.stdout.split() == ["show"]


def _completions(words: str) -> list[str]:
    from typer.testing import CliRunner

    cword = len(words.split()) - (0 if words.endswith(" ") else 1)
    r = CliRunner().invoke(app, [], prog_name="bpe-store", env={
        "_BPE_STORE_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword)})
    assert r.exit_code == 0, r.output
    return r.stdout.split()


def test_completion_offers_pattern_names_and_format_choices():
    from bpe_store.text.pretokenize import PATTERNS

    assert _completions("bpe-store train c.txt --db r.db --pattern ") == list(PATTERNS)
    assert _completions("bpe-store train c.txt --pattern o2") == ["o200k", "o200k_base"]
    assert _completions("bpe-store encode --tokenizer t.tiktoken --pattern cl") == ["cl100k", "cl100k_base"]
    assert _completions("bpe-store train c.txt --format ") == ["text", "jsonl", "parquet"]
    assert _completions("bpe-store encode r.db c.txt --format ") == ["text", "jsonl", "parquet"]
    assert _completions("bpe-store show r.db merges -f ") == ["table", "csv", "json", "jsonl"]
    assert _completions("bpe-store export r.db --format ") == ["hf", "gpt2", "tiktoken"]
