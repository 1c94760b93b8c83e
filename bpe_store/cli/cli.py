"""The ``bpe-store`` command line: a Typer app (also ``python -m bpe_store`` and ``python cli.py``).

Commands: ``train`` (resumable; progress bars or JSON lines; Ctrl-C saves a checkpoint),
``status``, ``sql`` (rows streamed), ``show``, ``why`` (read-only inspection, safe while a run
trains), ``report`` (an HTML page, ``bpe_store.inspection.report``) and ``db upgrade`` (schema migrations);
``encode``/``export`` come from ``cli_tokenize``. Help reads like other Unix tools' (``_Command``).

Errors a user can make are one line on stderr and a documented exit code (see
``bpe_store.errors``); ``--verbose`` adds the traceback.
"""

from __future__ import annotations

import csv
import glob as _glob
import io
import itertools
import json
import os
import shlex
import signal
import sys
import threading
import traceback
from collections.abc import Iterable, Iterator, Sequence
from enum import Enum
from pathlib import Path
from types import FrameType
from typing import IO, Any, Optional

import typer
from typer.core import TyperCommand, TyperGroup

from ..errors import EXIT_CODES, EXIT_FAILED, EXIT_SIGINT, EXIT_SIGTERM, BpeStoreError, InputError
from ..inspection import display
from ..inspection.progress import Reporter

_VERBOSE_KEY = "bpe_store.verbose"
_ARGV_KEY = "bpe_store.argv"


def _typer_handles() -> tuple[type[BaseException], ...]:
    """What Typer reports itself (exit, abort, usage errors), from whichever click it uses."""
    click_exception = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
    return (typer.Exit, typer.Abort, click_exception)


_TYPER_HANDLES = _typer_handles()


def _choices(param: Any) -> list[str] | None:
    """The values a Choice/Enum parameter takes, or None."""
    desc = getattr(param, "type_descriptor", None)
    if desc is None or not desc.is_choice:
        return None
    return [str(getattr(c, "value", c)) for c in desc.choices or ()]


#: Metavars by type, as click writes them (``--limit INTEGER``), for options that do not name one.
_TYPE_METAVARS = {int: "INTEGER", float: "FLOAT", str: "TEXT", Path: "PATH"}


def _option_metavar(param: Any) -> str:
    """``[table|csv|json]`` for a choice, else the type's name (``PATH``, ``INTEGER``, ...)."""
    choices = _choices(param)
    if choices:
        return "[" + "|".join(choices) + "]"
    desc = getattr(param, "type_descriptor", None)
    ann = getattr(desc, "annotation", None)
    if getattr(desc, "is_list", False):
        ann = (getattr(ann, "__args__", None) or (str,))[0]
    if getattr(desc, "is_path", False):
        return "PATH"
    return _TYPE_METAVARS.get(ann, "VALUE")  # type: ignore[arg-type]


def _argument_name(param: Any) -> str:
    """An argument as help shows it: its metavar or its name in capitals, ``...`` if repeatable."""
    name = param.metavar or _choices(param) and "|".join(_choices(param) or ()) or param.name.upper()
    return name + ("..." if param.nargs != 1 else "")


