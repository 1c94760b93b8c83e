"""The base a run extends (``train(..., extend=...)``, ``bpe-store train --extend``): any byte-level
BPE tokenizer read into one form, a ``Base``: its pattern, its special tokens and, in order, the
merges that rebuild its tokens, with every token's id.

A base is one of:

* OpenAI's encodings by name (``cl100k_base``, ``o200k_base``, ...), found offline
  (``bpe_store.formats.openai_ranks``);
* a ``.tiktoken`` ranks file (its pattern given with it: a ranks file holds none);
* a ``tokenizer.json`` (byte-level BPE, ``hf_files``) or a directory holding one;
* GPT-2's ``vocab.json`` + ``merges.txt`` (either file, or their directory);
* another store, at its last merge or at merge ``t`` (``run.db@t``).

**One rule for every base: merge order.** A run continues the base's merge list, and its tokenizer
applies all the merges, the base's and the new ones, by rank (bpe_store's BPE). So a base must be
one that merge order encodes exactly as its own encoder does. For a merge list (GPT-2, a
``tokenizer.json``, a store) that is its own rule. tiktoken has no merges: a token's rank is its id
and the adjacent parts whose *concatenation* ranks lowest merge first; the merge of each token t is
the pair of parts tiktoken's own rule reaches on t's bytes with the ranks below t's
(``_tiktoken_merge_list``). Merge order with those merges then encodes every text as tiktoken does:
by induction over the ranks, merge order rebuilds every token from its bytes (BPE(t) == [t]), which
is the condition under which the two rules agree (``tokenizer.export.check_tiktoken_merges`` proves
it). A token tiktoken's rule cannot reach from its bytes through two parts is refused (neither
OpenAI file has one). A ``tokenizer.json`` with ``ignore_merges`` (a pre-token that is a token is
that token) is held to the same BPE(t) == [t] check.

**Ids.** Every token keeps the base's id. The non-special tokens must have the ids 0 .. N-1 (ids
with holes are refused); special tokens may sit anywhere above, with holes between them (o200k's
at 199999 and 200018): the run's new tokens take the ids after the largest, special tokens
included (``Base.next_id``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError
from .gpt2_files import read_gpt2
from .hf_files import read_hf_bpe
from .openai_ranks import ENCODINGS, find_ranks_file


class BaseError(InputError):
    """A base that cannot be extended (exit 2): the message says what is wrong with it."""


@dataclass(frozen=True)
class Base:
    """A tokenizer a run extends. ``specials`` ``{text: id}`` in id order; ``byte_ids[b]`` the id of
    the single byte b; ``merges`` ``[(left bytes, right bytes)]`` in rank order and ``merge_ids``
    the id of the token each makes. ``kind``: tiktoken, hf, gpt2 or store; ``source``: what was read
    (a name, a path, ``path@t``); ``sha256``: of the file(s) read (a store: of its vocabulary and
    merges, ``store_digest``)."""

    kind: str
    source: str
    sha256: str
    pattern: str
    specials: dict[str, int]
    byte_ids: tuple[int, ...]
    merges: Sequence[tuple[bytes, bytes]] = field(repr=False)
    merge_ids: list[int] = field(repr=False)
    #: ``merges`` in the store's ids, ``[(left, right, token)]``, when the reader made them (a ranks
    #: file, natively: ``_ranks_base``); else ``training.extend.base_rows`` derives them from the bytes
    store_merges: list[tuple[int, int, int]] | None = field(default=None, repr=False)
    #: the bytes of each merge's token, when the reader has them (a ranks file: its tokens)
    merge_bytes: list[bytes] | None = field(default=None, repr=False)

    @property
    def next_id(self) -> int:
        """The first id after every id of the base, special tokens included: the run's first new token."""
        return max([*self.specials.values(), *self.byte_ids, *self.merge_ids]) + 1

    @property
    def n_tokens(self) -> int:
        return len(self.specials) + 256 + len(self.merges)

    def model_ids(self) -> list[int]:
        """The base's id of each token in the store's order (special tokens, the 256 bytes, the merges)."""
        return [*self.specials.values(), *self.byte_ids, *self.merge_ids]


