"""The commands that read a store for people, safe while a run trains: ``status``, ``sql``,
``show``, ``why`` and ``report``.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import Any, Optional

import typer

from ..errors import InputError
from .app import app, db_argument, set_verbose, verbose_option
from .output import Format, plain, render, show_token, stdout_gone, write_stdout


def _eval_line(ev: Optional[dict]) -> Iterator[str]:
    """``status``'s line about the newest held-out measurement (``bpe-store eval``), if any."""
    if ev:
        tpw = ev["tokens_per_word"]
        yield (f"eval         at vocab size {ev['vocab_size']}: {ev['bytes_per_token']:.3f} bytes/token, "
               f"{'?' if tpw is None else f'{tpw:.3f}'} tokens/word on {ev['heldout']} ({ev['created_at']}; "
               "show evals lists all)")


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
    nxt = pairs.get("next")
    if pairs.get("note") and not (nxt and pairs.get("stage2")):  # stage 2: the pair, a few seconds old
        yield f"next merge   ? ({pairs['note']})"
    elif nxt:
        lag = f"; {pairs['note']}" if pairs.get("note") else ""
        yield (f"next merge   {show_token(nxt['left'].encode())} + {show_token(nxt['right'].encode())}"
               f"  (count {nxt['count']}; bpe-store show {st['path']} pairs{lag})")
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
    yield from _notes(st)
    yield f"inputs       {len(st['inputs'])} file(s), {format_bytes(sum(i['size'] for i in st['inputs']))}"
    yield from _eval_line(st.get("eval"))
    for i in st["inputs"]:
        kind = "" if i.get("format", "text") == "text" else f"  {i['format']}"
        if i.get("text_field") and i["format"] in ("jsonl", "parquet"):
            kind += f" field {i['text_field']!r}"
        if i.get("compression", "none") != "none":
            kind += f" ({i['compression']})"
        docs = "" if i.get("documents") is None else f"  {i['documents']} documents"
        counted = " counted" if i["state"] == "stream" else ""
        yield (f"  {i['path']}{kind}  {format_bytes(i['size'])}{counted}{docs}  {i['hash']} {i['digest'][:12]}"
               f"  {i['state']}")
    options = "".join(f", {name} {st[key]}" for name, key in (("min frequency", "min_frequency"),
                                                                 ("max token length", "max_token_length"))
                      if st[key] not in (None, 1))
    yield (f"parameters   specials {st['special_tokens']}, invalid UTF-8 {st['invalid_utf8']}, "
           f"pattern {st['pattern_name']}{options}")
    if st.get("superword"):
        sw = st["superword"]
        yield (f"superword    stage 1: merges 0..{sw['from'] - 1} (pattern {sw['stage1_pattern']}); stage 2: "
               f"{sw['superword_merges']} superword merges of at most {sw['max_words']} words "
               "(SQL: superword_merges; top_pairs: the next ones)")
    yield from _base_lines(st.get("base"))
    if st["sessions"]:
        yield f"sessions     {len(st['sessions'])} most recent:"
        for s in st["sessions"]:
            yield _session_line(s)


def _base_lines(b: dict | None) -> Iterator[str]:
    """The base a store extends (``train --extend``), if any."""
    if b is not None:
        yield (f"base         {b['kind']} {b['source']} (SHA-256 {b['sha256'][:12]}...): its {b['tokens']} tokens "
               f"and {b['merges']} merges come first, with their ids; new ids from {b['next_id']}")


def _notes(st: dict) -> Iterator[str]:
    """The lines about damaged history rows and a WAL a reader pins, when there are any."""
    from ..inspection.answers import reader_budgets_text
    from ..inspection.progress import format_bytes

    if st.get("history_problems"):
        yield (f"history      damaged: {'; '.join(st['history_problems'][:2])}; `bpe-store db check {st['path']}` "
               "lists every problem (speed, ETA and sessions are not shown)")
    if st.get("wal_note"):
        yield f"wal          {format_bytes(st['wal_bytes'])}: {st['wal_note']}"
    elif st.get("held") and st.get("reader_budgets"):  # a run in progress: what a reader would cost it
        yield ("readers      a reader that pins the WAL defers the run's writes: "
               f"{reader_budgets_text(st['reader_budgets'])}")


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
    db: Path = db_argument(),
    as_json: bool = typer.Option(False, "--json", help="One JSON object, for scripts."),
    verbose: bool = verbose_option(),
) -> None:
    """Where a run is: phase, inputs, merges done / target, elapsed, ETA, last checkpoint.

    Also the file's size, whether a training process holds it now, and its recent sessions.
    Safe while a run trains (it only reads).

    \b
    Example: bpe-store status run.db --json
    """
    from ..inspection.answers import status as read_status

    set_verbose(ctx, verbose)
    st = read_status(db)
    if as_json:
        typer.echo(json.dumps(st, indent=1))
    else:
        typer.echo("\n".join(_status_lines(st)))


