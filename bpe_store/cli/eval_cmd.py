"""The ``eval`` command: tokenizers measured on held-out text, a store at many vocabulary sizes
(``bpe_store.inspection.evaluation``), printed and recorded in the stores measured.
"""

from __future__ import annotations

import dataclasses
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from ..errors import InputError
from .app import app, set_verbose, verbose_option
from .input_args import (
    InputFormat,
    InvalidUtf8,
    format_option,
    glob_option,
    invalid_utf8_option,
    resolve_inputs,
    text_field_option,
)
from .output import Format as OutFormat
from .output import write_stdout

if TYPE_CHECKING:
    from ..inspection.evaluation import Evaluation
    from ..store.evaluation_rows import Measurement

#: The columns printed, in order (``--json``: the keys; ``grp`` and ``parity`` only with ``--by``).
COLUMNS = ("tokenizer", "vocab_size", "grp", "bytes_per_token", "chars_per_token", "tokens_per_word",
           "renyi_efficiency", "vocab_used", "tokens_unused", "parity", "tokens")


def _sizes(text: Optional[str]) -> Optional[list[int]]:
    """``--sizes 8000,16000``: the sizes, or an InputError naming what is not one."""
    if text is None:
        return None
    out = []
    for part in text.replace(" ", "").split(","):
        if not part.isdigit() or not part.isascii():
            raise InputError(f"--sizes: {part!r} is not a vocabulary size (give them as 8000,16000,32000)")
        out.append(int(part))
    return out


def _shown(m: Measurement) -> str:
    """How a row names its tokenizer on screen: a store by its path, others by their label."""
    from ..store.evaluation_rows import SELF

    return m.source if m.tokenizer == SELF else m.tokenizer


def _record(result: Evaluation, stores: list[Path]) -> None:
    """Each store gets its own rows (as ``self``) and every other tokenizer's (as points beside it)."""
    from ..inspection.evaluation import record_evaluation
    from ..store.evaluation_rows import SELF

    for db in stores:
        rows = [m if m.tokenizer != SELF or m.source == str(db)
                else dataclasses.replace(m, tokenizer=Path(m.source).name)
                for m in result.rows]
        why = record_evaluation(db, rows)
        typer.echo(f"recorded {len(rows)} measurements in {db} (view eval_curve)" if why is None
              else f"not recorded: {why}", err=True)


class Grouping(str, Enum):
    """``--by``: the groups of the held-out text measured apart (``evaluation.GROUPINGS``)."""

    none = "none"
    script = "script"
    file = "file"


class _Eval:
    """``eval``'s arguments and options, as ``--help`` says them (in the order the command lists them)."""

    tokenizers = typer.Argument(
        ..., metavar="TOKENIZERS", show_default=False,
        help="What to measure: a store (every size of --sizes/--every: prefixes of its merge log), a .tiktoken "
             "ranks file (FILE=PATTERN or --pattern; OpenAI's file names know theirs), a byte-level "
             "tokenizer.json, GPT-2 files (vocab.json with merges.txt beside it, or their directory), or "
             "cl100k_base / o200k_base by name.")
    on = typer.Option(..., "--on", metavar="HELD_OUT", show_default=False,
                      help="Held-out text (repeatable), any input train reads: text, jsonl, parquet, compressed, "
                           "directories, quoted globs.")
    sizes = typer.Option(None, "--sizes", metavar="SIZES",
                         help="Vocabulary sizes of each store to measure (default: its own).")
    every = typer.Option(None, "--every", metavar="N", help="Measure each store every N tokens, and at its own size.")
    pattern = typer.Option(None, "--pattern", metavar="NAME",
                           help="The pattern of .tiktoken files given without =PATTERN.")
    alpha = typer.Option(2.5, "--alpha", help="The order of Rényi efficiency.")
    by = typer.Option(Grouping.none, "--by",
                      help="Also one row per script (Latin, Cyrillic, CJK, other letters) or per held-out input, "
                           "with parity: bytes per token over the best group's.")
    as_json = typer.Option(False, "--json", help="One JSON object per row (JSON lines).")
    as_csv = typer.Option(False, "--csv", help="CSV with a header line.")
    record = typer.Option(True, "--record/--no-record",
                          help="Write the measurements into each store measured (table evaluations).")
    residues = typer.Option(False, "--residues",
                            help="Also count, for each store, how often each merge's token is final in its own "
                                 "words: residues are rarely final (table token_use, view residue_tokens).")
    threads = typer.Option(0, "--threads", metavar="N", min=0, help="Encoding threads (0 = all cores).")
    input_format = format_option("How to read the held-out inputs (default: by extension).")
    text_field = text_field_option()
    glob = glob_option("**/*.txt")
    invalid_utf8 = invalid_utf8_option()


