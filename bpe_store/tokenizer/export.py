"""Exports: a store's tokenizer in the formats other loaders read (GPT-2's files: ``gpt2_files``).

Three formats, each written only after checking its loader would read it back exactly:

* ``hf``: HuggingFace ``tokenizer.json`` (full form: BPE model with merges as pairs, a Split
  pre-tokenizer holding the store's pattern rewritten for Oniguruma (``portable_pattern``) and
  keeping only its matches, then ByteLevel; specials in ``added_tokens``), loadable by
  ``tokenizers.Tokenizer.from_file``.
* ``gpt2``: ``vocab.json`` + ``merges.txt`` (``#version: 0.2`` first line), tokens written in
  GPT-2's byte-to-unicode alphabet; GPT-2's pattern only (the format cannot hold another).

Both also get ``tokenizer_config.json`` + ``special_tokens_map.json``, so that
``transformers.AutoTokenizer.from_pretrained(dir)`` loads them with ``eos_token`` (and
``bos_token``/``pad_token`` if named) and ``model_max_length`` (``LoaderConfig``).
* ``tiktoken``: ``tokenizer.tiktoken`` (``base64(token) rank`` per line) + ``tiktoken.json``
  holding the pattern (``pat_str``: rewritten for fancy-regex; ``pattern``: the store's, for
  people) and special tokens; ``load_tiktoken`` builds the ``tiktoken.Encoding``.

What a loader would reject or misread, the export refuses: two ids holding the same bytes (the
loaders key tokens by bytes), a missing single byte, a merged token whose id does not come
after both of its parts (tiktoken ranks must follow merge order); for hf and tiktoken a
pattern that cannot be rewritten with the same meaning for their regex engines; for tiktoken a
special token that is a prefix of another (its special matching does not prefer the longest) and
a token that BPE does not build from its own bytes (``check_tiktoken_merges``: tiktoken merges
by the rank of a pair's concatenation, bpe_store by the rank of the merge pair).
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from ..errors import InputError
from ..formats.gpt2_files import to_gpt2_str
from ..formats.portable_pattern import PatternTranslationError, portable_pattern
from ..formats.tiktoken_files import read_tiktoken_ranks
from ..text.pretokenize import describe_pattern, is_gpt2
from ..text.superword_split import STAGE2_PATTERN
from .outfiles import check_export_target, export_dir

#: Why a superword store (SuperBPE's stage 2, docs/superword.md) is not written for tiktoken.
SUPERWORD_TIKTOKEN = (
    "tiktoken cannot express a superword store: its pieces are stage 2's, whole phrases up to a line long, "
    "and tiktoken takes a piece whole when its bytes are a token and otherwise joins the lowest-ranked pair "
    "by scanning every pair again after each join (quadratic in the piece); the superword tokenizer is "
    "HF's (as the authors release it): use --format hf")
#: ``export --pattern-form``: the pattern rewritten for the loaders (exact), or as the store holds it
PATTERN_FORMS = ("portable", "verbatim")
GPT2_MERGES_HEADER = "#version: 0.2"


class ExportError(InputError):
    """The tokenizer cannot be written in a format without its loader misreading it (exit 2,
    like any bad parameter: another format, or another vocab size, may be written)."""


@dataclass
class Exportable:
    """A checked tokenizer ready to write: ``vocab`` ``{id: bytes}`` in id order, ``merges`` in
    rank order, ``specials`` ``{text: id}``, and the pre-tokenization ``pattern``."""

    vocab: dict[int, bytes]
    merges: list[tuple[bytes, bytes]]
    specials: dict[str, int]
    pattern: str

    #: "portable" (the pattern rewritten so every loader splits as bpe_store: exact) or "verbatim"
    #: (the store's own pattern, GPT-2's as tokenizers' plain ByteLevel: what fast encoders recognise)
    pattern_form: str = "portable"

    def specials_after(self) -> Exportable:
        """The same tokenizer renumbered as tiktoken, minbpe and nanochat number theirs: the bytes and
        merged tokens first, from id 0 in their order, then the special tokens. Dense ranks, which
        gigatoken and fastokens require; every id differs from the store's by the number of specials
        before it."""
        special_ids = set(self.specials.values())
        plain = [i for i in self.vocab if i not in special_ids]
        new = {old: k for k, old in enumerate(plain)}
        specials = {s: len(plain) + k for k, s in enumerate(self.specials)}
        vocab = {new[i]: self.vocab[i] for i in plain} | {i: s.encode("utf-8") for s, i in specials.items()}
        return Exportable(vocab, self.merges, specials, self.pattern, self.pattern_form)

    @cached_property
    def loader_pattern(self) -> str:
        """The pattern as written for tokenizers' Oniguruma and tiktoken's fancy-regex: the same
        splits as bpe_store's ``regex`` (``portable_pattern``), or ExportError saying why not;
        ``pattern_form`` "verbatim": the store's own."""
        if self.pattern_form == "verbatim":
            return self.pattern
        try:
            return portable_pattern(self.pattern)
        except PatternTranslationError as exc:
            raise ExportError(f"the pattern {describe_pattern(self.pattern)} cannot be written so that "
                              f"tokenizers (Oniguruma) and tiktoken (fancy-regex) split text as bpe_store "
                              f"does: {exc}") from None