@app.command()
def sql(
    ctx: typer.Context,
    db: Path = db_argument(),
    query: str = typer.Argument(..., help="One SQL statement (read-only).", show_default=False, metavar="QUERY"),
    fmt: Format = typer.Option(Format.table, "--format", "-f",
                               help="Output format; jsonl is one JSON object per line."),
    limit: Optional[int] = typer.Option(None, "--limit", help="At most this many rows."),
    verbose: bool = verbose_option(),
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
    from ..inspection.answers import query as run_query
    from ..inspection.answers import write_query

    set_verbose(ctx, verbose)
    if limit is not None and limit < 0:
        raise InputError("--limit must not be negative")
    try:  # csv / json / jsonl of a SELECT: formatted natively, at the speed of sqlite3 -csv
        written = write_query(db, query, sys.stdout.buffer, fmt.value, limit, note=_note)
    except BrokenPipeError:
        stdout_gone()
    if written is not None:
        return
    with run_query(db, query, note=_note) as (columns, rows):
        write_stdout(columns, itertools.islice(rows, limit), fmt)


def _note(line: str) -> None:
    """One line for people about what a command read, on stderr (stdout holds only the rows)."""
    typer.echo(f"note: {line}", err=True)


class ShowWhat(str, Enum):
    merges = "merges"
    words = "words"
    pairs = "pairs"
    vocab = "vocab"
    evals = "evals"


@app.command()
def show(
    ctx: typer.Context,
    db: Path = db_argument(),
    what: ShowWhat = typer.Argument(..., help="merges (by rank), words and pairs (most frequent first), vocab (by id), "
                                              "evals (held-out measurements: bpe-store eval, train --eval).",
                                    show_default=False, metavar="merges|words|pairs|vocab|evals"),
    limit: int = typer.Option(20, "--limit", "-n", help="At most this many rows."),
    offset: int = typer.Option(0, "--offset", help="Skip this many rows first."),
    fmt: Format = typer.Option(Format.table, "--format", "-f", help="Output format."),
    verbose: bool = verbose_option(),
) -> None:
    """List a store's merges, words, pairs or vocabulary, tokens shown as quoted text.

    \b
    Example: bpe-store show run.db merges --limit 10
    """
    from ..inspection.answers import pairs_note
    from ..inspection.answers import show as read_show

    set_verbose(ctx, verbose)
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
    db: Path = db_argument(),
    token: str = typer.Argument(..., help="The token as text (e.g. ' the'), or its id with --id.", show_default=False,
                               metavar="TOKEN"),
    by_id: bool = typer.Option(False, "--id", help="TOKEN is a vocabulary id."),
    limit: int = typer.Option(10, "--limit", "-n", help="How many words to list."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object, for scripts."),
    verbose: bool = verbose_option(),
) -> None:
    """How a token was built (its merges, with counts at merge time) and the words that hold it.

    \b
    Example: bpe-store why run.db ' the'
    """
    from ..inspection.answers import why as explain

    set_verbose(ctx, verbose)
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
        return plain(v)
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    return v


@app.command()
def report(
    ctx: typer.Context,
    db: Path = db_argument(),
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
    verbose: bool = verbose_option(),
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

    set_verbose(ctx, verbose)
    data = write_report(db, out, held_out, sample_bytes, threads, compare)
    typer.echo(f"{out}: report of {data['status']['merges_done']} merges; "
               f"{data['bytes_per_token'][-1]:.3f} bytes per token on {data['held_out']['bytes']} bytes of "
               f"held-out text", err=True)
