"""OpenAI's tiktoken encodings by name (``cl100k_base``, ``o200k_base``, ...), their ``.tiktoken``
ranks files found offline, and any ranks file read fast.

A name is resolved without the network, first hit wins (``find_ranks_file``):

1. a directory the caller names (``directory=``, else the ``BPE_STORE_TIKTOKEN_DIR`` environment
   variable): ``cl100k_base.tiktoken``, ``cl100k_base.tiktoken.gz``, or tiktoken's cache name;
2. the ``bpe-openai`` package's data files, when it is installed (``pip install 'bpe-store[openai]'``;
   it ships ``cl100k_base`` and ``o200k_base``), found without importing it;
3. tiktoken's own cache, where ``tiktoken.get_encoding`` left a download: ``TIKTOKEN_CACHE_DIR``,
   else ``DATA_GYM_CACHE_DIR``, else ``<tmp>/data-gym-cache``, each file named by the SHA-1 of its
   URL (tiktoken's cache key).

Every file found is checked against OpenAI's published SHA-256 (a stale or foreign file is passed
over, as tiktoken passes it over); a name found nowhere is an ``InputError`` saying how to provide it.

Reading (``read_ranks``) is native (``bpe_store._core.TiktokenRanks``, native/tiktoken_ranks.h): the
canonical lines OpenAI's files hold are parsed and indexed in tens of milliseconds. A file the native
reader does not take (a malformed line, a repeated token) is read again by the strict Python reader
here, which names the line that is wrong, or reads an unusual but valid file (tabs, spaces).

Below training and the tokenizer: both load ranks from here (``Tokenizer.from_tiktoken``,
``bpe_store.tiktoken_compat``, a tokenizer extended by training).
"""

from __future__ import annotations

import binascii
import gzip
import hashlib
import importlib.util
import os
import tempfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError
from ..native import core
from ..store.params import MAX_VOCAB_SIZE

#: The largest rank a ranks file may give (the largest vocabulary's last id).
MAX_RANK = MAX_VOCAB_SIZE - 1
#: The environment variable naming a directory of ranks files, searched first.
DIR_VARIABLE = "BPE_STORE_TIKTOKEN_DIR"
_GZIP_MAGIC = b"\x1f\x8b"
_BLOB = "https://openaipublic.blob.core.windows.net/encodings/"
_EOT, _FIM = "<|endoftext|>", ("<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>")


@dataclass(frozen=True)
class OpenAIEncoding:
    """One of tiktoken's encodings: its ranks file (``file``, downloaded by tiktoken from ``url``,
    whose SHA-256 is ``sha256``), its pre-tokenization pattern (a name of ``pretokenize.PATTERNS``)
    and its special tokens with OpenAI's ids."""

    name: str
    file: str
    sha256: str
    pattern: str
    special_tokens: dict[str, int] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return _BLOB + self.file


_R50K_SHA = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
_P50K_SHA = "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069"
_CL100K_SHA = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
_O200K_SHA = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
_O200K_SPECIALS = {_EOT: 199999, "<|endofprompt|>": 200018}
# o200k_harmony: o200k_base's specials and its own; "<|reserved_200018|>" shares id 200018 with
# "<|endofprompt|>" (tiktoken decodes that id as the later one)
_HARMONY_SPECIALS = _O200K_SPECIALS | {
    "<|startoftext|>": 199998, _EOT: 199999, "<|reserved_200000|>": 200000, "<|reserved_200001|>": 200001,
    "<|return|>": 200002, "<|constrain|>": 200003, "<|reserved_200004|>": 200004, "<|channel|>": 200005,
    "<|start|>": 200006, "<|end|>": 200007, "<|message|>": 200008, "<|reserved_200009|>": 200009,
    "<|reserved_200010|>": 200010, "<|reserved_200011|>": 200011, "<|call|>": 200012,
} | {f"<|reserved_{i}|>": i for i in range(200013, 201088)}

#: ``{name: OpenAIEncoding}``: tiktoken's encodings, in ``tiktoken.list_encoding_names()``'s order.
#: ``gpt2`` has ``r50k_base``'s ranks and specials (tiktoken builds it from GPT-2's own two files;
#: the ranks are the same).
ENCODINGS: dict[str, OpenAIEncoding] = {e.name: e for e in (
    OpenAIEncoding("gpt2", "r50k_base.tiktoken", _R50K_SHA, "gpt2", {_EOT: 50256}),
    OpenAIEncoding("r50k_base", "r50k_base.tiktoken", _R50K_SHA, "gpt2", {_EOT: 50256}),
    OpenAIEncoding("p50k_base", "p50k_base.tiktoken", _P50K_SHA, "gpt2", {_EOT: 50256}),
    OpenAIEncoding("p50k_edit", "p50k_base.tiktoken", _P50K_SHA, "gpt2",
                   {_EOT: 50256, _FIM[0]: 50281, _FIM[1]: 50282, _FIM[2]: 50283}),
    OpenAIEncoding("cl100k_base", "cl100k_base.tiktoken", _CL100K_SHA, "cl100k",
                   {_EOT: 100257, _FIM[0]: 100258, _FIM[1]: 100259, _FIM[2]: 100260, "<|endofprompt|>": 100276}),
    OpenAIEncoding("o200k_base", "o200k_base.tiktoken", _O200K_SHA, "o200k", dict(_O200K_SPECIALS)),
    OpenAIEncoding("o200k_harmony", "o200k_base.tiktoken", _O200K_SHA, "o200k", _HARMONY_SPECIALS),
)}