class _Command(TyperCommand):
    """A command whose help reads like other Unix tools': ``Usage: bpe-store sql [OPTIONS] DB QUERY``,
    ``--db PATH``, ``--format [table|csv|json]`` (Typer's own shows ``{DB}``, ``<list[str]>``)."""

    def collect_usage_pieces(self, ctx: typer.Context) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                name = _argument_name(param)
                pieces.append(name if param.required else f"[{name}]")
        return pieces

    def format_options(self, ctx: typer.Context, formatter: Any) -> None:
        args, opts = [], []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                args.append((_argument_name(param), record[1]))
            else:
                opts.append(record)
        for title, rows in (("Arguments", args), ("Options", opts)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


def _tidy_help(group: Any) -> None:
    """Give every command of ``group`` (and its subgroups) the help style of ``_Command``.

    Done once on the built command tree, so commands registered elsewhere (``cli_tokenize``) get
    it too, and no option needs a hand-written metavar (a hand-written one is kept)."""
    for cmd in group.commands.values():
        if hasattr(cmd, "commands"):
            _tidy_help(cmd)
            continue
        if type(cmd) is TyperCommand:
            cmd.__class__ = _Command  # same state, only help formatting differs
        for param in cmd.params:
            flag = getattr(param, "is_flag", False) or getattr(param, "count", False)
            if param.param_type_name == "option" and not flag and param.metavar is None:
                param.metavar = _option_metavar(param)


class _Group(TyperGroup):
    """The root group: keeps the raw argv (for the resume command) and turns errors into exit codes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _tidy_help(self)

    def make_context(self, info_name: str | None, args: list[str], parent: typer.Context | None = None,
                     **extra: Any) -> typer.Context:
        raw = list(args)
        ctx = super().make_context(info_name, args, parent=parent, **extra)
        ctx.meta.setdefault(_ARGV_KEY, raw)
        return ctx

    def invoke(self, ctx: typer.Context) -> Any:
        from ..interrupts import ctrl_c_stops_statements

        try:
            with ctrl_c_stops_statements():  # train and encode put their own handler inside it
                return super().invoke(ctx)
        except _TYPER_HANDLES:
            raise
        except BpeStoreError as exc:
            _fail(ctx, exc, exc.exit_code, str(exc))
        except KeyboardInterrupt as exc:
            _fail(ctx, exc, EXIT_SIGINT, _interrupted(ctx))
        except Exception as exc:  # noqa: BLE001 - a bug or the system: one line, the trace on --verbose
            _fail(ctx, exc, EXIT_FAILED, f"unexpected {type(exc).__name__}: {exc} "
                                         "(run with --verbose for the traceback)")


#: Commands that only read the store: Ctrl-C stops them with nothing to keep.
_READING_COMMANDS = {"status", "sql", "show", "why", "report", "check"}


def _interrupted(ctx: typer.Context) -> str:
    """What Ctrl-C did, for the command that was running (``train`` keeps its last checkpoint;
    a reading command changed nothing)."""
    sub = ctx.invoked_subcommand
    if sub == "db":  # db upgrade is one transaction; db check only reads
        argv = ctx.meta.get(_ARGV_KEY, [])
        sub = next((a for a in argv[argv.index("db") + 1:] if not a.startswith("-")), sub) if "db" in argv else sub
        if sub == "upgrade":
            return "interrupted; the upgrade is one transaction: the store's schema is as it was or upgraded"
    if sub in _READING_COMMANDS:
        return "interrupted; the store was only read, nothing changed"
    return "interrupted; the store is at its last checkpoint"


def _fail(ctx: typer.Context, exc: BaseException, code: int, message: str) -> None:
    if ctx.meta.get(_VERBOSE_KEY):
        typer.echo("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), err=True)
    typer.echo(f"error: {message}", err=True)
    ctx.exit(code)


def _exit_code_table() -> str:
    return "\n".join(f"  {code:>3}  {meaning}" for code, meaning in EXIT_CODES.items())


app = typer.Typer(
    cls=_Group, no_args_is_help=True, add_completion=True, pretty_exceptions_enable=False,
    rich_markup_mode=None, help="Byte-level BPE training whose whole state lives in one SQLite file.",
    epilog="\b\nExit codes:\n" + _exit_code_table())
db_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                     help="Manage the store file itself (schema migrations, checks).")
app.add_typer(db_app, name="db")

VERBOSE_HELP = "Show the traceback of an error."


def _set_verbose(ctx: typer.Context, verbose: bool) -> None:
    if verbose:
        ctx.meta[_VERBOSE_KEY] = True


def _show_version(value: bool) -> None:
    if value:
        from .._version import __version__

        typer.echo(f"bpe-store {__version__}")
        raise typer.Exit()


@app.callback()
def _root(ctx: typer.Context,
          verbose: bool = typer.Option(False, "--verbose", "-v", help=VERBOSE_HELP),
          version: bool = typer.Option(False, "--version", callback=_show_version, is_eager=True,
                                       help="Show the version and exit.")) -> None:
    """Byte-level BPE training whose whole state lives in one SQLite file."""
    _set_verbose(ctx, verbose)


# -- shared options and helpers -----------------------------------------------------------------


def complete_pattern(incomplete: str) -> list[tuple[str, str]]:
    """Shell completion of ``--pattern``: the pattern names (a regex of one's own is typed)."""
    from ..counting.pretokenize import PATTERNS, describe_pattern

    return [(name, f"{describe_pattern(regex)}'s pattern") for name, regex in PATTERNS.items()
            if name.startswith(incomplete)]


def _db_argument() -> Any:
    return typer.Argument(..., help="The store (a SQLite file made by bpe-store train).", show_default=False,
                          metavar="DB")


def _verbose_option() -> Any:
    return typer.Option(False, "--verbose", "-v", help=VERBOSE_HELP)


class Format(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"
    jsonl = "jsonl"


class InvalidUtf8(str, Enum):
    strict = "strict"
    replace = "replace"


class EngineName(str, Enum):
    auto = "auto"
    native = "native"
    python = "python"


class InputFormat(str, Enum):
    text = "text"
    jsonl = "jsonl"
    parquet = "parquet"


class ProgressMode(str, Enum):
    auto = "auto"
    bar = "bar"
    json = "json"
    none = "none"


def show_token(b: bytes) -> str:
    """Token bytes for a table or tree: quoted, in the one escaped form (``bpe_store.inspection.display``)."""
    return display.quote(b)


def _cell(v: Any) -> str:
    """A value as a table shows it: bytes always quoted; text as is, unless it has to be escaped or
    begins or ends with a space: then quoted and escaped like bytes (``'\\n'``, ``' '``, ``'\\xe2'``)."""
    if type(v) is int:  # the common case first: this runs for every cell of a large table
        return str(v)
    if v is None:
        return ""
    if isinstance(v, bytes):
        return display.quote(v)
    if isinstance(v, str):
        shown = display.escape(v)
        return f"'{shown}'" if shown is not v or display.needs_quotes(v) else v
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def _plain(v: Any) -> Any:
    """A value for CSV/JSON: token bytes become text (a byte that is not UTF-8: ``\\xNN``)."""
    return display.plain(v) if isinstance(v, (bytes, str)) else v


#: A table's column widths are measured on its first rows only, so ``sql`` can stream the rest:
#: a later, wider value is printed whole and shifts its line (never cut).
TABLE_WIDTH_ROWS = 1000
#: Rows formatted per write: one ``write`` per row costs more than formatting it.
_WRITE_BATCH = 1000


def _batched(lines: Iterable[str], out: IO[str]) -> None:
    for batch in iter(lambda: list(itertools.islice(lines, _WRITE_BATCH)), []):
        out.write("".join(batch))


def write_rows(out: IO[str], columns: Sequence[str], rows: Iterable[Sequence[Any]], fmt: Format) -> int:
    """Write rows to ``out`` as they come (an aligned table, CSV, a JSON list or JSON lines);
    returns how many. Memory stays flat however many rows: nothing but the table's first
    ``TABLE_WIDTH_ROWS`` rows and one batch of lines is held."""
    count = itertools.count(1)
    counted = (r for r, _ in zip(rows, count))
    if fmt in (Format.json, Format.jsonl):
        encode = json.JSONEncoder(ensure_ascii=False).encode  # json.dumps(..., ensure_ascii=False) makes one per call
        objs = (encode({c: _plain(v) for c, v in zip(columns, r)}) for r in counted)
        if fmt == Format.jsonl:
            _batched((o + "\n" for o in objs), out)
        else:
            first = next(objs, None)
            out.write("[]\n" if first is None else "[\n " + first)
            _batched((",\n " + o for o in objs), out)
            if first is not None:
                out.write("\n]\n")
    elif fmt == Format.csv:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")

        def csv_line(vals: Sequence[Any]) -> str:
            buf.seek(0)
            buf.truncate()
            w.writerow(vals)
            return buf.getvalue()

        out.write(csv_line(columns))
        _batched((csv_line([_plain(v) for v in r]) for r in counted), out)
    else:
        _write_table(out, columns, counted)
    return next(count) - 1


def _write_table(out: IO[str], columns: Sequence[str], rows: Iterator[Sequence[Any]]) -> None:
    k = len(columns)
    head = [[_cell(v) for v in r] + [isinstance(v, (int, float)) or v is None for v in r]
            for r in itertools.islice(rows, TABLE_WIDTH_ROWS)]
    numeric = [all(r[k + i] for r in head) for i in range(k)]
    # widths in terminal cells: a CJK character takes two (display.width)
    widths = [max([display.width(c)] + [display.width(r[i]) for r in head]) for i, c in enumerate(columns)]

    cols = list(zip(widths, numeric))

    def line(vals: Sequence[str]) -> str:
        # inlined padding (display.ljust/rjust): this runs for every cell of a large table
        parts = []
        for v, (w, num) in zip(vals, cols):
            gap = w - (len(v) if v.isascii() else display.width(v))
            parts.append(v if gap <= 0 else (" " * gap + v if num else v + " " * gap))
        return "  ".join(parts).rstrip() + "\n"

    out.write(line(columns) + line(["-" * w for w in widths]))
    _batched((line(r[:k]) for r in head), out)
    _batched((line([_cell(v) for v in r]) for r in rows), out)


def render(columns: Sequence[str], rows: Sequence[Sequence[Any]], fmt: Format) -> str:
    """Rows as an aligned text table, CSV, a JSON list of objects or JSON lines (``write_rows``)."""
    buf = io.StringIO()
    write_rows(buf, columns, rows, fmt)
    return buf.getvalue().rstrip("\n")


# -- train: inputs, signals, the resume command ---------------------------------------------------


def _is_glob(arg: str) -> bool:
    return any(ch in arg for ch in "*?[")


def _skip(p: Path, root: Path, db: Path) -> bool:
    """Hidden files and the store's own files are never inputs."""
    if any(part.startswith(".") for part in p.relative_to(root).parts):
        return True
    return p.resolve() in {Path(f"{db.resolve()}{s}") for s in ("", "-wal", "-shm", "-journal")}


def expand_inputs(args: Sequence[str], pattern: str, db: Path) -> list[Path]:
    """Files to train on, in a stable order: a file as given, a directory's files matching
    ``pattern`` (sorted), a quoted glob's matches (sorted); duplicates dropped."""
    out: list[Path] = []
    for arg in args:
        p = Path(arg)
        if p.is_dir():
            found = sorted(f for f in p.glob(pattern) if f.is_file() and not _skip(f, p, db))
            if not found:
                raise InputError(f"{arg}: no file matching {pattern!r} in this directory (see --glob)")
        elif _is_glob(arg) and not p.exists():
            found = sorted(Path(f) for f in _glob.glob(arg, recursive=True) if Path(f).is_file())
            if not found:
                raise InputError(f"{arg}: no file matches this pattern")
        elif not p.exists():
            raise InputError(f"{p}: no such file")  # before any progress line: one line, as for every error
        else:
            found = [p]
        out.extend(found)
    seen: set[Path] = set()
    unique = []
    for p in out:
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(p)
    return unique


class StopOnSignal:
    """SIGINT/SIGTERM handling for a training run.

    The first signal sets ``event``: training finishes its current sub-step, writes a checkpoint
    and raises ``Interrupted``. A second one raises KeyboardInterrupt at once; the open
    transaction is rolled back, so the store stays at its last checkpoint.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, notify: Any = None):
        self.event = threading.Event()
        self.signum: int | None = None
        self.notify = notify
        self._noted = False
        self._old: dict[int, Any] = {}

    @property
    def exit_code(self) -> int:
        return EXIT_SIGTERM if self.signum == signal.SIGTERM else EXIT_SIGINT

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else "SIGINT"

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        first = self.signum is None
        self.signum = signum
        if not first:
            raise KeyboardInterrupt
        self.event.set()  # nothing else here: writing to a stream inside a handler is not re-entrant

    def note_stopping(self) -> None:
        """Tell the person, once, that a stop is under way; called from the main flow, not the handler."""
        if self.signum is None or self._noted or self.notify is None:
            return
        self._noted = True
        self.notify(f"{self.signal_name}: finishing the current batch and writing a checkpoint "
                    "(press Ctrl-C again to stop at once)", {"stage": "stopping", "signal": self.signal_name})

    def watch(self, reporter: Any) -> Any:
        """A progress callable: ``reporter``, preceded by the stop notice once a signal came."""
        def progress(event: dict) -> None:
            self.note_stopping()
            reporter(event)

        return progress

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                self._old[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, old in self._old.items():
            signal.signal(s, old)
        self._old.clear()


def resume_command(ctx: typer.Context) -> str:
    """The command that resumes this run: this one, less ``--restart`` (which would start over)."""
    root = ctx.find_root()
    argv = [a for a in root.meta.get(_ARGV_KEY, sys.argv[1:]) if a != "--restart"]
    return shlex.join(shlex.split(root.info_name or "bpe-store") + argv)


def _saved_summary(db: Path) -> str:
    """What a stopped run's store holds, in one line."""
    from ..inspection.inspection import status
    from ..inspection.progress import format_bytes

    try:
        st = status(db)
    except BpeStoreError as exc:
        return f"could not read {db} back: {exc}"
    if st["phase"] == "counting":
        c = st["counting"]
        what = (f"{c['chunks_done']} of {c['chunks_total']} chunks counted "
                f"({format_bytes(c['bytes_done'])} of {format_bytes(c['bytes_total'])})")
    else:
        what = f"{st['merges_done']} of {st['merges_target']} merges"
    at = (st["last_checkpoint"] or {}).get("at", "?")
    return f"{db} holds {what} (last checkpoint {at})"


def _reporter(progress: ProgressMode, quiet: bool) -> Reporter:
    from ..inspection.progress import Silent, make_reporter

    return Silent() if quiet else make_reporter(progress.value)


class _OptionalRayAddress(_Command):
    """The train command, where ``--ray`` may stand alone: ``--ray`` (start a local cluster) or
    ``--ray ADDRESS``. Typer has no options with an optional value, so a bare ``--ray`` (followed
    by an option, the end, or a word that is not a Ray address such as an input file) is read as
    ``--ray local`` before parsing."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, _ray_flag_args(args))


def _ray_flag_args(args: list[str]) -> list[str]:
    out = list(args)
    for i, a in enumerate(out):
        if a == "--":
            break
        if a == "--ray":
            nxt = out[i + 1] if i + 1 < len(out) else None
            if nxt is None or not _looks_like_ray_address(nxt):
                out.insert(i + 1, "local")
    return out


def _looks_like_ray_address(word: str) -> bool:
    """``auto``, ``local``, ``host:port`` or ``ray://host:port`` (and not an existing file)."""
    if word in ("auto", "local") or word.startswith("ray://"):
        return True
    return ":" in word and not word.startswith("-") and not Path(word).exists()


@app.command(cls=_OptionalRayAddress)
def train(
    ctx: typer.Context,
    inputs: list[str] = typer.Argument(..., help="Corpus files (text, jsonl, parquet; .gz/.zst/.bz2/.xz), "
                                                 "directories (see --glob), quoted globs, or - (stdin).",
                                       show_default=False, metavar="INPUTS"),
    db: Path = typer.Option(..., "--db", help="The store (SQLite file); created, or resumed if it exists."),
    vocab_size: int = typer.Option(..., "--vocab-size", metavar="N",
                                   help="Target vocabulary size (specials + 256 + merges); a larger one "
                                        "continues a finished store."),
    special: list[str] = typer.Option([], "--special", metavar="TOKEN", help="A special token (repeat for several)."),
    pattern: Optional[str] = typer.Option(
        None, "--pattern", metavar="PATTERN", autocompletion=complete_pattern,
        help="Pre-tokenization pattern: gpt2 (the default), gpt4 (= cl100k), o200k, llama3, qwen2, or a regex."),
    glob: str = typer.Option("*", "--glob", metavar="PATTERN",
                             help="Files to take from directory inputs, e.g. '**/*.txt'."),
    input_format: Optional[InputFormat] = typer.Option(
        None, "--format",
        help="How to read the inputs (default: by extension: .jsonl/.ndjson/.json -> jsonl, .parquet -> parquet, "
             "else text; stdin: text)."),
    text_field: str = typer.Option("text", "--text-field", metavar="NAME",
                                   help="The jsonl field / parquet column holding the text."),
    workers: Optional[int] = typer.Option(None, "--workers", "--threads", metavar="N",
                                          help="Counting workers (default: all cores)."),
    chunk_size: int = typer.Option(8 << 20, "--chunk-size", metavar="BYTES", help="Bytes per counting chunk."),
    checkpoint_merges: Optional[int] = typer.Option(
        None, "--checkpoint-merges", metavar="N",
        help="Also end a batch after this many merges (default: by time only)."),
    checkpoint_seconds: float = typer.Option(30.0, "--checkpoint-seconds", metavar="S",
                                             help="Seconds of merging per checkpoint."),
    invalid_utf8: InvalidUtf8 = typer.Option(InvalidUtf8.strict, "--invalid-utf8",
                                             help="strict: refuse invalid UTF-8; replace: decode it as U+FFFD."),
    restart: bool = typer.Option(False, "--restart", help="Discard the store's progress and start over."),
    engine: EngineName = typer.Option(EngineName.auto, "--engine",
                                      help="Merge engine: native (C++), python, or auto (native when built)."),
    min_frequency: int = typer.Option(
        1, "--min-frequency", metavar="N",
        help="Words counted fewer times take part in no merge (1: every word counts)."),
    max_token_length: Optional[int] = typer.Option(
        None, "--max-token-length", metavar="N",
        help="No merge makes a token longer than N bytes (default: no limit)."),
    ray: Optional[str] = typer.Option(
        None, "--ray", metavar="ADDRESS",
        help="Count on a Ray cluster. ADDRESS may be left out: --ray alone starts a local one of "
             "--workers CPUs; with ADDRESS (host:port, ray://host:port or auto), that cluster. Needs "
             "pip install 'bpe-store[ray]'; inputs must be readable at the same path on every node."),
    max_pretoken_bytes: Optional[int] = typer.Option(
        None, "--max-pretoken-bytes", metavar="BYTES",
        help="Count a longer pre-token as pieces of at most this many bytes (4..64 MiB; default 1 MiB "
             "for a new store, the store's own on a resume)."),
    progress: ProgressMode = typer.Option(ProgressMode.auto, "--progress",
                                          help="auto: bars on a terminal, else JSON lines on stderr."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress and no summary."),
    verbose: bool = _verbose_option(),
) -> None:
    """Train a BPE into a store, or resume it: run the same command again after a stop.

    Ctrl-C (or SIGTERM) finishes the current batch, writes a checkpoint, prints the command that
    resumes, and exits 130 (143); a second Ctrl-C stops at once at the last checkpoint.

    \b
    Example: bpe-store train corpus.txt --db run.db --vocab-size 32000 --special '<|endoftext|>'
    Example: bpe-store train 'shards/*.jsonl.gz' --db run.db --vocab-size 32000 --text-field content
    """
    from ..errors import Interrupted
    from ..training.train import train as run_train

    _set_verbose(ctx, verbose)
    fmt = input_format.value if input_format is not None else None
    if "-" in inputs:
        if len(inputs) > 1:
            raise InputError("- (standard input) must be the only input")
        from ..counting.streams import Stream

        files: Any = Stream.stdin(fmt, text_field)
    else:
        files = expand_inputs(inputs, glob, db)
    reporter = _reporter(progress, quiet)
    if quiet and ray is not None:
        from ..counting.ray_count import quiet as quiet_ray

        quiet_ray()
    stopper = StopOnSignal(notify=reporter.note)
    try:
        with stopper:
            result = run_train(files, db, vocab_size, special, pattern="gpt2" if pattern is None else pattern,
                               workers=workers,
                               chunk_size=chunk_size, checkpoint_merges=checkpoint_merges,
                               checkpoint_seconds=checkpoint_seconds, invalid_utf8=invalid_utf8.value,
                               restart=restart, progress=stopper.watch(reporter), stop=stopper.event,
                               engine=engine.value, format=fmt, text_field=text_field,
                               min_frequency=min_frequency, max_token_length=max_token_length,
                               count_engine="local" if ray is None else "ray",
                               ray_address=None if ray in (None, "local") else ray,
                               max_pretoken_bytes=max_pretoken_bytes)
    except (Interrupted, KeyboardInterrupt) as exc:
        stopper.note_stopping()
        reporter.close()
        _report_stop(ctx, db, stopper, reporter, at_once=isinstance(exc, KeyboardInterrupt))
        raise typer.Exit(stopper.exit_code) from None
    finally:
        reporter.close()
    reason = {"vocab_size": "reached the vocabulary size", "no_pairs": "no pair left to merge"}
    reporter.note(f"{db}: {len(result.merges)} merges, vocab {len(result.vocab)} "
                  f"({reason.get(result.stop_reason or '', result.phase)})",
                  {"stage": "done", "merges": len(result.merges), "vocab_size": len(result.vocab),
                   "stop_reason": result.stop_reason})


def _report_stop(ctx: typer.Context, db: Path, stopper: StopOnSignal, reporter: Reporter, at_once: bool) -> None:
    """After a stop: what the store holds and the exact command that resumes (always shown)."""
    how = "stopped at once" if at_once else "stopped after a checkpoint"
    saved = _saved_summary(db)
    cmd = resume_command(ctx)
    reporter.note("", {"stage": "interrupted", "signal": stopper.signal_name, "saved": saved, "resume": cmd})
    typer.echo(f"{stopper.signal_name}: {how}; {saved}.\nResume with:\n  {cmd}", err=True)


# -- status ---------------------------------------------------------------------------------------


def _status_lines(st: dict) -> Iterator[str]:
    from ..inspection.progress import format_bytes, format_duration

    yield f"store        {st['path']}  ({format_bytes(st['db_bytes'])}, schema {st['schema']})"
    if not st["schema_is_current"]:
        yield f"             schema is older than this bpe-store's: bpe-store db upgrade {st['path']}"
    done, target = st["merges_done"], st["merges_target"]
    pct = f" ({100 * done / target:.1f}%)" if target else ""
    phase = st["phase"] + (f" ({st['stop_reason']})" if st["stop_reason"] else "")
    yield f"phase        {phase}"
    c = st["counting"]
    yield (f"counting     {c['chunks_done']} / {c['chunks_total']} chunks, "
           f"{format_bytes(c['bytes_done'])} / {format_bytes(c['bytes_total'])}; {st['words']} distinct words")
    yield f"merges       {done} / {target}{pct}  (vocab size {st['vocab_size']})"
    pairs = st.get("pairs") or {}
    if pairs.get("note"):
        yield f"next merge   ? ({pairs['note']})"
    elif pairs.get("next"):
        nxt = pairs["next"]
        yield (f"next merge   {show_token(nxt['left'].encode())} + {show_token(nxt['right'].encode())}"
               f"  (count {nxt['count']}; bpe-store show {st['path']} pairs)")
    unit = st["speed_unit"]
    speed = "?" if st["speed"] is None else (f"{format_bytes(st['speed'])}/s" if unit == "bytes/s"
                                              else f"{st['speed']:.0f} merges/s")
    yield (f"elapsed      {format_duration(st['elapsed_s'])} of training   speed {speed}   "
           f"ETA {format_duration(st['eta_s'])}")
    last = st["last_checkpoint"]
    if last:
        yield (f"checkpoint   {last['at']} ({format_duration(last['age_s'])} ago), {last['phase']}, "
               f"{last['merges_done']} merges")
    yield _holder_line(st)
    if st.get("wal_note"):
        yield f"wal          {format_bytes(st['wal_bytes'])}: {st['wal_note']}"
    yield f"inputs       {len(st['inputs'])} file(s), {format_bytes(sum(i['size'] for i in st['inputs']))}"
    for i in st["inputs"]:
        kind = "" if i.get("format", "text") == "text" else f"  {i['format']}"
        if i.get("text_field") and i["format"] in ("jsonl", "parquet"):
            kind += f" field {i['text_field']!r}"
        if i.get("compression", "none") != "none":
            kind += f" ({i['compression']})"
        docs = "" if i.get("documents") is None else f"  {i['documents']} documents"
        counted = " counted" if i["state"] == "stream" else ""
        yield (f"  {i['path']}{kind}  {format_bytes(i['size'])}{counted}{docs}  sha256 {i['sha256'][:12]}"
               f"  {i['state']}")
    options = "".join(f", {name} {st[key]}" for name, key in (("min frequency", "min_frequency"),
                                                                 ("max token length", "max_token_length"))
                      if st[key] not in (None, 1))
    yield (f"parameters   specials {st['special_tokens']}, invalid UTF-8 {st['invalid_utf8']}, "
           f"pattern {st['pattern_name']}{options}")
    if st["sessions"]:
        yield f"sessions     {len(st['sessions'])} most recent:"
        for s in st["sessions"]:
            yield _session_line(s)


def _holder_line(st: dict) -> str:
    h = st["holder"]
    if not st["held"]:
        return "running      no (no process holds the store)"
    if h and h.get("pid"):
        return f"running      yes: pid {h['pid']} on {h['host']} since {h['started_at']}"
    return "running      yes (a process holds the store)"


def _session_line(s: dict) -> str:
    end = s["ended_at"] or "-"
    who = f"pid {s['pid']} on {s['host']}" if s["pid"] else "before sessions were recorded"
    return (f"  #{s['id']}  {s['started_at']} .. {end}  {s['state']:<14}  merges {s['merges_start']}"
            f"->{s['merges_end'] if s['merges_end'] is not None else '?'}  {who}")


@app.command()
def status(
    ctx: typer.Context,
    db: Path = _db_argument(),
    as_json: bool = typer.Option(False, "--json", help="One JSON object, for scripts."),
    verbose: bool = _verbose_option(),
) -> None:
    """Where a run is: phase, inputs, merges done / target, elapsed, ETA, last checkpoint.

    Also the file's size, whether a training process holds it now, and its recent sessions.
    Safe while a run trains (it only reads).

    \b
    Example: bpe-store status run.db --json
    """
    from ..inspection.inspection import status as read_status

    _set_verbose(ctx, verbose)
    st = read_status(db)
    if as_json:
        typer.echo(json.dumps(st, indent=1))
    else:
        typer.echo("\n".join(_status_lines(st)))


# -- sql, show, why -------------------------------------------------------------------------------


@app.command()
def sql(
    ctx: typer.Context,
    db: Path = _db_argument(),
    query: str = typer.Argument(..., help="One SQL statement (read-only).", show_default=False, metavar="QUERY"),
    fmt: Format = typer.Option(Format.table, "--format", "-f",
                               help="Output format; jsonl is one JSON object per line."),
    limit: Optional[int] = typer.Option(None, "--limit", help="At most this many rows."),
    verbose: bool = _verbose_option(),
) -> None:
    """Run a read-only SQL query on a store and print the rows (a write is refused).

    Works while a training run writes to the same store: the query sees its last checkpoint.
    Rows are printed as they are read, so any number of them takes little memory; a table's
    column widths come from its first 1000 rows. Token text is escaped (\\n, \\xNN for a byte
    that is not UTF-8) and quoted when a space begins or ends it. Views for people: merge_log,
    top_pairs, top_words, vocab_text (each with a hex column of the token bytes), progress.

    \b
    Example: bpe-store sql run.db "SELECT * FROM merge_log LIMIT 10" --format csv
    """
    from ..inspection.inspection import query as run_query
    from ..inspection.inspection import write_query

    _set_verbose(ctx, verbose)
    if limit is not None and limit < 0:
        raise InputError("--limit must not be negative")
    try:  # csv / json / jsonl of a SELECT: formatted natively, at the speed of sqlite3 -csv
        written = write_query(db, query, sys.stdout.buffer, fmt.value, limit, note=_note)
    except BrokenPipeError:
        _stdout_gone()
    if written is not None:
        return
    with run_query(db, query, note=_note) as (columns, rows):
        _write_stdout(columns, itertools.islice(rows, limit), fmt)


def _note(line: str) -> None:
    """One line for people about what a command read, on stderr (stdout holds only the rows)."""
    typer.echo(f"note: {line}", err=True)


def _write_stdout(columns: Sequence[str], rows: Iterable[Sequence[Any]], fmt: Format) -> None:
    """``write_rows`` to stdout; a reader that goes away (``| head``) ends it quietly."""
    try:
        write_rows(sys.stdout, columns, rows, fmt)
        sys.stdout.flush()
    except BrokenPipeError:
        _stdout_gone()


def _stdout_gone() -> None:
    """A reader that went away (``| head``): end quietly, exit 0."""
    # Python would complain again when it flushes stdout at exit: point it at /dev/null
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    raise typer.Exit(0) from None


class ShowWhat(str, Enum):
    merges = "merges"
    words = "words"
    pairs = "pairs"
    vocab = "vocab"


@app.command()
def show(
    ctx: typer.Context,
    db: Path = _db_argument(),
    what: ShowWhat = typer.Argument(..., help="merges (by rank), words and pairs (most frequent first), vocab (by id).",
                                    show_default=False, metavar="merges|words|pairs|vocab"),
    limit: int = typer.Option(20, "--limit", "-n", help="At most this many rows."),
    offset: int = typer.Option(0, "--offset", help="Skip this many rows first."),
    fmt: Format = typer.Option(Format.table, "--format", "-f", help="Output format."),
    verbose: bool = _verbose_option(),
) -> None:
    """List a store's merges, words, pairs or vocabulary, tokens shown as quoted text.

    \b
    Example: bpe-store show run.db merges --limit 10
    """
    from ..inspection.inspection import pairs_note
    from ..inspection.inspection import show as read_show

    _set_verbose(ctx, verbose)
    columns, rows = read_show(db, what.value, limit, offset)
    if what == ShowWhat.pairs:
        said = pairs_note(db)
        if said:
            _note(said)
    typer.echo(render(columns, rows, fmt))


def _tree_lines(node: dict, prefix: str = "", last: bool = True, top: bool = True) -> Iterator[str]:
    if node["kind"] == "merge":
        what = f"id {node['id']}, merge rank {node['rank']}, count {node['count']}"
    else:
        what = f"id {node['id']}, {node['kind']}"
    branch = "" if top else ("└── " if last else "├── ")
    yield f"{prefix}{branch}{show_token(node['bytes'])}  ({what})"
    child_prefix = prefix if top else prefix + ("    " if last else "│   ")
    parts = node["parts"]
    for i, part in enumerate(parts):
        yield from _tree_lines(part, child_prefix, i == len(parts) - 1, top=False)


@app.command()
def why(
    ctx: typer.Context,
    db: Path = _db_argument(),
    token: str = typer.Argument(..., help="The token as text (e.g. ' the'), or its id with --id.", show_default=False,
                               metavar="TOKEN"),
    by_id: bool = typer.Option(False, "--id", help="TOKEN is a vocabulary id."),
    limit: int = typer.Option(10, "--limit", "-n", help="How many words to list."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object, for scripts."),
    verbose: bool = _verbose_option(),
) -> None:
    """How a token was built (its merges, with counts at merge time) and the words that hold it.

    \b
    Example: bpe-store why run.db ' the'
    """
    from ..inspection.inspection import why as explain

    _set_verbose(ctx, verbose)
    if by_id:
        try:
            key: str | int = int(token)
        except ValueError:
            raise InputError(f"--id needs an integer id, not {token!r}") from None
    else:
        key = token
    info = explain(db, key, limit)
    if as_json:
        typer.echo(json.dumps(_jsonable(info), ensure_ascii=False, indent=1))
        return
    lines = list(_tree_lines(info["token"]))
    lines.append("")
    if info["words"]:
        lines.append(f"in {info['words_containing']} distinct words ({info['occurrences']} occurrences); "
                     f"the most frequent (current split, * = uses this token):")
    for w in info["words"]:
        split = " ".join(show_token(b) for b in w["split"])
        mark = "*" if w["uses"] else " "
        lines.append(f" {mark} {w['count']:>10}  {show_token(w['word'])}  = {split}")
    lines.append(info["answer"])
    typer.echo("\n".join(lines))


def _jsonable(v: Any) -> Any:
    if isinstance(v, bytes):
        return _plain(v)
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    return v


# -- db -------------------------------------------------------------------------------------------


@db_app.command("upgrade")
def db_upgrade(
    ctx: typer.Context,
    db: Path = _db_argument(),
    verbose: bool = _verbose_option(),
) -> None:
    """Upgrade a store's schema to this bpe-store's, in place (one transaction).

    Refused while a training run holds the store.

    \b
    Example: bpe-store db upgrade run.db
    """
    from ..store import migrate
    from ..store.store import Store

    _set_verbose(ctx, verbose)
    with Store.open(db, allow_old=True) as store:
        before = migrate.current_revision(store.conn)
        store.conn.commit()
        head = migrate.head_revision()
        if before == head:
            typer.echo(f"{db}: already at the newest schema ({head})")
            return
        migrate.upgrade(store.conn)
        store.conn.commit()
    typer.echo(f"{db}: upgraded the schema from {before} to {head}")


@db_app.command("check")
def db_check(
    ctx: typer.Context,
    db: Path = _db_argument(),
    deep: bool = typer.Option(False, "--deep", help="Also read every page (SQLite's quick_check) and every "
                                                     "word (rebuilt as a resume does): seconds on a big store."),
    as_json: bool = typer.Option(False, "--json", help="Print the findings as JSON."),
    verbose: bool = _verbose_option(),
) -> None:
    """Run every check bpe_store makes of a store and say what is wrong (exit 0, or 4).

    The schema, the run, the inputs, the phase, the merge log and vocabulary (each merge's token
    is its two parts joined; each vocabulary row is what made it; the log matches the digest its
    newest checkpoint recorded) and the history rows. Read-only; safe while a run trains.

    \b
    Example: bpe-store db check run.db
    """
    from ..store.check import check_store
    from ..training.train import check_words

    _set_verbose(ctx, verbose)
    findings = check_store(db, deep=deep, words_check=check_words)
    failed = [f for f in findings if not f.ok]
    if as_json:
        typer.echo(json.dumps({"path": str(db), "ok": not failed,
                               "checks": [{"check": f.check, "ok": f.ok, "skipped": f.skipped, "problem": f.problem,
                                           "detail": f.detail} for f in findings]}, indent=1))
    else:
        width = max(len(f.check) for f in findings)
        for f in findings:
            verdict = "skip" if f.skipped else "ok" if f.ok else "FAILED"
            typer.echo(f"{verdict:<6}  {f.check:<{width}}  {f.detail if f.ok else f.problem}")
    if failed:
        from ..errors import StoreError

        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        raise StoreError(f"{db}: {len(failed)} of {len(findings)} checks failed: {failed[0].check}{more}")


# -- report ---------------------------------------------------------------------------------------


@app.command()
def report(
    ctx: typer.Context,
    db: Path = _db_argument(),
    out: Path = typer.Option(Path("report.html"), "--out", "-o", metavar="PATH",
                             help="The HTML page to write (a previous one is replaced)."),
    held_out: Optional[Path] = typer.Option(None, "--held-out", metavar="FILE",
                                            help="Text to measure compression on (default: a sample of the "
                                                 "training inputs)."),
    sample_bytes: int = typer.Option(2 << 20, "--sample-bytes", metavar="BYTES", min=1,
                                     help="Size of the default sample (without --held-out)."),
    threads: int = typer.Option(0, "--threads", metavar="N", min=0, help="Encoding threads (0 = all cores)."),
    compare: list[str] = typer.Option(
        [], "--compare", metavar="FILE",
        help="Another tokenizer to measure on the same text (repeatable): a .tiktoken ranks file (OpenAI's "
             "cl100k_base / o200k_base by name; another as FILE=PATTERN) or a byte-level tokenizer.json."),
    verbose: bool = _verbose_option(),
) -> None:
    """Write one self-contained HTML page of plots and facts about a run.

    Compression (bytes per token) of held-out text at every vocabulary size up to the store's, by
    script and beside other tokenizers (--compare), merge count against rank, token length by
    script, the longest, last learned, partial UTF-8 and unused tokens, the most frequent words
    still split into many tokens, and the run's inputs, parameters, time per stage, checkpoints
    and sessions. The page loads nothing from the network. Needs matplotlib: pip install
    'bpe-store[report]'.

    \b
    Example: bpe-store report run.db --held-out valid.txt -o report.html
    Example: bpe-store report run.db --compare cl100k_base.tiktoken.gz -o report.html
    """
    from ..inspection.report import write_report

    _set_verbose(ctx, verbose)
    data = write_report(db, out, held_out, sample_bytes, threads, compare)
    typer.echo(f"{out}: report of {data['status']['merges_done']} merges; "
               f"{data['bytes_per_token'][-1]:.3f} bytes per token on {data['held_out']['bytes']} bytes of "
               f"held-out text", err=True)


from . import cli_tokenize  # noqa: E402  (commands defined in their own module)

cli_tokenize.register(app)


def _prog_name() -> str:
    """How this process was started, for usage lines and the resume command."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("bpe-store")
    if argv0.name == "__main__.py":
        return "python -m bpe_store"
    if argv0.suffix == ".py":
        return f"python {sys.argv[0]}"
    return "bpe-store"


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``bpe-store``, ``python -m bpe_store`` and ``python cli.py``."""
    app(args=argv, prog_name=_prog_name())