def load_base(spec: str | os.PathLike, pattern: str | None = None) -> Base:
    """The base ``spec`` names (see the module doc); ``pattern`` (a regex) is a ``.tiktoken`` file's,
    which holds none. BaseError (or InputError) saying what is wrong; reads, never writes."""
    text = os.fspath(spec)
    if text in ENCODINGS:  # found offline, its SHA-256 OpenAI's (``bpe_store.formats.openai_ranks``)
        from ..text.pretokenize import resolve_pattern

        named = ENCODINGS[text]
        path = find_ranks_file(text)
        return _ranks_base(path, text, resolve_pattern(named.pattern), named.special_tokens, sha=named.sha256)
    p = Path(text)
    if not p.exists() and "@" in text:
        store, _, at = text.rpartition("@")
        if Path(store).is_file() and at.isdigit():
            return _store_base(Path(store), int(at), text)
    if not p.exists():
        raise BaseError(f"no base {text!r}: give cl100k_base or o200k_base, a .tiktoken ranks file, a "
                        "tokenizer.json, GPT-2's vocab.json + merges.txt (or their directory), or a store "
                        "(run.db, or run.db@MERGES for a prefix)")
    if p.is_dir():
        return _dir_base(p, pattern)
    with open(p, "rb") as f:
        head = f.read(16)
    if head.startswith(b"SQLite format 3"):
        return _store_base(p, None, text)
    if p.name == "vocab.json" or p.name == "merges.txt":
        return _gpt2_base(p.parent)
    if p.suffix == ".json":
        return _hf_base(p)
    if pattern is None:
        raise BaseError(f"{p}: a .tiktoken ranks file holds no pre-tokenization pattern: give it with --pattern "
                        "(cl100k, o200k, ... or a regex)")
    return _ranks_base(p, str(p), pattern, {})


def _dir_base(d: Path, pattern: str | None) -> Base:
    if (d / "tiktoken.json").is_file():
        return _tiktoken_export_base(d)
    if (d / "tokenizer.json").is_file():
        return _hf_base(d / "tokenizer.json")
    if (d / "vocab.json").is_file() and (d / "merges.txt").is_file():
        return _gpt2_base(d)
    raise BaseError(f"{d}: a directory holding none of tokenizer.json, vocab.json + merges.txt, tiktoken.json")


def _tiktoken_export_base(d: Path) -> Base:
    """A tiktoken export (``bpe-store export --format tiktoken``): ``tiktoken.json`` names the ranks
    file, the pattern and the special tokens with their ids."""
    import json

    try:
        meta = json.loads((d / "tiktoken.json").read_text(encoding="utf-8"))
        ranks, pattern, specials = d / meta["ranks_file"], meta["pattern"], dict(meta["special_tokens"])
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise BaseError(f"{d / 'tiktoken.json'}: not a tiktoken export's description ({exc!r:.80})") from None
    if not isinstance(pattern, str) or not all(type(i) is int for i in specials.values()):
        raise BaseError(f"{d / 'tiktoken.json'}: its pattern or special token ids are not a string and integers")
    return _ranks_base(ranks, str(d), pattern, specials)


def _sha256(*paths: Path) -> str:
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            while block := f.read(1 << 20):
                h.update(block)
    return h.hexdigest()


def _ranks_base(path: Path, source: str, pattern: str, specials: Mapping[str, int], sha: str | None = None) -> Base:
    """A ``.tiktoken`` base: its merges derived by tiktoken's rule (``tiktoken_merge_list``);
    ``sha``: the file's SHA-256 when it is known (an OpenAI file, checked as it was found)."""
    from ..native import core
    from .openai_ranks import read_bytes, read_ranks

    sha = sha or hashlib.sha256(read_bytes(path)).hexdigest()
    ranks = read_ranks(path)  # native (``_core.TiktokenRanks``), or the strict reader naming a bad line
    vocab = ranks.vocab()
    if core is None:  # pragma: no cover - a source tree without the built extension
        return _checked("tiktoken", source, sha, pattern, vocab, tiktoken_merge_list(ranks, vocab, path),
                        dict(specials))
    return _native_ranks_base(ranks, vocab, path, source, sha, pattern, dict(specials))