def check_exportable(vocab: dict[int, bytes], merges: Sequence[tuple[bytes, bytes]],
                     special_tokens: Sequence[str], pattern: str) -> Exportable:
    """Refuse what a loader would reject or misread; return the checked tokenizer."""
    seen: dict[bytes, int] = {}
    for i in sorted(vocab):
        b = vocab[i]
        if b in seen:
            raise ExportError(f"ids {seen[b]} and {i} both hold {b!r}; the formats map bytes to one id, "
                              "so loaders would misread it")
        seen[b] = i
    missing = [b for b in range(256) if bytes([b]) not in seen]
    if missing:
        raise ExportError(f"the vocabulary lacks the single byte {missing[0]:#04x}; loaders need all 256")
    specials: dict[str, int] = {}
    for s in special_tokens:
        sid = seen.get(s.encode("utf-8"))
        if sid is None:
            raise ExportError(f"special token {s!r} is not in the vocabulary")
        specials[s] = sid
    special_ids = set(specials.values())
    prev = -1
    for rank, (a, b) in enumerate(merges):
        ia, ib, iab = seen.get(a), seen.get(b), seen.get(a + b)
        if ia is None or ib is None or iab is None:
            raise ExportError(f"merge {rank} ({a!r}, {b!r}) uses bytes that are not in the vocabulary")
        if not (iab > ia and iab > ib) or iab in special_ids:
            raise ExportError(f"merge {rank} ({a!r}, {b!r}) makes id {iab}, which does not come after its "
                              f"parts ({ia}, {ib}); ranks would be out of merge order")
        if iab <= prev:
            raise ExportError(f"merge {rank} ({a!r}, {b!r}) makes id {iab}, not after the previous merge's "
                              f"id {prev}; ranks would be out of merge order")
        prev = iab
    merged = {a + b for a, b in merges}
    for i, b in vocab.items():
        if len(b) > 1 and i not in special_ids and b not in merged:
            raise ExportError(f"id {i} ({b!r}) is neither a byte, a special token nor the result of a merge")
    return Exportable(dict(sorted(vocab.items())), list(merges), specials, pattern)


