"""The commands that use a trained store as a tokenizer: ``encode`` and ``export``."""

import contextlib
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from ..errors import InputError
from ..tokenizer.export import FORMATS
from ..tokenizer.token_files import DTYPES, EncodeStopped, encode_to_file
from .app import app
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

if TYPE_CHECKING:
    import threading

    from ..inspection.progress import Reporter
    from ..tokenizer.token_files import EncodeResult

DType = Enum("DType", {d: d for d in DTYPES}, type=str)  # choices of --dtype, listed by --help
ExportFormat = Enum("ExportFormat", {f: f for f in FORMATS}, type=str)  # --format's choices in help


def _stopped_message(signal_name: str, outs: "list[Path]") -> str:
    """What a stopped ``encode`` did to its outputs, in one line."""
    states = [f"{o} {'keeps its previous contents' if o.exists() else 'does not exist'}" for o in outs]
    return (f"{signal_name}: encoding stopped; nothing was written (the partial output was removed; "
            f"{', '.join(states)})")


def _special_tokens(given: "list[str]") -> "dict[str, Optional[int]]":
    """``--special`` values as ``{text: id}``: ``TEXT=ID`` keeps its id, ``TEXT`` gets the next free
    one (None). The id is what follows the last ``=``, when that is all digits."""
    out: dict[str, Optional[int]] = {}
    for item in given:
        text, eq, sid = item.rpartition("=")
        if eq and text and sid.isdigit() and sid.isascii():
            out[text] = int(sid)
        else:
            out[item] = None
    return out


def _encode_source(files: "list[Path]", tokenizer: "Optional[Path]", pattern: "Optional[str]",
                   special: "list[str]", separator: "Optional[str]"):
    """``(store or None, text files, Tokenizer or None)`` from ``encode``'s arguments: the first
    file is the store unless ``--tokenizer`` gives a ranks file; every mix-up is a clear error."""
    from ..store.connection import SQLITE_MAGIC

    if tokenizer is None:
        if pattern is not None or special:
            raise InputError("--pattern and --special go with --tokenizer; a store keeps its own pattern and "
                             "special tokens")
        if len(files) < 2:
            raise InputError("give the store and then the text files (or --tokenizer FILE --pattern NAME and "
                             "the text files)")
        return files[0], files[1:], None
    if pattern is None:
        raise InputError("--tokenizer needs --pattern: a ranks file does not say how text was split "
                         "(cl100k for cl100k_base, o200k for o200k_base)")
    first = files[0]
    if first.is_file():
        with open(first, "rb") as f:
            if f.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC:
                raise InputError(f"{first}: is a store (SQLite file); give either a store or --tokenizer, not both")
    from ..tokenizer.tokenizer import Tokenizer

    tok = Tokenizer.from_tiktoken(tokenizer, pattern=pattern, special_tokens=_special_tokens(special))
    if separator is not None and separator not in tok.special_tokens:
        raise InputError(f"--separator {separator!r} is not a special token of {tokenizer}; give it with "
                         f"--special, e.g. --special '{separator}=ID'")
    return None, files, tok