def _native_ranks_base(ranks, vocab: dict[int, bytes], path: Path, source: str, sha: str, pattern: str,
                       specials: dict[str, int]) -> Base:
    """``_ranks_base`` with the merges made natively in the store's ids (``_core.tiktoken_base_merges``).
    What ``_checked`` would refuse is refused the same (the native reader already refuses a repeated
    token or rank and a missing byte; each merge joins two tokens ranked below the one it makes, by
    construction): a token tiktoken's rule does not reach, ids with holes, empty tokens, colliding
    special tokens. Why: the same through the merges' bytes in Python took ~1 CPU s for o200k_base."""
    import array
    import sys

    from ..native import core
    from ..store.base_rows import Triples

    raw_merges, raw_model, unreached = core.tiktoken_base_merges(ranks, len(specials))
    if unreached >= 0:
        raise BaseError(f"{path}: token {vocab[unreached]!r} (rank {unreached}) is not built from two lower-ranked "
                        "tokens by tiktoken's rule, so no merge list encodes like these ranks")
    model = array.array("I", raw_model)
    if sys.byteorder == "big":  # pragma: no cover
        model.byteswap()
    if not all(vocab.values()):
        raise BaseError(f"{source}: token {next(i for i, t in vocab.items() if not t)} is empty")
    _check_specials(specials, vocab, _RanksIds(ranks), source)
    top = ranks.max_id
    if len(vocab) + len({i for i in specials.values() if i <= top}) != top + 1:  # ids distinct: checked
        hole = min(set(range(top + 1)) - set(vocab) - set(specials.values()))
        raise BaseError(f"{source}: its token ids have holes (no token has id {hole}, below its largest "
                        f"{top}); only special tokens may sit above them with ids left unused")
    n = len(specials)
    tb = [vocab[r] for r in model]  # store id n + i -> bytes
    store_merges = Triples.of(raw_merges)  # the packed bytes kept: the store's digest and the engine's log
    ordered = dict(sorted(specials.items(), key=lambda kv: kv[1]))
    return Base("tiktoken", source, sha, pattern, ordered, tuple(model[:256]), _MergeBytes(tb, store_merges, n),
                model[256:].tolist(), store_merges, tb[256:])


class _MergeBytes(Sequence):
    """A ranks base's ``merges`` ``[(left bytes, right bytes)]``, read from its merges in the store's
    ids and the tokens' bytes when asked for. Why: a run extending the base never asks (it writes
    and replays the ids); building 200 K pairs of bytes for o200k_base cost ~0.1 CPU s of its load."""

    def __init__(self, tb: list[bytes], store_merges: list[tuple[int, int, int]], n_specials: int):
        self._tb, self._merges, self._n = tb, store_merges, n_specials

    def __len__(self) -> int:
        return len(self._merges)

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        a, b, _ = self._merges[k]
        return self._tb[a - self._n], self._tb[b - self._n]

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and len(other) == len(self) and list(self) == list(other)

    __hash__ = None  # mutable-list-like: unhashable, as the list it stands for


class _RanksIds(Mapping):
    """``{bytes: rank}`` of a ``_core.TiktokenRanks``, looked up natively (``_check_specials``' few lookups)."""

    def __init__(self, ranks):
        self._ranks = ranks

    def __getitem__(self, token: bytes) -> int:
        rank = self._ranks.get(token)
        if rank is None:
            raise KeyError(token)
        return rank

    def __iter__(self):  # pragma: no cover - not needed by the lookups
        return iter(self._ranks.vocab().values())

    def __len__(self) -> int:  # pragma: no cover
        return len(self._ranks.vocab())


def tiktoken_merge_list(ranks, vocab: Mapping[int, bytes], path: Path | str) -> list[tuple[bytes, bytes]]:
    """One merge per token longer than a byte, in rank order: the two parts tiktoken's rule reaches
    on the token's bytes with the ranks below its own (``_core.tiktoken_merge_splits``, native: the
    Python loop took 3-4 CPU s on o200k_base). ``ranks``: a ``_core.TiktokenRanks``; ``vocab`` its
    ``{rank: bytes}``. BaseError for a token the rule cannot reach so."""
    import array
    import sys

    from ..native import core

    if core is None:  # pragma: no cover - a source tree without the built extension
        return _tiktoken_merge_list(ranks.mergeable(), Path(path))
    splits = array.array("I", core.tiktoken_merge_splits(ranks))
    if sys.byteorder == "big":  # pragma: no cover
        splits.byteswap()  # the native side writes little-endian
    out: list[tuple[bytes, bytes]] = []
    for k in range(0, len(splits), 2):
        token, cut = vocab[splits[k]], splits[k + 1]
        if cut == 0:
            raise BaseError(f"{path}: token {token!r} (rank {splits[k]}) is not built from two lower-ranked tokens by "
                            "tiktoken's rule, so no merge list encodes like these ranks")
        out.append((token[:cut], token[cut:]))
    return out