def hf_json(tok: Exportable) -> dict:
    """The full ``tokenizer.json`` document for HuggingFace ``tokenizers``."""
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    # Why Split even for GPT-2's pattern: ByteLevel's built-in regex is Oniguruma's \p{L} and
    # \p{N}, which lack the letters and digits of newer Unicode versions that `regex` knows.
    # "Removed" + invert keeps the matches and drops the text between them, as `regex.findall`
    # does (a pattern that does not cover every character drops the rest in bpe_store too).
    pre = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": tok.loader_pattern}, "behavior": "Removed", "invert": True},
        {**byte_level, "use_regex": False},
    ]}
    if tok.pattern_form == "verbatim" and is_gpt2(tok.pattern):
        pre = byte_level  # GPT-2's own layout, which every fast encoder recognises
    vocab = {to_gpt2_str(b): i for i, b in tok.vocab.items()}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for s, i in sorted(tok.specials.items(), key=lambda kv: kv[1])
        ],
        "normalizer": None,
        "pre_tokenizer": pre,
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
            # ignore_merges would take a whole pre-token from the vocab before merging: not BPE by rank
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [[to_gpt2_str(a), to_gpt2_str(b)] for a, b in tok.merges],
        },
    }


#: ``model_max_length`` written for transformers when none is given: GPT-2's context (and
#: nanoGPT's block size). Encoding longer texts works; transformers warns past it.
DEFAULT_MODEL_MAX_LENGTH = 1024


@dataclass
class LoaderConfig:
    """What ``transformers.AutoTokenizer`` reads beside the vocabulary (``tokenizer_config.json``):
    which special tokens are end/beginning of sequence and padding, and the model's longest input."""

    eos: str | None = None
    bos: str | None = None
    pad: str | None = None
    model_max_length: int = DEFAULT_MODEL_MAX_LENGTH


FIRST_SPECIAL = "first special"  # the default of ``eos``: the store's first special token, if any


def loader_config(specials: Sequence[str], *, eos: str | None = FIRST_SPECIAL, bos: str | None = None,
                  pad: str | None = None, model_max_length: int | None = None) -> LoaderConfig:
    """Check the roles name special tokens of the tokenizer; ``eos`` defaults to the first special."""
    if eos is FIRST_SPECIAL:
        eos = specials[0] if specials else None
    for flag, name in (("--eos", eos), ("--bos", bos), ("--pad", pad)):
        if name is not None and name not in specials:
            raise ExportError(f"{flag} {name!r} is not one of the store's special tokens "
                              f"({', '.join(map(repr, specials)) or 'it has none'})")
    n = DEFAULT_MODEL_MAX_LENGTH if model_max_length is None else model_max_length
    if type(n) is not int or n < 1:
        raise ExportError(f"--model-max-length must be a positive integer, not {n!r}")
    return LoaderConfig(eos, bos, pad, n)


def transformers_config(tok: Exportable, cfg: LoaderConfig, tokenizer_class: str) -> dict:
    """``tokenizer_config.json`` for ``AutoTokenizer.from_pretrained(dir)``: the class to build,
    the special tokens' roles (the others as ``additional_special_tokens``), no prefix space,
    no clean-up of spaces (decode must give the text back exactly)."""
    roles = {"bos_token": cfg.bos, "eos_token": cfg.eos, "unk_token": None, "pad_token": cfg.pad}
    named = {v for v in roles.values() if v is not None}
    return {
        "tokenizer_class": tokenizer_class,
        "model_max_length": cfg.model_max_length,
        **roles,
        "additional_special_tokens": [s for s in tok.specials if s not in named],
        "add_prefix_space": False,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
    }


def _write_json(path: Path, doc: object, **kw) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, **kw)
        f.write("\n")
    return path


def _write_transformers_files(tok: Exportable, out: Path, cfg: LoaderConfig, tokenizer_class: str) -> list[Path]:
    doc = transformers_config(tok, cfg, tokenizer_class)
    roles = {k: v for k, v in doc.items() if k.endswith("_token") and v is not None}
    return [_write_json(out / "tokenizer_config.json", doc, indent=1),
            _write_json(out / "special_tokens_map.json",
                        {**roles, "additional_special_tokens": doc["additional_special_tokens"]}, indent=1)]