class _Encode:
    """``encode``'s arguments and options, as ``--help`` says them (in the order the command lists them)."""

    files = typer.Argument(..., help="The store (SQLite file) holding the trained merges, then the inputs to "
                                     "encode, in order, as train reads them (text, jsonl, parquet; "
                                     ".gz/.zst/.bz2/.xz; directories, quoted globs, - for stdin); with "
                                     "--tokenizer, only the inputs.")
    out = typer.Option(..., "-o", "--out", help="Output: .npy (NumPy) or .bin (nanoGPT raw layout).", metavar="OUT")
    vocab_size = typer.Option(None, "--vocab-size", help="Use the first merges only (a prefix of the run).")
    tokenizer = typer.Option(
        None, "--tokenizer", metavar="FILE",
        help="Encode with a .tiktoken ranks file (plain or .gz; e.g. OpenAI's cl100k_base) instead of a store, "
             "exactly as tiktoken does; needs --pattern.")
    pattern = typer.Option(
        None, "--pattern", metavar="NAME", autocompletion=complete_pattern,
        help="With --tokenizer: the pattern the ranks were made with, a name (cl100k, o200k, gpt2, ...) "
             "or a regex.")
    special = typer.Option(
        [], "--special", metavar="TEXT",
        help="With --tokenizer: a special token, TEXT=ID with its id (OpenAI's: '<|endoftext|>=100257' for "
             "cl100k_base, '<|endoftext|>=199999' for o200k_base) or TEXT for the next free id; repeatable.")
    threads = typer.Option(0, "--threads", help="Encoding threads (0 = all cores).")
    separator = typer.Option(None, "--separator", help="A special token written after each file, e.g. "
                                                       "'<|endoftext|>'; it also ends a document for --val-fraction.")
    dtype = typer.Option("auto", "--dtype", help="auto: uint16 when every id fits, else uint32 (.npy; a .bin is "
                                                 "refused); a uint32 .bin must have 'uint32' in its name.")
    val_fraction = typer.Option(
        None, "--val-fraction",
        help="Also write a validation file (train.bin -> val.bin, x.npy -> x.val.npy) with this fraction "
             "of the documents: document i when floor((i+1)F) > floor(iF).")
    input_format = format_option("How to read the inputs (default: by extension, as for train; stdin: text).")
    text_field = text_field_option()
    glob = glob_option("**/*.jsonl.gz")
    invalid_utf8 = invalid_utf8_option()
    force = typer.Option(False, "--force", help="Replace the output if it exists.")
    progress = typer.Option(ProgressMode.auto, "--progress",
                            help="auto: a bar on a terminal, else JSON lines on stderr.")
    quiet = typer.Option(False, "--quiet", "-q", help="No progress and no summary.")


@app.command()
def encode(
    files: list[Path] = _Encode.files, out: Path = _Encode.out, vocab_size: Optional[int] = _Encode.vocab_size,
    tokenizer: Optional[Path] = _Encode.tokenizer, pattern: Optional[str] = _Encode.pattern,
    special: list[str] = _Encode.special, threads: int = _Encode.threads,
    separator: Optional[str] = _Encode.separator, dtype: DType = _Encode.dtype,
    val_fraction: Optional[float] = _Encode.val_fraction, input_format: Optional[InputFormat] = _Encode.input_format,
    text_field: str = _Encode.text_field, glob: str = _Encode.glob, invalid_utf8: InvalidUtf8 = _Encode.invalid_utf8,
    force: bool = _Encode.force, progress: ProgressMode = _Encode.progress, quiet: bool = _Encode.quiet,
) -> None:
    """Encode inputs into one token-id array (uint16 when the vocab fits, else uint32).

    Every input kind train reads, read the same way: a text file is one document, each jsonl
    record or parquet row one (no pre-token crosses its end), each followed by --separator.
    Ctrl-C (or SIGTERM) stops at the next block and removes the partial output (exit 130/143).
    With --tokenizer, OpenAI's ranks (or any .tiktoken file) encode instead of a store.

    Example: bpe-store encode run.db train.txt -o train.bin --separator '<|endoftext|>' --val-fraction 0.01

    Example: bpe-store encode run.db 'shards/*.jsonl.gz' -o train.bin --separator '<|endoftext|>'

    Example: bpe-store encode --tokenizer cl100k_base.tiktoken --pattern cl100k train.txt -o train.npy
    """
    from ..tokenizer.token_files import val_path

    db, given, tok = _encode_source(files, tokenizer, pattern, special, separator)
    fmt = input_format.value if input_format is not None else None
    inputs = resolve_inputs([str(p) for p in given], glob, Path(db if db is not None else tokenizer), fmt, text_field)
    reporter = reporter_for(progress, quiet)
    outs = [out] if val_fraction is None else [out, val_path(out)]
    with _stopped_cleanly(reporter, outs) as stop:
        result = encode_to_file(db, inputs, out, tokenizer=tok, vocab_size=vocab_size, threads=threads,
                                separator=separator, force=force, dtype=DType(dtype).value,
                                val_fraction=val_fraction, format=fmt, text_field=text_field,
                                invalid_utf8=invalid_utf8.value, progress=reporter, stop=stop)
    reporter.note(*_encode_summary(out, result, split=val_fraction is not None))


