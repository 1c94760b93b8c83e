"""Steps 1 and 2 of the recipe: check a run's parameters and inputs, then plan it: fingerprint the
inputs, cut them into chunks and create the store (one transaction), or, to resume, check the
store, the parameters and the inputs against it, writing nothing.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from .._version import __version__
from ..counting.planning import plan_source, plan_units, same_kind_diffs, scan_input
from ..errors import ArgumentTypeError, InputError, ResumeMismatch, StoreError, path_argument
from ..store.base_rows import base_diff, base_row, write_base
from ..store.files import remove_files
from ..store.params import RunParams
from ..store.result import result_check
from ..store.run_rows import Chunk
from ..store.store import Store
from ..text.fingerprint import UNITS_HASH, digest_units
from ..text.input_checks import scan_source
from ..text.inputs import STDIN, FileInput, file_input
from ..text.sources import Source
from ..text.streams import Stream
from .extend import base_rows, based_params
from .job import Job, Progress
from .merge import Engine
from .merge_step import last_checkpoint_deferred, load_engine
from .options import TrainOptions, max_pretoken_bytes
from .superword_plan import check_same_stage1


def run_check(inputs: Sequence[str | os.PathLike] | str | os.PathLike | Stream, db: str | os.PathLike,
           vocab_size: int, special_tokens: Sequence[str], options: TrainOptions, progress: Progress | None,
           stop: threading.Event | None, on_checkpoint: Callable[[Store, int, bool], None] | None = None) -> Job:
    """1. check: ``train``'s arguments (see there), all of them before anything is written."""
    if on_checkpoint is not None and not callable(on_checkpoint):
        raise ArgumentTypeError(f"on_checkpoint must be callable, not {type(on_checkpoint).__name__}")
    if isinstance(inputs, (str, os.PathLike, Stream)):
        inputs = [inputs]
    db = path_argument(db, "db")
    if not isinstance(inputs, Iterable):
        raise ArgumentTypeError(f"inputs must be a path, a list of paths or a Stream, not {type(inputs).__name__}")
    inputs = [p if isinstance(p, Stream) else path_argument(p, "each input") for p in inputs]
    if not isinstance(options.text_field, str):
        raise ArgumentTypeError(f"text_field must be a str, not {type(options.text_field).__name__}")
    paths = [p if isinstance(p, Stream) else file_input(p, options.format, options.text_field) for p in inputs]
    if not paths:
        raise InputError("no input files given")
    if len(paths) > 1 and any(isinstance(p, Stream) for p in paths):
        raise InputError("a stream (standard input '-' or an iterable) must be the only input")
    run, params = options.checked(vocab_size, special_tokens)
    if run.extend is None:
        return Job(paths, Path(db), params, run, progress, stop, on_checkpoint=on_checkpoint)
    if params.superword_from is not None:
        raise InputError("--extend and --superword-from do not go together: a superword run's first merges "
                         "are its stage 1's")
    base, params = based_params(run.extend, params.pattern, special_tokens, params)
    return Job(paths, Path(db), params, run, progress, stop, on_checkpoint=on_checkpoint, base=base,
                base_rows=base_rows(base))


def run_plan(job: Job) -> Engine | None:
    """2. plan: create the store (``_create``); or open the existing one and check a resume
    (parameters, inputs, the store's consistency) before the first write, so a refused resume
    leaves the store exactly as it was. Sets ``job.store``; returns the merge engine when the
    checks built it (a store past counting)."""
    store = _open_for_training(job.db, job.paths, job.params.invalid_utf8, job.options.restart, job.options.durable)
    if store is None:
        job.params = _with_pretoken_limit(job.params, None)
        job.store = _create(job)
        job.remove_if_refused = True
        return None
    try:
        store.check_plan()
        job.params = _with_pretoken_limit(job.params, store.params())
        if diffs := base_diff(store, *((job.base.sha256, job.base.source) if job.base else (None, None))):
            raise ResumeMismatch(f"{store.path} was started with another base: {diffs[0]}. Use the same "
                                 "--extend, or --restart to start over")
        grow = _same_inputs(store, job.paths, job.params, job.touched, job.options.verify_inputs)
        if job.stage1 is not None:
            check_same_stage1(store, job.stage1)
        merger = _preflight(job, store, grow)
        if grow:
            store.set_vocab_size(job.params.vocab_size)  # continue to a larger vocabulary
    except BaseException:
        store.close()
        raise
    job.store = store
    return merger