def write_hf(tok: Exportable, out: Path, cfg: LoaderConfig | None = None) -> list[Path]:
    """``tokenizer.json`` plus the transformers files (``AutoTokenizer`` builds a
    ``PreTrainedTokenizerFast``)."""
    path = _write_json(out / "tokenizer.json", hf_json(tok), indent=1)
    return [path, *_write_transformers_files(tok, out, cfg or LoaderConfig(), "PreTrainedTokenizerFast")]


def write_gpt2(tok: Exportable, out: Path, cfg: LoaderConfig | None = None) -> list[Path]:
    """``vocab.json`` + ``merges.txt`` plus the transformers files (``AutoTokenizer`` builds
    GPT-2's tokenizer from them).

    Their loaders split with GPT-2's pattern in their own engine: ``Tokenizer.from_files`` (and
    any loader on ``regex``) gives bpe_store's ids; tokenizers' ByteLevel (transformers'
    ``GPT2Tokenizer``) reads ``\\p{L}``/``\\p{N}`` by Oniguruma's older Unicode tables, so text
    holding letters or digits that only newer Unicode versions assign may split differently.
    The format has no place to say otherwise; ``hf`` is exact."""
    if not is_gpt2(tok.pattern):
        raise ExportError("the gpt2 format has no place for a pre-tokenization pattern, and its loaders "
                          "use GPT-2's; this store has another: export --format hf or tiktoken")
    vpath, mpath = out / "vocab.json", out / "merges.txt"
    _write_json(vpath, {to_gpt2_str(b): i for i, b in tok.vocab.items()})
    with open(mpath, "w", encoding="utf-8", newline="\n") as f:
        f.write(GPT2_MERGES_HEADER + "\n")
        for a, b in tok.merges:
            f.write(f"{to_gpt2_str(a)} {to_gpt2_str(b)}\n")
    return [vpath, mpath, *_write_transformers_files(tok, out, cfg or LoaderConfig(), "GPT2Tokenizer")]


def tiktoken_ranks(tok: Exportable) -> dict[bytes, int]:
    """``{token bytes: rank}`` for tiktoken: every non-special token, its id as rank."""
    special_ids = set(tok.specials.values())
    return {b: i for i, b in tok.vocab.items() if i not in special_ids}


def check_tiktoken_specials(specials: Sequence[str]) -> None:
    """tiktoken matches special tokens with an alternation in hash-map order, so where one is a
    prefix of another it may take the shorter one: refuse such a set rather than misencode."""
    for a in specials:
        for b in specials:
            if a != b and b.startswith(a):
                raise ExportError(f"special token {a!r} is a prefix of {b!r}; tiktoken may match the "
                                  "shorter one, so it would misread this tokenizer (hf and gpt2 exports "
                                  "are not affected)")