class TiktokenFileError(InputError):
    """A ``.tiktoken`` ranks file that cannot be read as one: the message names the file and line
    (exit 2 from the CLI)."""


def encoding_spec(name: str) -> OpenAIEncoding:
    """The ``OpenAIEncoding`` called ``name``; ``InputError`` listing the names otherwise."""
    spec = ENCODINGS.get(name) if isinstance(name, str) else None
    if spec is None:
        raise InputError(f"unknown encoding {name!r}; the encodings are {', '.join(ENCODINGS)}")
    return spec


def tiktoken_cache_dir() -> Path | None:
    """Where tiktoken caches its downloads (None when ``TIKTOKEN_CACHE_DIR`` is set empty, which
    turns tiktoken's cache off)."""
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if var in os.environ:
            return Path(os.environ[var]) if os.environ[var] else None
    return Path(tempfile.gettempdir()) / "data-gym-cache"


def _bpe_openai_dir() -> Path | None:
    """The ``bpe-openai`` package's data directory, found without importing the package (its import
    loads a native library)."""
    try:
        spec = importlib.util.find_spec("bpe_openai")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def _candidates(spec: OpenAIEncoding, directory: str | os.PathLike | None) -> list[tuple[str, Path]]:
    """``(where, path)`` of every place a file of ``spec`` may be, in the order they are searched."""
    key = hashlib.sha1(spec.url.encode()).hexdigest()  # tiktoken's cache key: SHA-1 of the URL
    out: list[tuple[str, Path]] = []
    named = directory if directory is not None else os.environ.get(DIR_VARIABLE) or None
    if named is not None:
        d = Path(named)
        out += [(f"the directory {d}", d / n) for n in (spec.file, spec.file + ".gz", key)]
    data = _bpe_openai_dir()
    if data is not None:
        out += [("the bpe-openai package", data / (spec.file + ".gz")), ("the bpe-openai package", data / spec.file)]
    cache = tiktoken_cache_dir()
    if cache is not None:
        out.append((f"tiktoken's cache {cache}", cache / key))
    return out


def find_ranks_file(name: str, directory: str | os.PathLike | None = None) -> Path:
    """The ranks file of OpenAI's encoding ``name``, found offline (see the module's docstring);
    ``InputError`` saying where it looked and how to provide the file if it is nowhere."""
    spec = encoding_spec(name)
    looked: list[str] = []
    for _where, path in _candidates(spec, directory):
        if not path.is_file():
            continue
        if hashlib.sha256(read_bytes(path)).hexdigest() == spec.sha256:
            return path
        looked.append(f"{path} (not OpenAI's {spec.file}: another SHA-256)")
    places = sorted({where for where, _ in _candidates(spec, directory)})
    seen = f"; passed over {', '.join(looked)}" if looked else ""
    raise InputError(
        f"no ranks file for encoding {name!r} (looked in {', '.join(places) or 'nowhere'}{seen}); provide it: "
        f"put {spec.file} (from {spec.url}) in a directory and pass directory= or set {DIR_VARIABLE}, "
        f"or run tiktoken.get_encoding({name!r}) once online to fill its cache"
        + (", or pip install bpe-openai" if name in ("cl100k_base", "o200k_base", "o200k_harmony") else ""))