def _create(job: Job) -> Store:
    """A new store: check the inputs (``plan_source``: uncompressed text is fingerprinted and
    checked to be UTF-8 as it is counted, other inputs now), cut them into work units, and create
    the store holding its schema, run, plan and vocabulary, all checked before the file is created."""
    sources: list[Source] = []
    for p in job.paths:
        job.emit(stage="plan", file=str(p.name if isinstance(p, Stream) else p.path))
        sources.append(p.source() if isinstance(p, Stream) else plan_source(p, job.params.invalid_utf8))
    params = job.params
    chunks: list[tuple[int, int, int, str, int | None]] = []
    for i, s in enumerate(sources):
        if isinstance(job.paths[i], Stream):
            chunks.append((i, 0, 0, "stream", None))
            continue
        for start, end, kind, part in plan_units(s, params.pretoken_spec, job.options.chunk_size):
            chunks.append((i, start, end, kind, part))
    # the store appears complete (schema, run, plan, vocabulary) or not at all
    chunk_size = job.options.chunk_size

    hashed = []

    def init(new: Store) -> None:
        new.init_run(params, sources, chunks, chunk_size, __version__, job.stage1)
        if job.base_rows is not None:  # the base's merges are the run's first (``training.extend``)
            hashed.append(write_base(new, job.base_rows))

    store = Store.create(job.db, init=init, durable=job.options.durable)
    if hashed:
        store.seed_merge_digest(hashed[0])
    return store


def _open_for_training(db: Path, paths: Sequence[FileInput | Stream], invalid_utf8: str, restart: bool,
                       durable: bool = True) -> Store | None:
    """The existing store at ``db`` to resume, locked; None when a new one is to be created.

    A store of ours with no run and no rows (an older bpe_store's creation killed midway: this one
    creates stores atomically, with their run) is deleted and created again, as is any store with
    ``restart`` (once the inputs are checked). A store with rows but no run or no schema version
    (damaged or edited) is refused: nothing is deleted without ``restart``."""
    if not db.exists() or db.is_dir() or db.stat().st_size == 0:
        if db.is_dir():
            Store.open(db)  # raises the "is a directory" error
        return None
    store = Store.open(db, allow_unfinished=True, durable=durable)
    try:
        if not restart and store.revision is not None and store.has_run():
            return store
        if not restart and (held := store.tables_with_rows()):
            why = "no schema version" if store.revision is None else "no run"
            raise StoreError(f"{db}: the store has {why} but holds data ({', '.join(held[:4])}): damaged or "
                             "edited, so it is not resumed and nothing was deleted; --restart deletes it "
                             "and starts over")
        if restart:
            for p in paths:
                if not isinstance(p, Stream):
                    scan_input(p, invalid_utf8)
        remove_files(db)  # still holding the lock, so no other trainer is using it
    except BaseException:
        store.close()
        raise
    store.close()
    return None


def _same_inputs(store: Store, paths: Sequence[FileInput | Stream], params: RunParams,
                 touched: dict[int, int] | None = None, verify: bool = False) -> bool:
    """Refuse a resume whose parameters or inputs differ from the store's, saying what differs.

    Writes nothing; returns whether ``params`` asks for a larger vocabulary than the store's.
    ``touched`` gets ``{source id: modification time}`` of the inputs whose time moved but whose
    content is the store's: counting checks them against that time (``_CountWriter``).
    ``verify`` (``--verify-inputs``) digests every input again, its time moved or not."""
    old = store.params()
    diffs = _param_diffs(old, params) + _input_diffs(store, paths, touched, verify)
    if diffs:
        raise ResumeMismatch(f"{store.path} was started with other parameters or inputs: "
                             + "; ".join(diffs) + ". Use the same command, or --restart to start over")
    if params.vocab_size < old.vocab_size:
        raise ResumeMismatch(
            f"{store.path} trains to vocab size {old.vocab_size}; a smaller one ({params.vocab_size}) "
            f"is a prefix of it: use `bpe-store export --vocab-size {params.vocab_size}` "
            "(or --restart to start over)")
    return params.vocab_size > old.vocab_size


def _with_pretoken_limit(params: RunParams, stored: RunParams | None) -> RunParams:
    """``params`` with the pre-token limit the run uses (``options.max_pretoken_bytes``: the one
    given, else the store's ``stored``, else the default for a new store): set here, once, as the
    store is opened or created, so every later step (the checks of a resume, planning, counting,
    the store's row) reads one value."""
    return dataclasses.replace(params, max_pretoken_bytes=max_pretoken_bytes(params.max_pretoken_bytes, stored))


def _param_diffs(old: RunParams, params: RunParams) -> list[str]:
    """How ``params`` differ from the store's ``old`` ones (the vocabulary size aside)."""
    diffs = []
    if old.pattern != params.pattern:
        diffs.append(f"pattern {old.pattern!r} -> {params.pattern!r}")
    if old.special_tokens != params.special_tokens:
        diffs.append(f"special tokens {list(old.special_tokens)} -> {list(params.special_tokens)}")
    if old.invalid_utf8 != params.invalid_utf8:
        diffs.append(f"invalid UTF-8 policy {old.invalid_utf8} -> {params.invalid_utf8}")
    for option in ("min_frequency", "max_token_length", "superword_from", "superword_max_words"):
        if getattr(old, option) != getattr(params, option):
            diffs.append(f"{option} {getattr(old, option)} -> {getattr(params, option)}")
    if old.stage1_pattern != params.stage1_pattern:
        diffs.append(f"stage-1 pattern {old.stage1_pattern!r} -> {params.stage1_pattern!r}")
    if old.max_pretoken_bytes != params.max_pretoken_bytes:
        diffs.append(f"max pre-token bytes {old.max_pretoken_bytes or 'no limit'} -> {params.max_pretoken_bytes}")
    return diffs


