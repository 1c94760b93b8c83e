"""Token-id files for training a model: what ``bpe-store encode`` writes.

Two layouts, chosen by the output's suffix:

* ``.npy``: NumPy's format, which records its dtype and length (``np.load``);
* ``.bin``: nanoGPT's raw layout, ids back to back with no header. nanoGPT reads it as
  ``np.memmap(path, dtype=np.uint16)``, so a ``.bin`` is uint16 unless its name says
  ``uint32`` (``train.uint32.bin``, where ``--dtype uint32`` must be written): a vocabulary
  past 65,536 ids is refused for a plain ``.bin`` rather than written in a layout nanoGPT
  reads as garbage.

``--val-fraction F`` splits the ids into a training and a validation file at document
boundaries. Documents are the runs of ids that end with the ``--separator`` token (which is also
written after every file, so a file always ends a document), or the files themselves when there
is no separator. Counting documents from 0 over all inputs in order, document ``i`` goes to the
validation file when ``floor((i + 1) * F) > floor(i * F)``: exactly ``floor(n * F)`` of ``n``
documents, evenly spread (F = 0.1 takes documents 9, 19, 29, ...), the same on every run.

Outputs are complete or absent (``outfiles.new_files``); a stop (``stop`` set, e.g. by Ctrl-C)
raises ``EncodeStopped`` after removing the partial files.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from ..errors import InputError
from ..pauses import pause_for_tests
from ..temporaries import remove_stale
from .outfiles import new_files

if TYPE_CHECKING:
    import numpy as np

    from ..text.inputs import FileInput
    from ..text.streams import Stream
    from .tokenizer import Tokenizer

NANOGPT_SUFFIX = ".bin"
SUFFIXES = (".npy", NANOGPT_SUFFIX)
DTYPES = ("auto", "uint16", "uint32")
UINT16_IDS = 1 << 16  # ids 0..65535


class EncodeStopped(Exception):
    """Encoding was asked to stop (a signal); the partial outputs are already removed."""


@dataclass
class EncodeResult:
    """What ``encode_to_file`` wrote: ``files`` ``[(path, number of ids)]`` (training file
    first), the ``dtype`` name, and the number of ``documents`` seen (counted when splitting)."""

    files: list[tuple[Path, int]] = field(default_factory=list)
    dtype: str = "uint16"
    documents: int = 0

    @property
    def ids(self) -> int:
        return sum(n for _, n in self.files)


def choose_dtype(out: Path, max_id: int, dtype: str = "auto") -> str:
    """The dtype to write ``out`` in, or InputError (exit 2) where a reader would misread it."""
    if dtype not in DTYPES:
        raise InputError(f"--dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    fits16 = max_id < UINT16_IDS
    if dtype == "uint16" and not fits16:
        raise InputError(f"--dtype uint16: ids go up to {max_id}, past the 65,535 uint16 holds; "
                         "use --dtype uint32")
    if out.suffix == NANOGPT_SUFFIX:
        if dtype == "auto" and "uint32" in out.name:
            return "uint32"  # the name says it
        if dtype == "uint32" and "uint32" not in out.name:
            raise InputError(f"{out}: a uint32 .bin must say so in its name (e.g. "
                             f"{out.with_name(out.stem + '.uint32.bin').name}): nanoGPT and other raw "
                             "readers assume uint16")
        if dtype == "auto" and not fits16:
            raise InputError(f"{out}: ids go up to {max_id}, past the 65,535 of nanoGPT's uint16 .bin, which "
                             f"would read them as garbage; write .npy (it records its dtype), or pass "
                             f"--dtype uint32 with 'uint32' in the file name (e.g. {out.stem}.uint32.bin)")
    if dtype == "auto":
        return "uint16" if fits16 else "uint32"
    return dtype


def val_path(out: Path) -> Path:
    """The validation file beside ``out``: its first ``train`` becomes ``val`` (``train.bin`` ->
    ``val.bin``), or ``.val`` goes before the suffix (``ids.npy`` -> ``ids.val.npy``)."""
    if "train" in out.name:
        return out.with_name(out.name.replace("train", "val", 1))
    return out.with_name(f"{out.stem}.val{out.suffix}")


def check_output(out: Path, force: bool, keep: Sequence[Path]) -> None:
    """Refuse an output name that would lose data or that readers would misread (exit 2);
    ``keep`` (the store, the inputs) may never be replaced by the output."""
    if out.is_dir():
        raise InputError(f"{out}: is a directory; give a file name ending in .npy or .bin")
    if out.suffix not in SUFFIXES:
        raise InputError(f"{out}: the output must end in .npy (NumPy) or .bin (nanoGPT's raw layout)")
    for k in keep:
        if out.exists() and k.exists() and out.resolve() == k.resolve():
            raise InputError(f"{out}: is {k}, which this command reads; write the ids elsewhere")
    if (out.exists() or out.is_symlink()) and not force:
        # why before the refusal: the same command again is how a user cleans up after a kill, and
        # a kill after the rename leaves the output too; its dead writers' temporaries go all the same
        remove_stale(out.parent, f".{out.name}.", ".part")
        raise InputError(f"{out}: already exists; pass --force to replace it")
    if not out.parent.is_dir():
        raise InputError(f"{out}: the directory {out.parent} does not exist")


def npy_header(dtype: str, n: int) -> bytes:
    """A NumPy format 1.0 header for a 1-d array of ``n`` items (128 bytes for any n < 10**20)."""
    import numpy as np

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": (n,)})
    return buf.getvalue()


class IdSink:
    """One output file: ids appended in ``dtype``; ``finish`` writes the .npy header's length."""

    def __init__(self, f: BinaryIO, dtype: str, npy: bool):
        self.f, self.dtype, self.npy, self.n = f, dtype, npy, 0
        self.header = npy_header(dtype, 0) if npy else b""
        f.write(self.header)

    def write(self, ids: np.ndarray) -> None:
        if len(ids):
            self.f.write(ids.astype(self.dtype, copy=False).tobytes())
            self.n += len(ids)

    def finish(self) -> None:
        if self.npy:
            final = npy_header(self.dtype, self.n)
            if len(final) != len(self.header):  # pragma: no cover - 128 bytes for any realistic n
                raise RuntimeError("NumPy header size changed")
            self.f.seek(0)
            self.f.write(final)


