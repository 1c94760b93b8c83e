"""A training run's settings (``TrainOptions``) and their checks, before anything is written.

``TrainOptions`` is the one source of a run's settings and their defaults, as a caller gives
them: ``train``'s keyword parameters default to its fields, the CLI's options to the same, and
``checked`` validates them all against the bounds below and ``bpe_store.store.params``'s (the
bounds a store's run row is held to). ``checked`` splits them in two that share no field: the
``RunParams`` that define the result (stored with the run: a resume must give the same) and the
``RunOptions`` that do not; the job the steps share holds those two. ``check_params`` checks
what defines a run, ``check_trainer_options`` the trainer's options stored with it,
``check_run_options`` and ``check_engines`` what never changes a run's result. Each raises
``InputError`` naming the bad value (exit code 2 on the command line). ``train`` (step 1, check)
calls ``checked``.

A new run option: a field here (with its default and a check), a keyword parameter of ``train``
(a test holds the two equal), and a field of either ``RunOptions`` or, if it defines the result,
``RunParams`` (with a column; ``PARAMS_OF_OPTIONS`` then names it).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..errors import InputError, text_argument
from ..store.params import (
    INVALID_UTF8_POLICIES,
    MAX_MAX_PRETOKEN_BYTES,
    MAX_MAX_TOKEN_LENGTH,
    MAX_MIN_FREQUENCY,
    MAX_SPECIAL_TOKENS,
    MAX_VOCAB_SIZE,
    MIN_MAX_PRETOKEN_BYTES,
    MIN_MAX_TOKEN_LENGTH,
    RunParams,
    pattern_problem,
)
from ..text.chunks import DEFAULT_CHUNK_SIZE
from ..text.inputs import DEFAULT_TEXT_FIELD
from ..text.pretokenize import GPT2_PATTERN, resolve_pattern
from ..text.superword_split import MAX_WORDS, STAGE2_PATTERN
from .merge import ENGINES, native_available

#: Counting threads: far more than any machine has cores; each may hold two chunks in memory.
MAX_WORKERS = 1024
#: A chunk is read into memory whole; 4 GiB is far above any useful size (the default is 8 MiB).
MAX_CHUNK_SIZE = 1 << 32
#: A pre-token longer than this (a line of letters without whitespace) counts as pieces of at
#: most this many bytes (pretokenize.split_long_pretoken) in a new store. Why 1 MiB: no word of
#: any natural language comes near it, so on real text nothing changes (the CS336 reference
#: semantics hold), while one pathological line can no longer make a word of hundreds of MB (its
#: tokens blob hit SQLite's 1 GB limit, and the merge engine needs ~25 bytes of memory per byte of
#: a word).
DEFAULT_MAX_PRETOKEN_BYTES = 1 << 20
#: Where counting may run.
COUNT_ENGINES = ("local", "ray")
#: Distinct words counting keeps in memory while a reader pins the WAL before it writes them into
#: the WAL (about 100 bytes each in the native counter: ~0.4 GB): ``TrainOptions.reader_memory_words``.
DEFERRED_COUNT_WORDS = 4_000_000
#: How large the WAL may grow while a reader pins it, by the writes that cannot wait (a counting
#: flush past ``reader_memory_words``, the end of counting): ``TrainOptions.reader_wal_bytes``.
#: Why 4 GiB: enwiki-100M's whole counting (445 K words) went into the WAL as one write of 10.7 MB
#: (bench/bench_wal_reader.py --whole-run), so a corpus of 7 M words (OpenWebText) needs ~0.2 GB
#: and one of 100 M words still fits; a reader that stays for a run is rarer than the disk it costs.
DEFERRED_WAL_BYTES = 4 << 30


@dataclasses.dataclass(frozen=True)
class TrainOptions:
    """A run's settings besides its inputs, store, vocabulary size and special tokens, with their
    defaults: ``train``'s keyword parameters are these fields (its docstring lists them from the
    Attributes below) and the CLI's options default to them. ``checked`` validates them all. A
    class attribute is a field's default (``TrainOptions.chunk_size``).

    Attributes:
        pattern: the pre-tokenization regex, or a name in ``pretokenize.PATTERNS`` ("gpt2", the
            default; "gpt4" = "cl100k"; "o200k"; "llama3"; "qwen2": each has a native scanner). The
            store keeps the regex, so a name and its regex are the same run.
        workers: counting threads/processes (default: all cores); never changes the result.
        chunk_size: bytes per counting unit; never changes the result.
        checkpoint_merges: also end a merge batch (a checkpoint) after this many merges.
        checkpoint_seconds: seconds of merging per checkpoint: the most a kill can lose.
        count_flush_seconds: counting writes its counts to the store at most this often.
        invalid_utf8: "strict" (refuse, naming the byte offset) or "replace" (U+FFFD).
        restart: discard the store's progress and start over.
        engine: the merge engine: "native" (C++), "python" (the portable fallback) or "auto"
            (native when built). Both give the same result, so a run may resume with the other.
        durable: False skips every fsync: only for a store no one will resume (``train_bpe``'s
            temporary one), where they cost more than the training on a busy disk.
        format: how to read the input files: "text", "jsonl" or "parquet" (default: by extension).
        text_field: the jsonl field / parquet column holding each document's text.
        min_frequency: words counted fewer times take part in no pair (they stay in the store's
            ``words`` with their counts); 1, the default, is CS336's semantics.
        max_token_length: no merge makes a token longer than this many bytes (None: no limit);
            a pair too long is never counted, so it is never chosen.
        count_engine: where counting runs: "local" (this machine's threads) or "ray" (Ray tasks,
            ``bpe_store.counting.ray_count``); never changes the result, so a run may resume with the other.
        ray_address: with ``count_engine="ray"``, the cluster to count on (``host:port``,
            ``ray://host:port`` or ``auto``); None starts a local cluster of ``workers`` CPUs for
            the counting (or uses this process's connection if ``ray.init`` was called).
        max_pretoken_bytes: a pre-token longer than this counts as pieces of at most this many
            bytes, cut at UTF-8 character starts (``pretokenize.split_long_pretoken``); 4 to 64 MiB,
            stored with the run. None: the store's value on a resume, else 1 MiB.
        superword_from: SuperBPE (docs/superword.md): the transition point t. The store gets the
            first t merges of stage 1 (``pattern``), then superword merges learned on stage 2's
            pieces up to ``vocab_size``. Without ``superword_base``, stage 1 is trained first into
            the store beside ``db`` named ``<name>.stage1<suffix>`` (kept: a later t reuses it).
        superword_base: a finished store whose first ``superword_from`` merges are stage 1 (its
            pattern and special tokens must be this run's); it is only read.
        max_superword_words: the most words (parts between spaces) a superword token may span (4,
            the authors').
        extend: a tokenizer to extend (``bpe_store.formats.bases``): "cl100k_base", "o200k_base", a
            ``.tiktoken`` ranks file (its pattern given as ``pattern``), a ``tokenizer.json``, GPT-2's
            ``vocab.json`` + ``merges.txt`` (or their directory), or a store (``run.db``, or
            ``run.db@MERGES`` for its first MERGES merges). Every token keeps its id, its merges are the
            run's first, its pattern and special tokens are the run's, and the new tokens get the ids
            after its largest. ``vocab_size`` counts the base's tokens too. A resume names the same base.
        reader_memory_words: while a reader pins the store's WAL (an open ``BEGIN; SELECT``), counting
            keeps up to this many distinct words in memory (~100 bytes each) instead of writing them
            (``bpe_store.training.wal_watch``); never changes the result.
        reader_wal_bytes: while a reader pins the WAL, the writes that cannot be put off (past
            ``reader_memory_words``, the end of counting) go into the WAL until it is this large;
            only past it does training wait for the reader; never changes the result.
        verify_inputs: on a resume, read every counted input file again and compare its fingerprint
            with the store's, even when its size and modification time are the same (a changed file
            is refused, exit 3); never changes the result.
    """

    pattern: str = GPT2_PATTERN
    workers: int | None = None
    chunk_size: int = DEFAULT_CHUNK_SIZE
    #: A checkpoint is written after ``checkpoint_seconds`` of merging (and when merging ends): the
    #: most a kill can lose. ``checkpoint_merges`` also caps a batch when given; by default it is
    #: None, because merges per second vary 100x between engines and corpora, while the cost of a
    #: checkpoint grows with the words a batch touches: with the native engine on enwiki-100M a
    #: checkpoint every 2000 merges spent 7 s writing for 1 s of merging (bench/RESULTS-merge.md).
    checkpoint_merges: int | None = None
    checkpoint_seconds: float = 30.0
    count_flush_seconds: float = 10.0
    invalid_utf8: str = "strict"
    restart: bool = False
    engine: str = "auto"
    durable: bool = True
    format: str | None = None
    text_field: str = DEFAULT_TEXT_FIELD
    min_frequency: int = 1
    max_token_length: int | None = None
    count_engine: str = "local"
    ray_address: str | None = None
    max_pretoken_bytes: int | None = None
    superword_from: int | None = None
    superword_base: str | os.PathLike | None = None
    max_superword_words: int = MAX_WORDS
    extend: str | os.PathLike | None = None
    reader_memory_words: int = DEFERRED_COUNT_WORDS
    reader_wal_bytes: int = DEFERRED_WAL_BYTES
    verify_inputs: bool = False

    @classmethod
    def of(cls, given: Mapping[str, Any]) -> TrainOptions:
        """The options as ``given`` names them (``train``'s ``locals()``: its keyword parameters are
        these fields, by name); other names are ignored."""
        return cls(**{f.name: given[f.name] for f in dataclasses.fields(cls)})

    @classmethod
    def of_run(cls, options: RunOptions, params: RunParams) -> TrainOptions:
        """The options that ``checked`` splits into ``options`` and ``params`` (a plain run's: a
        superword store's stage-1 run is ``stage1_params`` of its own)."""
        given = {name: getattr(params, field) for name, field in PARAMS_OF_OPTIONS.items()}
        if params.superword_max_words is None:
            given["max_superword_words"] = cls.max_superword_words
        return cls(**given, **dataclasses.asdict(options))

    def checked(self, vocab_size: int, special_tokens: Sequence[str]) -> tuple[RunOptions, RunParams]:
        """These options checked and split in two: the ``RunOptions`` (``workers`` resolved to a
        count) and the ``RunParams`` they define with ``vocab_size`` and ``special_tokens`` (the
        pattern resolved to its regex; a superword run's are its store's: ``superword_params``);
        InputError naming the first bad value."""
        pattern = resolve_pattern(self.pattern) if isinstance(self.pattern, str) else self.pattern
        params = check_params(vocab_size, special_tokens, pattern, self.invalid_utf8, self.max_pretoken_bytes)
        params = dataclasses.replace(params, **check_trainer_options(self.min_frequency, self.max_token_length))
        workers = check_run_options(self.workers, self.chunk_size, self.checkpoint_merges, self.checkpoint_seconds,
                                    self.count_flush_seconds)
        check_engines(self.engine, self.count_engine, self.ray_address)
        check_reader_budgets(self.reader_memory_words, self.reader_wal_bytes)
        check_superword_options(self.superword_from, self.superword_base, self.max_superword_words, params)
        if self.superword_from is not None:
            params = superword_params(params, self.superword_from, self.max_superword_words)
        run = {f.name: getattr(self, f.name) for f in dataclasses.fields(RunOptions)}
        return RunOptions(**{**run, "workers": workers}), params


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """A run's settings, checked, that do not define its result (``TrainOptions.checked``; what
    defines it is its ``RunParams``, and no field is in both): ``TrainOptions``' fields but
    ``PARAMS_OF_OPTIONS``', ``workers`` a count. Its docstring says each."""

    workers: int
    chunk_size: int
    checkpoint_merges: int | None
    checkpoint_seconds: float
    count_flush_seconds: float
    restart: bool
    engine: str
    durable: bool
    format: str | None
    text_field: str
    count_engine: str
    ray_address: str | None
    superword_base: str | os.PathLike | None
    extend: str | os.PathLike | None
    reader_memory_words: int
    reader_wal_bytes: int
    verify_inputs: bool


#: The ``TrainOptions`` that ``checked`` makes ``RunParams`` fields: ``{option: its RunParams field}``
#: (a test holds that these and ``RunOptions``' fields are ``TrainOptions``' fields, each once).
PARAMS_OF_OPTIONS: dict[str, str] = {
    "pattern": "pattern", "invalid_utf8": "invalid_utf8", "min_frequency": "min_frequency",
    "max_token_length": "max_token_length", "max_pretoken_bytes": "max_pretoken_bytes",
    "superword_from": "superword_from", "max_superword_words": "superword_max_words"}


def superword_params(params: RunParams, superword_from: int, max_words: int) -> RunParams:
    """The parameters of the superword store (docs/superword.md) of a run whose stage-1 parameters
    are ``params``: stage 2's pattern, the stage-1 pattern kept beside it."""
    return dataclasses.replace(params, pattern=STAGE2_PATTERN, stage1_pattern=params.pattern,
                               superword_from=superword_from, superword_max_words=max_words)


def stage1_params(params: RunParams) -> RunParams:
    """The parameters of a superword run's stage 1 (``params``: the superword store's): a plain run
    of its stage-1 pattern to ``superword_from`` merges (``superword_params`` undone)."""
    assert params.superword_from is not None and params.stage1_pattern is not None
    return dataclasses.replace(params, pattern=params.stage1_pattern, stage1_pattern=None, superword_from=None,
                               superword_max_words=None,
                               vocab_size=len(params.special_tokens) + 256 + params.superword_from)


def options_doc() -> str:
    """``TrainOptions``' Attributes, as the lines of an Args section (``inspect.cleandoc``'s
    indentation: four spaces an entry): ``train``'s docstring lists its options from here."""
    return inspect.cleandoc(TrainOptions.__doc__ or "").split("Attributes:\n", 1)[1] + "\n"


def max_pretoken_bytes(given: int | None, stored: RunParams | None) -> int | None:
    """The pre-token limit a run uses, decided here only: the one given; else the store's on a
    resume (``stored``; None there means no limit: a store from before the limit existed); else,
    for a new store, ``DEFAULT_MAX_PRETOKEN_BYTES``."""
    if given is not None:
        return given
    return DEFAULT_MAX_PRETOKEN_BYTES if stored is None else stored.max_pretoken_bytes


def _positive_int(name: str, value: object, most: int | None = None) -> int:
    """``value`` if it is an int in ``1 .. most``; otherwise InputError naming ``name``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InputError(f"{name} must be an integer, not {value!r}")
    if value < 1 or (most is not None and value > most):
        bound = f"between 1 and {most}" if most is not None else "at least 1"
        raise InputError(f"{name} must be {bound}, not {value}")
    return value


def _seconds(name: str, value: object, zero_ok: bool = False) -> float:
    """``value`` as float seconds if it is a finite number > 0 (>= 0 if ``zero_ok``); otherwise
    InputError. Why finite: NaN compares false with everything, so a NaN or infinite interval
    silently meant "never checkpoint"."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{name} must be a number of seconds, not {value!r}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        least = "0 or more" if zero_ok else "above 0"
        raise InputError(f"{name} must be a finite number of seconds, {least}, not {value}")
    return float(value)


def check_run_options(workers: int | None, chunk_size: int, checkpoint_merges: int | None,
                      checkpoint_seconds: float, count_flush_seconds: float) -> int:
    """Validate the options that never change a run's result; return the worker count to use."""
    if workers is not None:
        _positive_int("workers", workers, MAX_WORKERS)
    _positive_int("chunk size", chunk_size, MAX_CHUNK_SIZE)
    if checkpoint_merges is not None:
        _positive_int("checkpoint merges", checkpoint_merges)
    _seconds("checkpoint seconds", checkpoint_seconds)
    _seconds("count flush seconds", count_flush_seconds, zero_ok=True)
    return min(workers or os.cpu_count() or 1, MAX_WORKERS)


def check_reader_budgets(memory_words: int, wal_bytes: int) -> None:
    """Validate the budgets of a run while a reader pins the WAL (``reader_memory_words``,
    ``reader_wal_bytes``): at least 1, at most 2^62."""
    _positive_int("reader memory words", memory_words, 1 << 62)
    _positive_int("reader WAL bytes", wal_bytes, 1 << 62)


def _check_pattern(pattern: str) -> None:
    """Refuse a pattern that is not text, does not compile, or is beyond what a store may hold
    (too long, or catastrophic backtracking: ``bpe_store.store.params``, whose check of a store
    would refuse the store this run made)."""
    if not isinstance(pattern, str):
        raise InputError(f"the pre-tokenization pattern must be a string, not {pattern!r}")
    text_argument(pattern, "the pre-tokenization pattern")
    problem = pattern_problem(pattern)
    if problem:
        raise InputError(f"the pre-tokenization pattern {problem}")


def check_params(vocab_size: int, special_tokens: Sequence[str], pattern: str, invalid_utf8: str,
                 max_pretoken_bytes: int | None = None) -> RunParams:
    """Validate the parameters that define a run; raise InputError naming the bad one.
    ``max_pretoken_bytes`` None means "not given" (the store's value, or the default)."""
    if isinstance(special_tokens, (str, bytes)) or not isinstance(special_tokens, Iterable):
        raise InputError(f"special tokens must be a list of strings, not {special_tokens!r}")
    specials = list(special_tokens)
    for s in specials:
        if not isinstance(s, str) or s == "":
            raise InputError("special tokens must be non-empty strings")
        text_argument(s, f"special token {s!r}")
    if len(specials) > MAX_SPECIAL_TOKENS:  # a store with more is refused as damaged (params.check_run)
        raise InputError(f"{len(specials)} special tokens: at most {MAX_SPECIAL_TOKENS}")
    dup = [s for s, n in Counter(specials).items() if n > 1]
    if dup:
        raise InputError(f"special token {dup[0]!r} is given more than once")
    if not isinstance(vocab_size, int) or isinstance(vocab_size, bool):
        raise InputError(f"vocab size must be an integer, not {vocab_size!r}")
    least = 256 + len(specials)
    if vocab_size < least:
        raise InputError(f"vocab size {vocab_size} is too small: it must be at least 256 bytes + "
                         f"{len(specials)} special tokens = {least}")
    if vocab_size > MAX_VOCAB_SIZE:
        raise InputError(f"vocab size {vocab_size} is too large: token ids are 32-bit, so at most "
                         f"{MAX_VOCAB_SIZE}")
    _check_pattern(pattern)
    if invalid_utf8 not in INVALID_UTF8_POLICIES:
        raise InputError(f"invalid_utf8 must be 'strict' or 'replace', not {invalid_utf8!r}")
    if max_pretoken_bytes is not None:
        _positive_int("max pre-token bytes", max_pretoken_bytes, MAX_MAX_PRETOKEN_BYTES)
        if max_pretoken_bytes < MIN_MAX_PRETOKEN_BYTES:
            raise InputError(f"max pre-token bytes must be between {MIN_MAX_PRETOKEN_BYTES} and "
                             f"{MAX_MAX_PRETOKEN_BYTES} (one character is up to 4 bytes), not {max_pretoken_bytes}")
    return RunParams(pattern, tuple(specials), vocab_size, invalid_utf8, max_pretoken_bytes=max_pretoken_bytes)


def check_trainer_options(min_frequency: int, max_token_length: int | None) -> dict:
    """Validate ``min_frequency`` and ``max_token_length`` (see ``train``); raise InputError
    naming the bad one. Returns them as ``RunParams`` fields."""
    _positive_int("min_frequency", min_frequency, MAX_MIN_FREQUENCY)
    if (max_token_length is not None
            and _positive_int("max_token_length", max_token_length, MAX_MAX_TOKEN_LENGTH) < MIN_MAX_TOKEN_LENGTH):
        raise InputError("max_token_length must be at least 2 (a merge joins two tokens of at least one "
                         "byte each), or None for no limit, not 1")
    return {"min_frequency": min_frequency, "max_token_length": max_token_length}

def check_engines(engine: str, count_engine: str, ray_address: str | None) -> None:
    """Validate where merging (``engine``) and counting (``count_engine``, ``ray_address``) run."""
    if engine not in ENGINES:
        raise InputError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    if engine == "native" and not native_available():
        raise InputError("the native merge engine is not built in this installation; use engine='python'")
    if count_engine not in COUNT_ENGINES:
        raise InputError(f"count_engine must be 'local' or 'ray', not {count_engine!r}")
    if ray_address is not None and count_engine != "ray":
        raise InputError("ray_address needs count_engine='ray'")
    if count_engine == "ray":
        from ..counting.ray_count import import_ray

        import_ray()  # missing Ray: say how to install it before anything is written


def check_superword_options(superword_from: int | None, base: str | os.PathLike | None, max_words: int,
                            params: RunParams) -> None:
    """Validate the SuperBPE options (see ``TrainOptions``) against the run's ``params``."""
    if superword_from is None:
        if base is not None:
            raise InputError("superword_base needs superword_from (the transition point)")
        return
    if not isinstance(superword_from, int) or isinstance(superword_from, bool) or superword_from < 0:
        raise InputError(f"superword_from must be an integer of at least 0, not {superword_from!r}")
    if superword_from > params.num_merges:
        raise InputError(f"superword_from {superword_from} is larger than the vocabulary: vocab size "
                         f"{params.vocab_size} holds {params.num_merges} merges after the 256 bytes and "
                         f"{len(params.special_tokens)} special tokens")
    _positive_int("max_superword_words", max_words, (1 << 31) - 1)
    if base is not None and not isinstance(base, (str, os.PathLike)):
        raise InputError(f"superword_base must be a path, not {base!r}")