def _input_diffs(store: Store, paths: Sequence[FileInput | Stream],
                 touched: dict[int, int] | None = None, verify: bool = False) -> list[str]:
    """How the inputs ``paths`` differ from those the store was started with. An input whose
    modification time changed (every input, with ``verify``) is digested again; if its content
    is the same and its time moved, ``touched`` gets ``{source id: its modification time now}``.
    An input fingerprinted unit by unit (``UNITS_HASH``) has a fingerprint of its counted units
    only: those are digested again (``_units_diff``), and while some are not counted yet a moved
    time is refused."""
    sources = store.sources()
    units: dict[int, list[Chunk]] | None = None  # each input's work units
    given = [p.name if isinstance(p, Stream) else str(p.path.resolve()) for p in paths]
    if [s.path for s in sources] != given:
        return [f"inputs {[s.path for s in sources]} -> {given}"]
    diffs = same_kind_diffs(sources, paths)
    for i, s in enumerate(sources):
        if s.format == "iterable" or s.path == STDIN:
            continue  # a stream: checked as it is read again (see inputs.Stream)
        p = Path(s.path)
        if not p.is_file():
            diffs.append(f"{s.path} is gone")
            continue
        st = p.stat()
        moved = st.st_mtime_ns != s.mtime_ns
        if st.st_size != s.size:
            diffs.append(f"{s.path} changed size ({s.size} -> {st.st_size} bytes)")
        elif (moved or verify) and s.hash == UNITS_HASH:
            if units is None:  # read once: a resume may find many inputs touched
                units = {}
                for c in store.chunks():
                    units.setdefault(c.source_id, []).append(c)
            if (why := _units_diff(units.get(i, []), s, moved)) is not None:
                diffs.append(why)
            elif touched is not None and moved:
                touched[i] = st.st_mtime_ns
        elif moved or verify:  # touched (or verified): digested again, with the store's hash
            if scan_source(p, "replace", s.hash).digest != s.digest:
                diffs.append(f"{s.path} changed content ({s.hash} {s.digest[:12]}...)")
            elif touched is not None and moved:
                touched[i] = st.st_mtime_ns
    return diffs


def _units_diff(units: list[Chunk], s: Source, moved: bool = True) -> str | None:
    """How the input ``s`` (``UNITS_HASH``; ``units``: its work units), whose modification time
    ``moved`` (or which ``--verify-inputs`` reads again), differs from what the store counted of
    it; None if it is the same.

    Its counted units are read and digested again (a changed one: "changed content"). Its units
    not counted yet were never read, so nothing says whether they changed: then the moved time is
    refused, saying how to go on (its time restored, the store's check is the size and time)."""
    counted = [(c.start, c.end) for c in units if c.counted]
    if digest_units(s.path, counted) != s.digest:
        return f"{s.path} changed content ({s.hash} {s.digest[:12]}...)"
    left = len(units) - len(counted)
    if not left or not moved:  # same time: the units not counted yet are read (and checked) by counting
        return None
    sec, ns = divmod(s.mtime_ns, 10**9)
    return (f"{s.path} was modified after the run started (its modification time moved) and {left} of its "
            f"{len(units)} work units are not counted yet: a unit is fingerprinted as it is counted, so whether "
            f"those changed cannot be checked (the counted ones are unchanged). If its content is the same, "
            f"give it back its time (touch -d @{sec}.{ns:09d} '{s.path}') and resume")


def _preflight(job: Job, store: Store, grow: bool) -> Engine | None:
    """Check a store about to be resumed, writing nothing; the merge engine when merging will
    need it (built now, since building it is what checks words and pair counts)."""
    params = job.params
    run = store.run_row()
    result_check(store, params.special_tokens)
    if run["phase"] == "counting":
        based = base_row(store)  # a superword store holds its stage 1's merges, a based one its base's
        if store.count_merges() != (params.superword_from or (0 if based is None else based["merges"])):
            raise StoreError(f"{store.path}: the store is inconsistent (counting, but it holds merges other "
                             "than its base's or stage 1's); "
                             "start over with --restart")
        return None
    if run["phase"] == "merging" or grow or last_checkpoint_deferred(store):
        # a resume reads the words back and checks them: say so, it can take seconds
        job.emit(stage="loading", phase="merging", total=params.num_merges,
                 done=store.count_merges(), words=store.count_words())
        # a superword store's stage 2 starts from its words file when it has one (stage2_words)
        return load_engine(store, params, job.options.engine, words_file=True)
    return None