def is_val_document(i: int, fraction: Fraction) -> bool:
    """Whether document ``i`` (from 0) goes to the validation file (see the module docstring)."""
    return (i + 1) * fraction.numerator // fraction.denominator > i * fraction.numerator // fraction.denominator


class DocumentSplit:
    """Routes a stream of id blocks to a training and a validation sink, whole documents at a
    time: a document ends after each ``sep`` id, or at ``end_file`` when there is no ``sep``."""

    def __init__(self, train: IdSink, val: IdSink, fraction: Fraction, sep: int | None):
        self.train, self.val, self.fraction, self.sep = train, val, fraction, sep
        self.doc = 0  # index of the current document
        self.started = False  # whether the current document has any id yet

    def _sink(self) -> IdSink:
        return self.val if is_val_document(self.doc, self.fraction) else self.train

    def write(self, ids: np.ndarray) -> None:
        import numpy as np

        if not len(ids):
            return
        if self.sep is None:
            self._sink().write(ids)
            self.started = True
            return
        start = 0
        for end in np.flatnonzero(ids == self.sep) + 1:
            self._sink().write(ids[start:end])
            self.doc += 1
            self.started = False
            start = int(end)
        if start < len(ids):
            self._sink().write(ids[start:])
            self.started = True

    def end_file(self) -> None:
        """A document ended (a file, a jsonl record, a parquet row): without a separator, that
        ends its document (with one, the separator written after it did)."""
        if self.sep is None or self.started:
            self.doc += 1
            self.started = False

    @property
    def documents(self) -> int:
        return self.doc


#: Text read per block by ``encode_to_file`` (``whole_inputs.input_blocks``): memory stays at a few times this.
ENCODE_BLOCK = 16 << 20