@contextlib.contextmanager
def _stopped_cleanly(reporter: "Reporter", outs: "list[Path]") -> "Iterator[threading.Event]":
    """Run an encoding with SIGINT/SIGTERM setting the Event it yields; a stopped encoding
    (``EncodeStopped``, or a second signal) says what became of ``outs`` and exits 130/143. The
    reporter is closed either way."""
    stopper = StopOnSignal()
    try:
        with stopper:
            yield stopper.event
    except (EncodeStopped, KeyboardInterrupt):
        reporter.close()
        message = _stopped_message(stopper.signal_name, outs)
        reporter.note("", {"stage": "interrupted", "signal": stopper.signal_name, "message": message})
        typer.echo(message, err=True)
        raise typer.Exit(stopper.exit_code) from None
    finally:
        reporter.close()


def _encode_summary(out: Path, result: "EncodeResult", split: bool) -> "tuple[str, dict]":
    """What a finished ``encode`` says: a line for people and the JSON ``done`` event."""
    layout = "NumPy .npy" if out.suffix == ".npy" else "nanoGPT raw .bin"
    parts = [f"{p}: {n} tokens" for p, n in result.files]
    docs = f" from {result.documents} documents" if split else ""
    return (f"{'; '.join(parts)}{docs}, as {result.dtype} ({layout})",
            {"stage": "done", "files": {str(p): n for p, n in result.files}, "dtype": result.dtype,
             "layout": layout, "documents": result.documents if split else None})


@app.command()
def export(
    db: Path = typer.Argument(..., help="The store (SQLite file) holding the trained merges."),
    fmt: ExportFormat = typer.Option(..., "--format", help="hf (tokenizer.json), gpt2 (vocab.json + merges.txt) "
                                                  "or tiktoken (.tiktoken ranks + tiktoken.json)."),
    out: Path = typer.Option(..., "-o", "--out", help="Output directory (created).", metavar="DIR"),
    vocab_size: Optional[int] = typer.Option(None, "--vocab-size",
                                             help="Export the first merges only (a prefix of the run)."),
    eos: Optional[str] = typer.Option(None, "--eos", help="hf/gpt2: the end-of-sequence special token "
                                                          "(default: the store's first special)."),
    bos: Optional[str] = typer.Option(None, "--bos", help="hf/gpt2: the beginning-of-sequence special token."),
    pad: Optional[str] = typer.Option(None, "--pad", help="hf/gpt2: the padding special token."),
    model_max_length: Optional[int] = typer.Option(
        None, "--model-max-length", help="hf/gpt2: the model's longest input, for transformers (default 1024)."),
    force: bool = typer.Option(False, "--force",
                               help="Write into an existing directory, replacing only the files of this format."),
    specials_last: bool = typer.Option(False, "--specials-last",
                                       help="Number the special tokens after the merges (dense ranks, as tiktoken "
                                            "and nanochat do; gigatoken and fastokens need it): ids are not the "
                                            "store's."),
    pattern_form: str = typer.Option("portable", "--pattern-form",
                                     help="portable: the pattern rewritten so every loader splits exactly as "
                                          "bpe_store; verbatim: the store's own (GPT-2's as a plain ByteLevel), "
                                          "which fast encoders recognise."),
) -> None:
    """Write the store's tokenizer in a format other libraries load.

    hf and gpt2 directories load with transformers' AutoTokenizer.from_pretrained(dir).

    Example: bpe-store export run.db --format hf --vocab-size 16000 -o tok16k
    """
    from ..tokenizer.export import FIRST_SPECIAL, export_store

    written = export_store(db, fmt.value, out, vocab_size=vocab_size, force=force,
                           eos=FIRST_SPECIAL if eos is None else eos, bos=bos, pad=pad,
                           model_max_length=model_max_length, specials_last=specials_last,
                           pattern_form=pattern_form)
    typer.echo(f"{out}: wrote {', '.join(p.name for p in written)}", err=True)