def check_tiktoken_merges(tok: Exportable) -> None:
    """Refuse a vocabulary that tiktoken would encode differently from bpe_store's BPE.

    tiktoken merges, in a pre-token, the adjacent pair whose *concatenation* has the lowest rank,
    and takes a pre-token that is itself a token whole; bpe_store merges the adjacent pair that
    is a *merge* with the lowest rank. They agree on every text when every token t is what BPE
    builds from t's own bytes (``BPE(t) == [t]``), which this checks:

    Suppose tiktoken and BPE first differ on some pre-token: tiktoken joins adjacent tokens
    x, y into t = x + y although (x, y) is not t's merge. Until then both made the same merges,
    in the same order (ranks are ids, and ids follow merge order: ``check_exportable``; a new
    token's pairs rank after it, so tiktoken's one-at-a-time leftmost joins of equal rank are
    BPE's "every occurrence, left to right"). No
    merge crossed the outer edges of x and y, so the merges inside them are those BPE makes on
    t's bytes alone (a merge inside a span depends only on the span while its edges stand). So
    BPE on t's bytes reaches [x, y], and stops there, since (x, y) is no merge: BPE(t) != [t].
    A pre-token that is a token u is taken whole by tiktoken and is BPE(u) == [u] by BPE. So if
    every token passes, the two agree; where one fails, they differ on the text t itself
    whenever the pattern can make t one pre-token (a token no pre-token can equal is refused
    without such a text; a trained store has none to refuse).

    A trained store always passes (a merge (a, b) was made inside some word where a and b stood
    side by side; by the same span argument BPE builds a + b from its own bytes); the check
    guards stores whose merges were made otherwise.
    """
    from .tokenizer import Tokenizer

    bpe = Tokenizer(tok.vocab, tok.merges, list(tok.specials), pattern=tok.pattern, native=False)
    special_ids = set(tok.specials.values())
    for i, t in tok.vocab.items():
        if len(t) > 1 and i not in special_ids:
            got = bpe._bpe(t)
            if got != [i]:
                parts = " + ".join(repr(tok.vocab[j]) for j in got)
                raise ExportError(f"token {i} ({t!r}) is not what BPE builds from its bytes ({parts}); tiktoken "
                                  "merges by the rank of a pair's concatenation and would encode such text "
                                  "differently: export --format hf or gpt2")