def _tiktoken_merge_list(ranks: Mapping[bytes, int], path: Path) -> list[tuple[bytes, bytes]]:
    """``tiktoken_merge_list`` in Python, the specification the native one is tested against."""
    out: list[tuple[bytes, bytes]] = []
    get = ranks.get
    for token, r in sorted(((t, r) for t, r in ranks.items() if len(t) > 1), key=lambda kv: kv[1]):
        parts = [token[i:i + 1] for i in range(len(token))]
        while len(parts) > 2:
            # tiktoken's step: the leftmost adjacent pair whose concatenation ranks lowest (below r)
            best, at = r, -1
            for i in range(len(parts) - 1):
                q = get(parts[i] + parts[i + 1])
                if q is not None and q < best:
                    best, at = q, i
            if at < 0:
                break
            parts[at:at + 2] = [parts[at] + parts[at + 1]]
        if len(parts) != 2:
            raise BaseError(f"{path}: token {token!r} (rank {r}) is not built from two lower-ranked tokens by "
                            "tiktoken's rule, so no merge list encodes like these ranks")
        out.append((parts[0], parts[1]))
    return out


def _hf_pattern(written: str) -> str:
    """The pattern a ``tokenizer.json``'s regex is: a named pattern written as such or as bpe_store's
    exports rewrite it for Oniguruma (``portable_pattern``), else the regex itself."""
    from ..text.pretokenize import PATTERNS, resolve_pattern
    from .portable_pattern import PatternTranslationError, portable_pattern

    regex = resolve_pattern(written)
    for named in dict.fromkeys(PATTERNS.values()):
        try:
            if regex == named or regex == portable_pattern(named):
                return named
        except PatternTranslationError:
            continue
    return regex


def _hf_base(path: Path) -> Base:
    hf = read_hf_bpe(path)
    base = _checked("hf", str(path), _sha256(path), _hf_pattern(hf.pattern), hf.vocab, hf.merges, hf.specials)
    if hf.ignore_merges:
        _check_rebuilds(base, path)
    return base


def _gpt2_base(d: Path) -> Base:
    vpath, mpath = d / "vocab.json", d / "merges.txt"
    vocab, merges = read_gpt2(vpath, mpath)
    made = {a + b for a, b in merges}
    last_made = max((i for i, t in vocab.items() if t in made), default=-1)
    # GPT-2's files list special tokens (<|endoftext|>) in vocab.json: tokens no merge makes, after
    # all the merged ones or written <...>; any other token no merge makes is an error
    specials = {}
    for i, t in sorted(vocab.items()):
        if len(t) > 1 and t not in made:
            text = t.decode("utf-8", "replace")
            if i < last_made and not (text.startswith("<") and text.endswith(">")) or "\ufffd" in text:
                raise BaseError(f"{vpath}: token {t!r} (id {i}) is neither a byte, a merge's result nor a "
                                "special token: the merges do not rebuild it")
            specials[text] = i
    for i in specials.values():
        del vocab[i]
    from ..text.pretokenize import resolve_pattern

    return _checked("gpt2", str(d), _sha256(vpath, mpath), resolve_pattern("gpt2"), vocab, merges, specials)


def _store_base(path: Path, at: int | None, source: str) -> Base:
    """Another store as a base, at its last merge or at merge ``at``: its model ids (a store that
    itself extends a base keeps that base's ids)."""
    from ..store.merge_log import read_result
    from ..store.result import store_tokenizer

    # natively where it can (checked as result_check checks): a 16 K store's rows through the
    # driver and checked in Python were ~0.04 CPU s more of extending it
    vocab, merges, specials, pattern = store_tokenizer(path, at, read_result)
    h = hashlib.sha256()
    for i in sorted(vocab):
        h.update(b"%d %s\n" % (i, vocab[i].hex().encode()))
    for a, b in merges:
        h.update(b"%s %s\n" % (a.hex().encode(), b.hex().encode()))
    ids = {b: i for i, b in vocab.items()}
    spec = {s: ids.pop(s.encode("utf-8")) for s in specials}
    plain = {i: b for b, i in ids.items()}
    return _checked("store", source, h.hexdigest(), pattern, plain, merges, spec)