def encode_to_file(db: str | Path | None, inputs: Sequence[str | Path | FileInput | Stream], out: str | Path, *,
                   tokenizer: Tokenizer | None = None,
                   vocab_size: int | None = None, threads: int = 0, separator: str | None = None,
                   force: bool = False, dtype: str = "auto", val_fraction: float | None = None,
                   format: str | None = None, text_field: str = "text", invalid_utf8: str = "strict",
                   progress: Callable[[dict], None] | None = None,
                   stop: threading.Event | None = None) -> EncodeResult:
    """Encode ``inputs`` with the store's tokenizer into ``out`` (.npy or nanoGPT .bin), and
    with ``val_fraction`` also into ``val_path(out)``, split at document boundaries. Instead of a
    store ``db``, a ``tokenizer`` may be given (``Tokenizer.from_tiktoken``: OpenAI's ranks).

    Inputs are read as ``train`` reads them (``bpe_store.text.inputs``): text, jsonl and
    parquet files, compressed, or a ``Stream`` (standard input); a path's kind comes from its
    extension unless ``format`` is given, ``text_field`` names the jsonl field or parquet column.
    A text file is one document; each jsonl record or parquet row is one, encoded on its own (no
    pre-token crosses its end, as in training) and followed by ``separator`` when given.

    ``progress`` receives ``{"stage": "encoding", "done": text bytes read, "total": bytes or None,
    "file": path}`` events (``total`` is known when every input is an uncompressed text file);
    ``stop`` (an Event) ends the work at the next block with ``EncodeStopped``. Nothing is left
    under an output name unless the whole encoding succeeded.
    """
    # imported here: the CLI imports this module for every command (bz2, lzma, ... cost ~35 ms)
    from .tokenizer import Tokenizer

    out = Path(out)
    items, files = _input_items(inputs, format, text_field)
    fraction = _checked_request(db, tokenizer, vocab_size, items, invalid_utf8, val_fraction)
    outs = [out] if fraction is None else [out, val_path(out)]
    _check_paths(outs, force, db, files)
    tok = tokenizer if tokenizer is not None else Tokenizer.from_store(db, vocab_size)
    sep_id = None if separator is None else tok.special_id(separator)
    dt = choose_dtype(out, max(tok.vocab), dtype)
    step = _Steps(progress, stop, _total_bytes(items, files))
    with new_files(outs) as handles:
        ids = _IdWriter([IdSink(f, dt, out.suffix == ".npy") for f in handles], fraction, sep_id)
        step(0, items[0].path)
        for item in items:
            _encode_input(item, tok, threads, invalid_utf8, ids, step)
        ids.finish(val_fraction)
    return EncodeResult([(o, s.n) for o, s in zip(outs, ids.sinks)], dt, ids.documents_seen)


# -- encode_to_file's steps ------------------------------------------------------------------------

def _input_items(inputs: Sequence[str | Path | FileInput | Stream], format: str | None,
                 text_field: str) -> tuple[list[FileInput | Stream], list[Path]]:
    """``(inputs as FileInput / Stream, the paths of the files among them)``: a path's kind from
    its extension unless ``format`` says it."""
    from ..text.inputs import FileInput, file_input
    from ..text.streams import Stream

    items = [p if isinstance(p, (FileInput, Stream)) else file_input(p, format, text_field) for p in inputs]
    return items, [i.path for i in items if isinstance(i, FileInput)]


def _checked_request(db: str | Path | None, tokenizer: Tokenizer | None, vocab_size: int | None,
                     items: list[FileInput | Stream], invalid_utf8: str,
                     val_fraction: float | None) -> Fraction | None:
    """Refuse a request that makes no sense (InputError, exit 2); the validation fraction as an
    exact ``Fraction``, or None without one."""
    from ..text.streams import Stream

    if (db is None) == (tokenizer is None):
        raise InputError("give either a store or a tokenizer to encode with, not both" if tokenizer is not None
                         else "give a store or a tokenizer to encode with")
    if tokenizer is not None and vocab_size is not None:
        raise InputError("--vocab-size takes a prefix of a store's merges; a tokenizer file has no prefix")
    if not items:
        raise InputError("no input files given")
    if any(isinstance(i, Stream) for i in items) and len(items) > 1:
        raise InputError("- (standard input) must be the only input")
    if invalid_utf8 not in ("strict", "replace"):
        raise InputError(f"--invalid-utf8 must be strict or replace, not {invalid_utf8!r}")
    if val_fraction is None:
        return None
    if not 0 < val_fraction < 1:
        raise InputError(f"--val-fraction must be between 0 and 1 (exclusive), not {val_fraction}")
    return Fraction(repr(float(val_fraction)))


def _check_paths(outs: list[Path], force: bool, db: str | Path | None, files: list[Path]) -> None:
    """Refuse outputs that would lose data or be misread (``check_output``), and inputs that are
    not files (InputError, exit 2)."""
    for o in outs:
        check_output(o, force, [*([] if db is None else [Path(db)]), *files])
    for p in files:
        if not p.is_file():
            raise InputError(f"{p}: no such file" if not p.exists() else f"{p}: is not a file")


def _total_bytes(items: list[FileInput | Stream], files: list[Path]) -> int | None:
    """The text bytes to read, known only when every input is an uncompressed text file."""
    from ..text.inputs import FileInput

    plain = all(isinstance(i, FileInput) and i.format == "text" and i.compression == "none" for i in items)
    return sum(p.stat().st_size for p in files) if plain else None