def write_tiktoken(tok: Exportable, out: Path, cfg: LoaderConfig | None = None, name: str = "bpe_store"
                   ) -> list[Path]:
    rpath, jpath = out / "tokenizer.tiktoken", out / "tiktoken.json"
    with open(rpath, "w", encoding="ascii", newline="\n") as f:
        for b, r in sorted(tiktoken_ranks(tok).items(), key=lambda kv: kv[1]):
            f.write(f"{base64.b64encode(b).decode('ascii')} {r}\n")
    with open(jpath, "w", encoding="utf-8") as f:
        # pat_str is what tiktoken compiles (rewritten for fancy-regex); pattern, what people read
        json.dump({"format": "bpe_store tiktoken v1", "name": name, "pat_str": tok.loader_pattern,
                   "pattern": tok.pattern,
                   "special_tokens": tok.specials, "ranks_file": rpath.name,
                   "n_vocab": len(tok.vocab)}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    return [rpath, jpath]


def load_tiktoken(out_dir: str | os.PathLike):
    """Build the ``tiktoken.Encoding`` of a tiktoken export directory (tiktoken must be installed).

    The ranks are read with ``read_tiktoken_ranks``, not tiktoken's ``load_tiktoken_bpe``: that one
    caches a file by its path (in ``$TMPDIR/data-gym-cache``), so a directory exported again (another
    store, ``--force``) would load the first export's ranks."""
    import tiktoken

    d = Path(out_dir)
    with open(d / "tiktoken.json", encoding="utf-8") as f:
        meta = json.load(f)
    ranks = read_tiktoken_ranks(d / meta["ranks_file"])
    return tiktoken.Encoding(meta["name"], pat_str=meta["pat_str"], mergeable_ranks=ranks,
                             special_tokens=meta["special_tokens"])


@dataclass(frozen=True)
class Exporter:
    """One export format, the one entry ``export_store``, ``FORMATS`` and the CLI's ``--format``
    read: ``write`` writes its files into a directory; ``transformers``: it also writes
    transformers' files (``tokenizer_config.json``), so ``--eos``, ``--bos``, ``--pad`` and
    ``--model-max-length`` apply; ``compiles_pattern``: its loader compiles the pattern with another
    regex engine, so the pattern is rewritten (or refused) before anything is written;
    ``refuse_pattern``: why a store of this pattern cannot be written, or None (asked first);
    ``check``: its own refusals of what would be written (the tokenizer, its special tokens)."""

    name: str
    write: Callable[[Exportable, Path, LoaderConfig | None], list[Path]]
    transformers: bool
    compiles_pattern: bool
    refuse_pattern: Callable[[str], str | None] | None = None
    check: Callable[[Exportable, Sequence[str]], None] | None = None


def _tiktoken_checks(tok: Exportable, specials: Sequence[str]) -> None:
    check_tiktoken_specials(specials)
    check_tiktoken_merges(tok)


#: ``{name: Exporter}``, in the order ``--help`` lists them.
EXPORTERS: dict[str, Exporter] = {e.name: e for e in (
    Exporter("hf", write_hf, transformers=True, compiles_pattern=True),
    Exporter("gpt2", write_gpt2, transformers=True, compiles_pattern=False),
    Exporter("tiktoken", write_tiktoken, transformers=False, compiles_pattern=True,
             refuse_pattern=lambda pattern: SUPERWORD_TIKTOKEN if pattern == STAGE2_PATTERN else None,
             check=_tiktoken_checks),
)}
FORMATS = tuple(EXPORTERS)


def export_store(db_path: str | os.PathLike, fmt: str, out_dir: str | os.PathLike, *,
                 vocab_size: int | None = None, force: bool = False, eos: str | None = FIRST_SPECIAL,
                 bos: str | None = None, pad: str | None = None,
                 model_max_length: int | None = None, specials_last: bool = False,
                 pattern_form: str = "portable") -> list[Path]:
    """Write the tokenizer of a store (a prefix of ``vocab_size``) to ``out_dir`` in ``fmt``.

    The files are written in a staging directory and moved into place (``outfiles.export_dir``):
    ``force`` replaces only the files this format writes in an existing ``out_dir``; an
    ``out_dir`` that is a file, the store or a directory holding it is refused (InputError).
    ``hf`` and ``gpt2`` also get ``tokenizer_config.json`` for ``AutoTokenizer``: ``eos``
    (default: the first special token), ``bos`` and ``pad`` name special tokens;
    ``model_max_length`` defaults to ``DEFAULT_MODEL_MAX_LENGTH``. ``specials_last`` numbers the
    special tokens after the merges (``Exportable.specials_after``: the ids are not the store's);
    ``pattern_form="verbatim"`` writes the store's pattern as it is (what gigatoken, snaptokens and
    quicktok recognise), which tokenizers and tiktoken may split unlike bpe_store on some texts
    (docs/tokenizer.md says where).
    """
    from .tokenizer import load_store

    exporter = EXPORTERS.get(fmt)
    if exporter is None:
        raise InputError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if not exporter.transformers and (eos is not FIRST_SPECIAL or bos or pad or model_max_length is not None):
        raise ExportError("--eos, --bos, --pad and --model-max-length are for transformers: use them "
                          f"with --format {' or '.join(e.name for e in EXPORTERS.values() if e.transformers)}")
    out = Path(out_dir)
    check_export_target(out, force, [Path(db_path)])  # before reading the store: fail fast
    vocab, merges, specials, pattern = load_store(db_path, vocab_size)
    refused = exporter.refuse_pattern and exporter.refuse_pattern(pattern)
    if refused:
        raise ExportError(refused)
    cfg = loader_config(specials, eos=eos, bos=bos, pad=pad, model_max_length=model_max_length)
    if pattern_form not in PATTERN_FORMS:
        raise InputError(f"unknown pattern form {pattern_form!r}; choose one of {', '.join(PATTERN_FORMS)}")
    tok = check_exportable(vocab, merges, specials, pattern)
    tok.pattern_form = pattern_form
    if specials_last:
        tok = tok.specials_after()
    if exporter.compiles_pattern:
        tok.loader_pattern  # noqa: B018 - translated (or refused) before anything is written
    if exporter.check is not None:
        exporter.check(tok, specials)
    with export_dir(out, force=force, keep=[Path(db_path)]) as staging:
        written = exporter.write(tok, staging, cfg)
    return [out / p.name for p in written]