def read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped if it is gzip (``bpe-openai`` ships ``*.tiktoken.gz``). The last
    file read is kept while its size and modification time stay (``_last``): a base by name is read
    to check its SHA-256, then parsed, and gunzipping o200k_base twice cost ~0.1 CPU s."""
    global _last
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not a .tiktoken ranks file")
    try:
        st = path.stat()
        key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
        if _last is not None and _last[0] == key:
            return _last[1]
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    if data[:2] == _GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise TiktokenFileError(f"{path}: a damaged gzip file ({exc})") from None
    _last = (key, data)
    return data


#: ``((path, size, modification time), bytes)`` of the last file ``read_bytes`` read, or None.
_last: tuple[tuple[str, int, int], bytes] | None = None


def read_ranks(path: str | os.PathLike):
    """The ranks of a ``.tiktoken`` file (plain or gzipped) as a native ``TiktokenRanks`` (``len``,
    ``vocab()`` ``{rank: bytes}``, ``mergeable()`` ``{bytes: rank}``, ``get(bytes)``). Every problem
    is a ``TiktokenFileError`` naming the line (``strict_ranks``)."""
    p = Path(path)
    data = read_bytes(p)
    ranks = core.TiktokenRanks.parse(data, MAX_RANK)
    if ranks is None:  # not canonical, or wrong: the strict reader names the line, or reads it
        ranks = ranks_of(strict_ranks(data, p))
    return ranks


def ranks_of(mergeable: Mapping[bytes, int]):
    """A native ``TiktokenRanks`` of ``{token bytes: rank}`` (checked as ``strict_ranks`` checks a
    file's: distinct ranks from 0 to ``MAX_RANK``, all 256 single bytes)."""
    ranks = core.TiktokenRanks.from_items(list(mergeable.items()), MAX_RANK)
    if ranks is None:
        _check_ranks(mergeable)
        raise InputError("the ranks are not byte-level BPE ranks")  # pragma: no cover - _check_ranks names it
    return ranks


def _check_ranks(mergeable: Mapping[bytes, int]) -> None:
    """InputError naming what is wrong with in-memory ranks ``{token bytes: rank}``."""
    owner: dict[int, bytes] = {}
    for token, rank in mergeable.items():
        if not isinstance(token, (bytes, bytearray)) or not token:
            raise InputError(f"a token must be non-empty bytes, not {token!r:.40}")
        if type(rank) is not int or not 0 <= rank <= MAX_RANK:
            raise InputError(f"the rank of {token!r:.40} is {rank!r}, not an integer from 0 to {MAX_RANK}")
        if rank in owner:
            raise InputError(f"rank {rank} is given to {owner[rank]!r:.40} and to {token!r:.40}; "
                             "ranks must be distinct")
        owner[rank] = bytes(token)
    missing = [b for b in range(256) if bytes([b]) not in mergeable]
    if missing:
        raise InputError(f"{len(missing)} single byte(s) have no rank (first: {missing[0]:#04x}); "
                         "byte-level BPE needs all 256")


def strict_ranks(data: bytes, p: Path) -> dict[bytes, int]:
    """``{token bytes: rank}`` of a ranks file's bytes, as tiktoken's ``load_tiktoken_bpe`` reads
    them (blank lines skipped) but strict: each line must be ``base64 rank`` with valid base64 of a
    non-empty token and a decimal rank from 0 to ``MAX_RANK``; tokens and ranks must be distinct,
    and all 256 single bytes must have a rank (byte-level BPE starts from them). Every problem is a
    ``TiktokenFileError`` naming the line."""
    ranks: dict[bytes, int] = {}
    line_of: dict[bytes, int] = {}  # {token: line}, for the messages
    token_of: dict[int, bytes] = {}  # {rank: token}
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        token, rank = _strict_line(line, f"{p}: line {n}")
        at = f"{p}: line {n}"
        if token in ranks:
            raise TiktokenFileError(f"{at}: token {token!r} is listed twice (first on line {line_of[token]})")
        if rank in token_of:
            other = token_of[rank]
            raise TiktokenFileError(f"{at}: rank {rank} is given to {token!r} and to {other!r} "
                                    f"(line {line_of[other]}); ranks must be distinct")
        ranks[token] = rank
        line_of[token] = n
        token_of[rank] = token
    if not ranks:
        raise TiktokenFileError(f"{p}: holds no ranks (an empty file?)")
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise TiktokenFileError(f"{p}: {len(missing)} single byte(s) have no rank (first: {missing[0]:#04x}); "
                                "byte-level BPE needs all 256")
    return ranks


def _strict_line(line: bytes, at: str) -> tuple[bytes, int]:
    """``(token, rank)`` of one non-blank line, or TiktokenFileError saying what is wrong at ``at``."""
    fields = line.split()
    if len(fields) != 2:
        shown = line[:60].decode("utf-8", "replace")
        raise TiktokenFileError(f"{at} is not 'base64-token rank': {shown!r}")
    b64, rank_text = fields
    try:
        token = binascii.a2b_base64(b64, strict_mode=True)
    except (binascii.Error, ValueError):
        raise TiktokenFileError(f"{at}: {b64[:60].decode('utf-8', 'replace')!r} is not base64") from None
    if not token:
        raise TiktokenFileError(f"{at}: the token is empty")
    if not rank_text.isdigit() or not rank_text.isascii() or int(rank_text) > MAX_RANK:
        raise TiktokenFileError(f"{at}: the rank {rank_text[:40].decode('utf-8', 'replace')!r} is not an "
                                f"integer from 0 to {MAX_RANK}")
    return token, int(rank_text)