class _Steps:
    """Called after each block read (and at each input's start and end, with 0 bytes): counts the
    text bytes done, ends the work when ``stop`` is set (``EncodeStopped``) and tells ``progress``."""

    def __init__(self, progress: Callable[[dict], None] | None, stop: threading.Event | None,
                 total: int | None):
        self.progress, self.stop, self.total, self.done = progress, stop, total, 0

    def __call__(self, nread: int, where: object) -> None:
        self.done += nread
        if nread:
            pause_for_tests("encode:written")  # tests: kill with the outputs begun
        if self.stop is not None and self.stop.is_set():
            raise EncodeStopped()
        if self.progress is not None:
            self.progress({"stage": "encoding", "done": self.done, "total": self.total, "file": str(where)})


class _IdWriter:
    """Where the ids go: the training file's sink, or with a validation ``fraction`` a
    ``DocumentSplit`` over both sinks; ``sep_id`` (the separator) after every document."""

    def __init__(self, sinks: list[IdSink], fraction: Fraction | None, sep_id: int | None):
        import numpy as np

        self.sinks, self.sep_id = sinks, sep_id
        self.sep = None if sep_id is None else np.array([sep_id], dtype=np.uint32)
        self.split = DocumentSplit(sinks[0], sinks[1], fraction, sep_id) if fraction is not None else None
        self.write: Callable[[np.ndarray], None] = self.split.write if self.split is not None else sinks[0].write

    def write_documents(self, ids: np.ndarray, lengths: np.ndarray) -> None:
        """A block's documents: ``ids`` of them all, ``lengths`` ids per document."""
        import numpy as np

        ends = np.cumsum(lengths)
        if self.split is None:  # one write per block: a separator after each document
            self.write(ids if self.sep is None else np.insert(ids, ends.astype(np.intp), self.sep_id))
            return
        write, sep, split = self.write, self.sep, self.split
        for a, b in zip(np.concatenate(([0], ends[:-1])), ends):  # the split routes whole documents
            write(ids[int(a):int(b)])
            if sep is not None:
                write(sep)
            split.end_file()

    def end_text(self) -> None:
        """A text input ended: it is one document."""
        if self.sep is not None:
            self.write(self.sep)
        if self.split is not None:
            self.split.end_file()

    @property
    def documents_seen(self) -> int:
        """Documents seen, counted only when splitting (0 otherwise)."""
        return self.split.documents if self.split is not None else 0

    def finish(self, val_fraction: float | None) -> None:
        """Refuse a validation file without a document (InputError), else complete the files."""
        if self.split is not None and self.sinks[1].n == 0:
            raise InputError(f"--val-fraction {val_fraction} takes no document: the input holds "
                             f"{self.documents_seen} document(s) and the validation file gets floor(n * F) of "
                             "them; give a --separator that splits the text into documents, or more files")
        for s in self.sinks:
            s.finish()


def _encode_input(item: FileInput | Stream, tok: Tokenizer, threads: int, invalid_utf8: str, ids: _IdWriter,
                  step: _Steps) -> None:
    """Encode one input into ``ids``, a block at a time: a text file as one document, each jsonl
    record or parquet row as one of its own."""
    from ..text.whole_inputs import has_documents, input_blocks

    docs = has_documents(item)
    # valid UTF-8 blocks: the readers check it (per --invalid-utf8), as for training
    # the tokenizer's own pre-tokens, no piece bound (an encoder never cuts one)
    spec = replace(tok.pretoken_spec, invalid_utf8=invalid_utf8)
    for block in input_blocks(item, spec, ENCODE_BLOCK):
        if docs:
            ids.write_documents(*_document_ids(tok, block, threads))
        else:
            ids.write(tok.encode_to_array(block, threads))
        step(len(block), item.path)
    if not docs:  # a text input is one document
        ids.end_text()
    step(0, item.path)


def _document_ids(tok: Tokenizer, block: bytes, threads: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, ids per document)`` of a block of documents joined by DOC_SEP, each encoded alone."""
    import numpy as np

    from ..text.pretokenize import DOC_SEP

    if tok._core is not None and tok._core.native_split:
        return tok._core.encode_documents(block, threads)
    parts = [tok.encode_to_array(d, threads) for d in block.split(DOC_SEP)]
    return np.concatenate(parts), np.array([len(a) for a in parts], dtype=np.uint64)