def _checked(kind: str, source: str, sha: str, pattern: str, vocab: dict[int, bytes],
             merges: Sequence[tuple[bytes, bytes]], specials: dict[str, int]) -> Base:
    """The ``Base`` of ``vocab`` ``{id: bytes}`` (no special tokens), ``merges`` and ``specials``
    ``{text: id}``, refused (BaseError) unless its merges rebuild exactly its tokens, in order."""
    id_of = _token_ids(vocab, source)
    _check_specials(specials, vocab, id_of, source)
    taken = set(vocab) | set(specials.values())
    if len(taken & set(range(max(vocab) + 1))) != max(vocab) + 1:
        hole = next(i for i in range(max(vocab)) if i not in taken)
        raise BaseError(f"{source}: its token ids have holes (no token has id {hole}, below its largest "
                        f"{max(vocab)}); only special tokens may sit above them with ids left unused")
    made: set[bytes] = {bytes([b]) for b in range(256)}
    merge_ids: list[int] = []
    for k, (a, b) in enumerate(merges):
        ab = a + b
        if a not in made or b not in made:
            missing = a if a not in made else b
            why = "not in the vocabulary" if missing not in id_of else "made only by a later merge"
            raise BaseError(f"{source}: merge {k} ({a!r}, {b!r}) uses {missing!r}, {why}")
        if ab not in id_of:
            raise BaseError(f"{source}: merge {k} ({a!r}, {b!r}) makes {ab!r}, which is not in the vocabulary")
        if ab in made:
            raise BaseError(f"{source}: merge {k} ({a!r}, {b!r}) makes {ab!r} a second time")
        made.add(ab)
        merge_ids.append(id_of[ab])
    if len(made) != len(vocab):
        t = next(t for t in id_of if t not in made)
        raise BaseError(f"{source}: token {id_of[t]} ({t!r}) is neither a byte nor made by a merge: the merges "
                        "do not rebuild the vocabulary")
    ordered = dict(sorted(specials.items(), key=lambda kv: kv[1]))
    return Base(kind, source, sha, pattern, ordered, tuple(id_of[bytes([b])] for b in range(256)),
                list(merges), merge_ids)


def _token_ids(vocab: dict[int, bytes], source: str) -> dict[bytes, int]:
    """``{bytes: id}``; BaseError for two ids of the same bytes or a missing single byte."""
    id_of: dict[bytes, int] = {}
    for i, t in sorted(vocab.items()):
        if not t:
            raise BaseError(f"{source}: token {i} is empty")
        if t in id_of:
            raise BaseError(f"{source}: ids {id_of[t]} and {i} both hold {t!r}")
        id_of[t] = i
    missing = [b for b in range(256) if bytes([b]) not in id_of]
    if missing:
        raise BaseError(f"{source}: {len(missing)} single byte(s) have no token (first: {missing[0]:#04x}); "
                        "byte-level BPE needs all 256")
    return id_of


def _check_specials(specials: Mapping[str, int], vocab: Mapping[int, bytes], id_of: Mapping[bytes, int],
                    source: str) -> None:
    """BaseError for special tokens that collide: with a token's id or bytes, or with each other's id."""
    owner: dict[int, str] = {}
    for text, i in specials.items():
        if not text:
            raise BaseError(f"{source}: a special token is empty")
        if i in vocab:
            raise BaseError(f"{source}: special token {text!r} has id {i}, which token {vocab[i]!r} has")
        if text.encode("utf-8") in id_of:
            raise BaseError(f"{source}: special token {text!r} is also token {id_of[text.encode('utf-8')]}")
        if i in owner:
            raise BaseError(f"{source}: special tokens {owner[i]!r} and {text!r} both have id {i}")
        owner[i] = text


def _check_rebuilds(base: Base, path: Path) -> None:
    """BaseError unless merge order rebuilds every token from its bytes (BPE(t) == [t]): the
    condition under which a "a pre-token that is a token is that token" rule changes nothing."""
    rank = {m: k for k, m in enumerate(base.merges)}
    for a, b in base.merges:
        t = a + b
        parts = [t[i:i + 1] for i in range(len(t))]
        while len(parts) > 1:
            ranked = [(rank.get((x, y)), i) for i, (x, y) in enumerate(zip(parts, parts[1:]))]
            ranked = [ri for ri in ranked if ri[0] is not None]
            if not ranked:
                break
            _, i = min(ranked)
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        if parts != [t]:
            raise BaseError(f"{path}: ignore_merges is set and merge order does not rebuild {t!r} from its "
                            "bytes, so merges alone would encode differently from this tokenizer")
