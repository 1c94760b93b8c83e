"""CLI commands that use a trained store as a tokenizer: ``encode`` and ``export``."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from .errors import InputError
from .export import FORMATS
from .outfiles import new_files

#: nanoGPT reads ``train.bin`` as raw uint16 (``np.memmap(..., dtype=np.uint16)``).
_NANOGPT_SUFFIX = ".bin"


def _out_path(out: Path, force: bool, keep: list[Path]) -> None:
    """Refuse an output name that would lose data or that readers would misread (exit 2);
    ``keep`` (the store, the inputs) may never be replaced by the output."""
    if out.is_dir():
        raise InputError(f"{out}: is a directory; give a file name ending in .npy or .bin")
    if out.suffix not in (".npy", _NANOGPT_SUFFIX):
        raise InputError(f"{out}: the output must end in .npy (NumPy) or .bin (nanoGPT's raw layout)")
    for k in keep:
        if out.exists() and k.exists() and out.resolve() == k.resolve():
            raise InputError(f"{out}: is {k}, which this command reads; write the ids elsewhere")
    if (out.exists() or out.is_symlink()) and not force:
        raise InputError(f"{out}: already exists; pass --force to replace it")
    if not out.parent.is_dir():
        raise InputError(f"{out}: the directory {out.parent} does not exist")


def _npy_header(dtype, n: int) -> bytes:
    """A NumPy format 1.0 header for a 1-d array of ``n`` items (128 bytes for any n < 10**20)."""
    import io

    import numpy as np

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": (n,)})
    return buf.getvalue()


def encode_to_file(db: Path, inputs: list[Path], out: Path, *, vocab_size: int | None = None,
                   threads: int = 0, separator: str | None = None, force: bool = False,
                   show_progress: bool = False) -> tuple[int, str]:
    """Encode ``inputs`` with the store's tokenizer into ``out`` (.npy or nanoGPT .bin).

    Writes through an exclusive temporary file beside ``out`` and renames it at the end
    (``outfiles.new_files``), so ``out`` is never half written and nothing else is touched.
    Returns ``(number of ids, dtype name)``.
    """
    import numpy as np

    from .tokenizer import Tokenizer, encode_files

    if not inputs:
        raise InputError("no input files given")
    _out_path(out, force, [Path(db), *inputs])
    for p in inputs:
        if not p.is_file():
            raise InputError(f"{p}: no such file" if not p.exists() else f"{p}: is not a file")
    tok = Tokenizer.from_store(db, vocab_size)
    # uint16 halves the file when every id fits (as nanoGPT expects); uint32 otherwise
    dtype = np.dtype(np.uint16 if max(tok.vocab) < (1 << 16) else np.uint32)
    npy = out.suffix == ".npy"
    total_bytes = sum(p.stat().st_size for p in inputs)
    with new_files([out]) as (f,):
        header = _npy_header(dtype, 0) if npy else b""
        f.write(header)

        def write(ids: np.ndarray) -> None:
            f.write(ids.astype(dtype, copy=False).tobytes())

        if show_progress:
            with typer.progressbar(length=total_bytes, label="encoding", file=sys.stderr) as bar:
                n = encode_files(tok, inputs, write, threads=threads, separator=separator,
                                 progress=bar.update)
        else:
            n = encode_files(tok, inputs, write, threads=threads, separator=separator)
        if npy:
            final = _npy_header(dtype, n)
            if len(final) != len(header):  # pragma: no cover - 128 bytes for any realistic n
                raise RuntimeError("NumPy header size changed")
            f.seek(0)
            f.write(final)
    return n, dtype.name


ExportFormat = Enum("ExportFormat", {f: f for f in FORMATS}, type=str)  # --format's choices in help


def register(app: typer.Typer) -> None:
    """Add this module's commands to the ``bpe-store`` app."""

    @app.command()
    def encode(
        db: Path = typer.Argument(..., help="The store (SQLite file) holding the trained merges."),
        inputs: list[Path] = typer.Argument(..., help="Text files (UTF-8) to encode, in order."),
        out: Path = typer.Option(..., "-o", "--out", help="Output: .npy (NumPy) or .bin (nanoGPT raw layout)."),
        vocab_size: Optional[int] = typer.Option(None, "--vocab-size",
                                                 help="Use the first merges only (a prefix of the run)."),
        threads: int = typer.Option(0, "--threads", help="Encoding threads (0 = all cores)."),
        separator: Optional[str] = typer.Option(None, "--separator",
                                                help="A special token written after each file, e.g. '<|endoftext|>'."),
        force: bool = typer.Option(False, "--force", help="Replace the output if it exists."),
    ) -> None:
        """Encode whole files into one token-id array (uint16 when the vocab fits, else uint32).

        Example: bpe-store encode run.db train.txt -o train.npy --separator '<|endoftext|>'
        """
        n, dtype = encode_to_file(db, inputs, out, vocab_size=vocab_size, threads=threads,
                                  separator=separator, force=force, show_progress=sys.stderr.isatty())
        layout = "NumPy .npy" if out.suffix == ".npy" else "nanoGPT raw .bin"
        typer.echo(f"{out}: {n} tokens as {dtype} ({layout})", err=True)

    @app.command()
    def export(
        db: Path = typer.Argument(..., help="The store (SQLite file) holding the trained merges."),
        fmt: ExportFormat = typer.Option(..., "--format", help="hf (tokenizer.json), gpt2 (vocab.json + merges.txt) "
                                                      "or tiktoken (.tiktoken ranks + tiktoken.json)."),
        out: Path = typer.Option(..., "-o", "--out", help="Output directory (created)."),
        vocab_size: Optional[int] = typer.Option(None, "--vocab-size",
                                                 help="Export the first merges only (a prefix of the run)."),
        force: bool = typer.Option(False, "--force", help="Replace the output directory if it exists."),
    ) -> None:
        """Write the store's tokenizer in a format other libraries load.

        Example: bpe-store export run.db --format hf --vocab-size 16000 -o tok16k
        """
        from .export import export_store

        written = export_store(db, fmt.value, out, vocab_size=vocab_size, force=force)
        typer.echo(f"{out}: wrote {', '.join(p.name for p in written)}", err=True)