def _residues(stores: list[Path], record: bool) -> None:
    """``--residues``: each store's token use, summed up on stderr and recorded (``residue.py``)."""
    from ..inspection.residue import RESIDUE_RATIO, record_token_use, residues, token_use

    for db in stores:
        rows, n_merges = token_use(db)
        few = residues(rows)
        typer.echo(f"{db}: {len(few):,} of {len(rows):,} merged tokens are residues (final uses under "
                   f"{RESIDUE_RATIO:.0%} of their merge count)", err=True)
        if record:
            why = record_token_use(db, rows, n_merges)
            typer.echo(f"recorded in {db}: SELECT * FROM residue_tokens" if why is None else f"not recorded: {why}",
                       err=True)


@app.command(name="eval")
def eval_(
    ctx: typer.Context, tokenizers: list[str] = _Eval.tokenizers, on: list[str] = _Eval.on,
    sizes: Optional[str] = _Eval.sizes, every: Optional[int] = _Eval.every, pattern: Optional[str] = _Eval.pattern,
    alpha: float = _Eval.alpha, by: Grouping = _Eval.by, as_json: bool = _Eval.as_json, as_csv: bool = _Eval.as_csv,
    record: bool = _Eval.record, residues: bool = _Eval.residues, threads: int = _Eval.threads,
    input_format: Optional[InputFormat] = _Eval.input_format, text_field: str = _Eval.text_field,
    glob: str = _Eval.glob, invalid_utf8: InvalidUtf8 = _Eval.invalid_utf8,
    verbose: bool = verbose_option(),
) -> None:
    """Measure tokenizers on held-out text: a store at many sizes, beside others.

    Bytes and characters per token, tokens per word, Rényi efficiency, the share of the
    vocabulary used and the tokens never produced, in all, by script or by input file.

    A store is measured at any vocabulary size at once (each prefix of its merge log is a
    tokenizer), beside other tokenizers; the measurements are also written into each store
    (SQL: SELECT * FROM eval_curve), which status, show evals and the report read.

    \b
    Example: bpe-store eval run.db cl100k_base --on held-out.txt --sizes 8000,16000,32000
    """
    from ..inspection.candidates import parse_candidate
    from ..inspection.evaluation import evaluate
    from ..inspection.heldout import read_heldout

    set_verbose(ctx, verbose)
    if as_json and as_csv:
        raise InputError("give --json or --csv, not both")
    fmt_in = input_format.value if input_format is not None else None
    inputs = resolve_inputs(on, glob, Path("/nonexistent/bpe-store-eval"), fmt_in, text_field)
    heldout = read_heldout(inputs, invalid_utf8.value, name=", ".join(on), format=fmt_in, text_field=text_field)
    wanted = _sizes(sizes)
    cands = [parse_candidate(t, pattern, wanted, every, threads) for t in tokenizers]
    if (wanted or every) and not any(c.is_store for c in cands):
        raise InputError("--sizes and --every take prefixes of a store; no TOKENIZER is a store")
    result = evaluate(cands, heldout, alpha=alpha, by=by.value)
    columns = [c for c in COLUMNS if by != Grouping.none or c not in ("grp", "parity")]
    rows = [[_shown(m) if c == "tokenizer" else m.vocab_size if c == "vocab_size" else m.grp if c == "grp"
             else m.metrics.get(c) for c in columns] for m in result.rows]
    fmt = OutFormat.jsonl if as_json else OutFormat.csv if as_csv else OutFormat.table
    write_stdout(columns, rows, fmt)
    stores = [c.db for c in cands if c.db is not None]
    if record:
        _record(result, stores)
    if residues:
        _residues(stores, record)
    sys.stdout.flush()
