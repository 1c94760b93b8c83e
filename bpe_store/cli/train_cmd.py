"""``bpe-store train``: its inputs (globs expanded), options, Ray address, and how a stopped run
says what it saved and the command that resumes it.
"""

from __future__ import annotations

import shlex
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from ..errors import BpeStoreError, InputError
from ..inspection.progress import Reporter
from ..store.params import MAX_MAX_PRETOKEN_BYTES, MIN_MAX_PRETOKEN_BYTES
from ..text.pretokenize import pattern_names_help
from ..training.merge import ENGINES
from ..training.options import DEFAULT_MAX_PRETOKEN_BYTES, TrainOptions
from .app import ARGV_KEY, UnixCommand, app, set_verbose, verbose_option
from .input_args import (
    InputFormat,
    InvalidUtf8,
    complete_pattern,
    format_option,
    glob_option,
    invalid_utf8_option,
    resolve_inputs,
    text_field_option,
)
from .running import ProgressMode, StopOnSignal, reporter_for

#: ``--eval-every``'s default: merges between two measurements of a run on its held-out text
EVAL_EVERY = 1000

if TYPE_CHECKING:
    from ..store.result import TrainResult


#: ``--engine``'s choices (``training.merge.ENGINES``), listed by ``--help``
EngineName = Enum("EngineName", {e: e for e in ENGINES}, type=str)


def resume_command(ctx: typer.Context) -> str:
    """The command that resumes this run: this one, less ``--restart`` (which would start over)."""
    root = ctx.find_root()
    argv = [a for a in root.meta.get(ARGV_KEY, sys.argv[1:]) if a != "--restart"]
    return shlex.join(shlex.split(root.info_name or "bpe-store") + argv)


def _saved_summary(db: Path) -> str:
    """What a stopped run's store holds, in one line."""
    from ..inspection.answers import status
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


class _OptionalRayAddress(UnixCommand):
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


