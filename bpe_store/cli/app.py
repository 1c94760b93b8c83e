"""The ``bpe-store`` Typer app itself: the root group (argv kept for the resume command, errors
turned into one line and an exit code), help that reads like other Unix tools' (``UnixCommand``), the
``db`` sub-app, the root options (``--verbose``, ``--version``) and the options every command shares.

Command modules attach their commands to ``app`` (or ``db_app``) with ``@app.command()``.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from ..errors import EXIT_CODES, EXIT_FAILED, EXIT_SIGINT, BpeStoreError

_VERBOSE_KEY = "bpe_store.verbose"
ARGV_KEY = "bpe_store.argv"


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


class UnixCommand(TyperCommand):
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
    """Give every command of ``group`` (and its subgroups) the help style of ``UnixCommand``.

    Done once on the built command tree, so commands registered elsewhere (the command modules) get
    it too, and no option needs a hand-written metavar (a hand-written one is kept)."""
    for cmd in group.commands.values():
        if hasattr(cmd, "commands"):
            _tidy_help(cmd)
            continue
        if type(cmd) is TyperCommand:
            cmd.__class__ = UnixCommand  # same state, only help formatting differs
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
        ctx.meta.setdefault(ARGV_KEY, raw)
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


def _fail(ctx: typer.Context, exc: BaseException, code: int, message: str) -> None:
    if ctx.meta.get(_VERBOSE_KEY):
        typer.echo("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), err=True)
    typer.echo(f"error: {message}", err=True)
    ctx.exit(code)


#: Commands that only read the store: Ctrl-C stops them with nothing to keep.
_READING_COMMANDS = {"status", "sql", "show", "why", "report", "check"}


def _interrupted(ctx: typer.Context) -> str:
    """What Ctrl-C did, for the command that was running (``train`` keeps its last checkpoint;
    a reading command changed nothing)."""
    sub = ctx.invoked_subcommand
    if sub == "db":  # db upgrade is one transaction; db check only reads
        argv = ctx.meta.get(ARGV_KEY, [])
        sub = next((a for a in argv[argv.index("db") + 1:] if not a.startswith("-")), sub) if "db" in argv else sub
        if sub == "upgrade":
            return "interrupted; the upgrade is one transaction: the store's schema is as it was or upgraded"
    if sub in _READING_COMMANDS:
        return "interrupted; the store was only read, nothing changed"
    return "interrupted; the store is at its last checkpoint"


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


def set_verbose(ctx: typer.Context, verbose: bool) -> None:
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
    set_verbose(ctx, verbose)


def db_argument() -> Any:
    return typer.Argument(..., help="The store (a SQLite file made by bpe-store train).", show_default=False,
                          metavar="DB")


def verbose_option() -> Any:
    return typer.Option(False, "--verbose", "-v", help=VERBOSE_HELP)