class _Train:
    """``train``'s arguments and options, as ``--help`` says them (in the order it lists them); a
    run's settings default to ``TrainOptions``' fields."""

    inputs = typer.Argument(..., help="Corpus files (text, jsonl, parquet; .gz/.zst/.bz2/.xz), directories (see "
                                      "--glob), quoted globs, or - (stdin).", show_default=False, metavar="INPUTS")
    db = typer.Option(..., "--db", help="The store (SQLite file); created, or resumed if it exists.")
    vocab_size = typer.Option(..., "--vocab-size", metavar="N",
                              help="Target vocabulary size (specials + 256 + merges); a larger one continues a "
                                   "finished store.")
    special = typer.Option([], "--special", metavar="TOKEN", help="A special token (repeat for several).")
    pattern = typer.Option(
        None, "--pattern", metavar="PATTERN", autocompletion=complete_pattern,
        help=f"Pre-tokenization pattern: {pattern_names_help()}, or a regex.")
    extend = typer.Option(
        None, "--extend", metavar="BASE",
        help="Extend a tokenizer: cl100k_base, o200k_base, a .tiktoken file (with --pattern), a tokenizer.json, "
             "GPT-2's vocab.json + merges.txt (or their directory), or a store (run.db, run.db@MERGES). Its "
             "tokens keep their ids, its merges come first, its pattern and special tokens hold; "
             "--vocab-size counts its tokens too.")
    glob = glob_option("**/*.txt")
    input_format = format_option(
        "How to read the inputs (default: by extension: .jsonl/.ndjson/.json -> jsonl, .parquet -> parquet, "
        "else text; stdin: text).")
    text_field = text_field_option()
    workers = typer.Option(TrainOptions.workers, "--workers", "--threads", metavar="N",
                           help="Counting workers (default: all cores).")
    chunk_size = typer.Option(TrainOptions.chunk_size, "--chunk-size", metavar="BYTES",
                              help="Bytes per counting chunk.")
    checkpoint_merges = typer.Option(TrainOptions.checkpoint_merges, "--checkpoint-merges", metavar="N",
                                     help="Also end a batch after this many merges (default: by time only).")
    checkpoint_seconds = typer.Option(TrainOptions.checkpoint_seconds, "--checkpoint-seconds", metavar="S",
                                      help="Seconds of merging per checkpoint.")
    invalid_utf8 = invalid_utf8_option()
    restart = typer.Option(TrainOptions.restart, "--restart", help="Discard the store's progress and start over.")
    engine = typer.Option(EngineName(TrainOptions.engine), "--engine",
                          help="Merge engine: native (C++), python, or auto (native when built).")
    min_frequency = typer.Option(TrainOptions.min_frequency, "--min-frequency", metavar="N",
                                 help="Words counted fewer times take part in no merge (1: every word counts).")
    max_token_length = typer.Option(TrainOptions.max_token_length, "--max-token-length", metavar="N",
                                    help="No merge makes a token longer than N bytes (default: no limit).")
    ray = typer.Option(
        None, "--ray", metavar="ADDRESS",
        help="Count on a Ray cluster. ADDRESS may be left out: --ray alone starts a local one of "
             "--workers CPUs; with ADDRESS (host:port, ray://host:port or auto), that cluster. Needs "
             "pip install 'bpe-store[ray]'; inputs must be readable at the same path on every node.")
    max_pretoken_bytes = typer.Option(
        TrainOptions.max_pretoken_bytes, "--max-pretoken-bytes", metavar="BYTES",
        help=f"Count a longer pre-token as pieces of at most this many bytes ({MIN_MAX_PRETOKEN_BYTES}.."
             f"{MAX_MAX_PRETOKEN_BYTES >> 20} MiB; default {DEFAULT_MAX_PRETOKEN_BYTES >> 20} MiB "
             "for a new store, the store's own on a resume).")
    superword_from = typer.Option(
        TrainOptions.superword_from, "--superword-from", metavar="T",
        help="SuperBPE: the first T merges are stage 1's (--pattern), the rest superwords learned across "
             "words (docs/superword.md). Stage 1 is trained into DB's sibling NAME.stage1.db unless "
             "--superword-base gives it.")
    superword_base = typer.Option(
        None, "--superword-base", metavar="STORE",
        help="With --superword-from: a finished store whose first T merges are stage 1 (only read).")
    max_superword_words = typer.Option(
        TrainOptions.max_superword_words, "--max-superword-words", metavar="N",
        help="With --superword-from: the most words (parts between spaces) a superword token spans.")
    reader_memory_words = typer.Option(
        TrainOptions.reader_memory_words, "--reader-memory-words", metavar="N",
        help="While a reader holds an old snapshot of the store (an open BEGIN; SELECT), counting keeps up to N "
             "distinct words in memory (~100 bytes each) instead of writing them.")
    reader_wal_bytes = typer.Option(
        TrainOptions.reader_wal_bytes, "--reader-wal-bytes", metavar="BYTES",
        help="While such a reader stays, the writes that cannot wait (past --reader-memory-words, the end of "
             "counting) go into the store's WAL until it is this large; only then does training wait for it.")
    verify_inputs = typer.Option(
        TrainOptions.verify_inputs, "--verify-inputs",
        help="On a resume, read the counted input files again and check their fingerprints, even those whose "
             "size and modification time did not change (a changed file: exit 3).")
    eval_on = typer.Option([], "--eval", metavar="FILE",
                           help="Held-out text to measure the run on as it trains, recorded in the store "
                                "(repeatable; any input train reads; see bpe-store eval).")
    eval_every = typer.Option(None, "--eval-every", metavar="N",
                              help=f"With --eval: measure every N merges and at the end (default {EVAL_EVERY}).")
    progress = typer.Option(ProgressMode.auto, "--progress",
                            help="auto: bars on a terminal, else JSON lines on stderr.")
    quiet = typer.Option(False, "--quiet", "-q", help="No progress and no summary.")
    verbose = verbose_option()


@app.command(cls=_OptionalRayAddress)
def train(
    ctx: typer.Context, inputs: list[str] = _Train.inputs, db: Path = _Train.db, vocab_size: int = _Train.vocab_size,
    special: list[str] = _Train.special, pattern: Optional[str] = _Train.pattern,
    extend: Optional[str] = _Train.extend, glob: str = _Train.glob,
    input_format: Optional[InputFormat] = _Train.input_format, text_field: str = _Train.text_field,
    workers: Optional[int] = _Train.workers, chunk_size: int = _Train.chunk_size,
    checkpoint_merges: Optional[int] = _Train.checkpoint_merges, checkpoint_seconds: float = _Train.checkpoint_seconds,
    invalid_utf8: InvalidUtf8 = _Train.invalid_utf8, restart: bool = _Train.restart,
    engine: EngineName = _Train.engine, min_frequency: int = _Train.min_frequency,
    max_token_length: Optional[int] = _Train.max_token_length, ray: Optional[str] = _Train.ray,
    max_pretoken_bytes: Optional[int] = _Train.max_pretoken_bytes,
    superword_from: Optional[int] = _Train.superword_from, superword_base: Optional[Path] = _Train.superword_base,
    max_superword_words: int = _Train.max_superword_words,
    reader_memory_words: int = _Train.reader_memory_words, reader_wal_bytes: int = _Train.reader_wal_bytes,
    verify_inputs: bool = _Train.verify_inputs, eval_on: list[str] = _Train.eval_on,
    eval_every: Optional[int] = _Train.eval_every, progress: ProgressMode = _Train.progress,
    quiet: bool = _Train.quiet, verbose: bool = _Train.verbose,
) -> None:
    """Train a BPE into a store, or resume it: run the same command again after a stop.

    Ctrl-C (or SIGTERM) finishes the current batch, writes a checkpoint, prints the command that
    resumes, and exits 130 (143); a second Ctrl-C stops at once at the last checkpoint.

    \b
    Example: bpe-store train corpus.txt --db run.db --vocab-size 32000 --special '<|endoftext|>'
    Example: bpe-store train 'shards/*.jsonl.gz' --db run.db --vocab-size 32000 --text-field content
    Example: bpe-store train corpus.txt --db super.db --vocab-size 64000 --superword-from 56000
    Example: bpe-store train ru.txt --db ext.db --extend o200k_base --vocab-size 210000
    """
    set_verbose(ctx, verbose)
    fmt = input_format.value if input_format is not None else None
    files = resolve_inputs(inputs, glob, db, fmt, text_field)
    options = TrainOptions(
        pattern=TrainOptions.pattern if pattern is None else pattern, workers=workers, chunk_size=chunk_size,
        checkpoint_merges=checkpoint_merges, checkpoint_seconds=checkpoint_seconds, invalid_utf8=invalid_utf8.value,
        restart=restart, engine=engine.value, format=fmt, text_field=text_field, min_frequency=min_frequency,
        max_token_length=max_token_length, count_engine=TrainOptions.count_engine if ray is None else "ray",
        ray_address=None if ray in (None, "local") else ray, max_pretoken_bytes=max_pretoken_bytes,
        superword_from=superword_from, superword_base=superword_base, max_superword_words=max_superword_words,
        extend=extend, reader_memory_words=reader_memory_words, reader_wal_bytes=reader_wal_bytes,
        verify_inputs=verify_inputs)
    series = _eval_series(eval_on, eval_every, glob, db, invalid_utf8.value)
    reporter = reporter_for(progress, quiet)
    if quiet and ray is not None:
        from ..counting.ray_count import quiet as quiet_ray

        quiet_ray()
    result = _run_train(ctx, files, db, vocab_size, special, options, reporter, series)
    reason = {"vocab_size": "reached the vocabulary size", "no_pairs": "no pair left to merge"}
    reporter.note(f"{db}: {len(result.merges)} merges, vocab {len(result.vocab)} "
                  f"({reason.get(result.stop_reason or '', result.phase)})",
                  {"stage": "done", "merges": len(result.merges), "vocab_size": len(result.vocab),
                   "stop_reason": result.stop_reason})


def _eval_series(eval_on: list[str], every: Optional[int], glob: str, db: Path, invalid_utf8: str) -> Any:
    """``--eval`` / ``--eval-every``: the ``EvalSeries`` that measures the run as it trains, or None."""
    if not eval_on:
        if every is not None:
            raise InputError("--eval-every goes with --eval FILE (the held-out text to measure on)")
        return None
    from ..inspection.evaluation import EvalSeries
    from ..inspection.heldout import read_heldout

    heldout = read_heldout(resolve_inputs(eval_on, glob, db, None, TrainOptions.text_field), invalid_utf8,
                           name=", ".join(eval_on))
    return EvalSeries(heldout, EVAL_EVERY if every is None else every)


def _run_train(ctx: typer.Context, files: list, db: Path, vocab_size: int, special: list[str],
               options: TrainOptions, reporter: Reporter, series: Any = None) -> TrainResult:
    """``training.train`` with ``options``, Ctrl-C / SIGTERM asking it to stop: a stopped run says
    what the store holds and the command that resumes, and exits 130 (143). The reporter is closed
    either way; returns the ``TrainResult``."""
    from ..errors import Interrupted
    from ..training.train import train_with

    stopper = StopOnSignal(notify=reporter.note)
    try:
        with stopper:
            return train_with(files, db, vocab_size, special, options, stopper.watch(reporter), stopper.event,
                              series)
    except (Interrupted, KeyboardInterrupt) as exc:
        stopper.note_stopping()
        reporter.close()
        _report_stop(ctx, db, stopper, reporter, at_once=isinstance(exc, KeyboardInterrupt))
        raise typer.Exit(stopper.exit_code) from None
    finally:
        reporter.close()


def _report_stop(ctx: typer.Context, db: Path, stopper: StopOnSignal, reporter: Reporter, at_once: bool) -> None:
    """After a stop: what the store holds and the exact command that resumes (always shown)."""
    how = "stopped at once" if at_once else "stopped after a checkpoint"
    saved = _saved_summary(db)
    cmd = resume_command(ctx)
    reporter.note("", {"stage": "interrupted", "signal": stopper.signal_name, "saved": saved, "resume": cmd})
    typer.echo(f"{stopper.signal_name}: {how}; {saved}.\nResume with:\n  {cmd}", err=True)
