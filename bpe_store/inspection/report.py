"""The run report: one self-contained HTML page of plots and facts about a store (``bpe-store report``).

What it shows, and how each part is computed:

* **Compression of held-out text at every vocabulary size** (bytes per token, 256 + specials up
  to the store's size). One encoding gives every prefix of the merge log: the held-out text is
  encoded once at the full vocabulary, and each final token's count is pushed down its merge
  tree (token -> its left and right parts, in decreasing id order: O(vocab), not O(text)). A
  merge of rank ``r`` was applied exactly as often as its token occurs in these trees, and the
  token count at a prefix of ``k`` merges is the byte count minus the merges of rank below
  ``k``. Why this is exact: within a pre-token BPE applies merges in increasing rank (a pair
  made by merge ``r`` holds ``r``'s token, whose own merges all rank after ``r``), so the
  encoding at a prefix is the full encoding's merges cut at that rank. ~50 re-encodings with
  the native encoder would cost 50 encodings and give 50 points; this costs one and gives all.
* **Merge count against rank**: the ``merges`` table (count when merged), log-log.
* **Token length by script**: the learned tokens' lengths in bytes, stacked by script. Script is
  approximated from the Unicode name of the token's first letter (``LATIN``, ``CYRILLIC``,
  ``CJK`` -> Han, ...); tokens without letters are digits, whitespace, punctuation/symbols, or
  partial UTF-8 (bytes that do not decode on their own).
* **Compression by script, and beside other tokenizers**: each token of the held-out text's
  encoding is put in the class of the first character it starts that is not whitespace
  (``SCRIPT_CLASSES``: Latin, Cyrillic, CJK, other letters, digits, punctuation and symbols;
  whitespace when it holds nothing else), and each class's bytes are divided by its tokens
  (``bpe_store.inspection.compare``).
  ``--compare FILE`` encodes the same text with a ``.tiktoken`` ranks file (OpenAI's own, e.g.
  shipped by the ``bpe-openai`` package; its pattern from its name, or ``FILE=PATTERN``) or a byte-level
  ``tokenizer.json`` (through the ``tokenizers`` package), measured the same way.
* **Tokens to look at**: the longest learned tokens, the last 50 learned, the learned tokens that
  are partial UTF-8, and those the held-out text never uses.
* **Frequent words still split into many tokens**: the ``words`` table's current splits.
* **The run**: inputs, parameters, time per stage and checkpoint writes (``checkpoints``),
  sessions (``sessions``), the store's file size.

The held-out text defaults to a sample of the training inputs (``DEFAULT_SAMPLE_BYTES`` from
``SAMPLE_PLACES`` evenly spaced places, whole lines): in-sample, so its compression is a little
optimistic, which the page says; ``--held-out FILE`` gives a real held-out text.

Plots are drawn by matplotlib (the optional extra ``bpe-store[report]``) as SVG inlined in the
page, text kept as text: nothing is fetched when the page is viewed.
"""

from __future__ import annotations

import datetime as _dt
import os
import unicodedata
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._version import __version__
from ..errors import InputError
from . import display
from .compare import SCRIPT_CLASSES, by_script, byte_classes, compare_tokenizer, lengths_of
from .eval_report import eval_plot, eval_section, gather_evals
from .page import CSS, e, matplotlib_figure, svg, table

#: Default held-out sample: this many bytes of the training inputs ...
DEFAULT_SAMPLE_BYTES = 2 << 20
#: ... taken from this many evenly spaced places (whole lines).
SAMPLE_PLACES = 32
#: Vocabulary sizes listed in the compression table (those below the store's size).
TABLE_SIZES = (512, 1000, 2000, 4000, 8000, 16000, 32000, 50000, 64000, 100000, 128000, 200000)
#: Frequent split words listed, and the fewest tokens that counts as "many".
SPLIT_WORDS = 25
#: ... looked for among this many most frequent words at most (each is split in Python).
SPLIT_SCAN = 20_000
MANY_TOKENS = 3

_SCRIPT_NAMES = {"CJK": "Han", "HANGUL": "Hangul", "HIRAGANA": "Kana", "KATAKANA": "Kana"}

#: Rows of each token table, and of the unused tokens listed.
TOKEN_ROWS = 20
LAST_LEARNED = 50
UNUSED_ROWS = 100


# -- compression at every prefix ------------------------------------------------------------


def tokens_per_prefix(counts: Any, lefts: list[int], rights: list[int], n_special: int) -> Any:
    """Token counts of a text at every prefix of the merge log, from its full-vocabulary encoding.

    ``counts[t]``: how often token id ``t`` occurs in the full encoding (length = vocab size);
    ``lefts[r]``, ``rights[r]``: the parts of merge ``r`` (token id ``n_special + 256 + r``).
    Returns ``tokens`` with ``tokens[k]`` = the text's token count using the first ``k`` merges
    (``k`` = 0 .. len(lefts)); ``tokens[-1] == counts.sum()``.

    >>> import numpy as np
    >>> # merges: 0 = (a, b) -> 258, 1 = (258, 258) -> 259; the text "abab" encodes to [259]
    >>> a, b = 2 + 97, 2 + 98
    >>> c = np.zeros(260, dtype=np.int64); c[259] = 1
    >>> tokens_per_prefix(c, [a, 258], [b, 258], 2).tolist()
    [4, 2, 1]
    """
    import numpy as np

    c = np.asarray(counts, dtype=np.int64).copy()
    first = n_special + 256
    applied = np.zeros(len(lefts), dtype=np.int64)
    # Why decreasing ids: a token's parts have smaller ids, so each count is final when reached.
    for r in range(len(lefts) - 1, -1, -1):
        n = c[first + r]
        if n:
            applied[r] = n
            c[lefts[r]] += n
            c[rights[r]] += n
    total_at_zero = int(c[:first].sum())  # specials + single bytes, before any merge
    return np.concatenate(([total_at_zero], total_at_zero - np.cumsum(applied)))


def default_sample(paths: list[str], sample_bytes: int = DEFAULT_SAMPLE_BYTES,
                   places: int = SAMPLE_PLACES) -> str:
    """``sample_bytes`` of the files, from ``places`` evenly spaced offsets, cut to whole lines."""
    sizes = []
    for p in paths:
        try:
            sizes.append(os.path.getsize(p))
        except OSError:
            raise InputError(f"{p}: the store's input is gone, so no default held-out sample; "
                             "give one with --held-out FILE") from None
    total = sum(sizes)
    if total <= sample_bytes:
        return "".join(Path(p).read_bytes().decode("utf-8", "replace") for p in paths)
    piece = sample_bytes // places
    parts = []
    for i in range(places):
        at = (total - piece) * i // max(places - 1, 1)
        fi = 0
        while at >= sizes[fi]:
            at -= sizes[fi]
            fi += 1
        with open(paths[fi], "rb") as f:
            f.seek(at)
            data = f.read(piece)
        if at > 0:  # drop a partial first line
            nl = data.find(b"\n")
            data = data[nl + 1:] if nl >= 0 else b""
        nl = data.rfind(b"\n")
        parts.append(data[: nl + 1] if nl >= 0 else data)
    return "".join(p.decode("utf-8", "replace") for p in parts)


# -- scripts --------------------------------------------------------------------------------


def _decodes(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def script_of(token: bytes) -> str:
    """The script of a token, approximated from its first letter's Unicode name.

    >>> [script_of(t) for t in (b" the", "ение".encode(), "中国".encode(), b" 42", b"\\n\\n", b"\\xe4\\xb8")]
    ['Latin', 'Cyrillic', 'Han', 'digits', 'whitespace', 'partial UTF-8']
    """
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        return "partial UTF-8"
    for ch in text:
        if ch.isalpha():
            word = unicodedata.name(ch, "OTHER").split(" ")[0].split("-")[0]
            return _SCRIPT_NAMES.get(word, word.title())
    if any(ch.isdigit() for ch in text):
        return "digits"
    if text.isspace():
        return "whitespace"
    return "punctuation/symbols"


# -- tokens to look at ----------------------------------------------------------------------


def _token_rows(tids: Any, vocab: dict[int, tuple[bytes, str]], first: int, counts: Any,
                merge_counts: list[int]) -> list[dict[str, Any]]:
    return [{"id": int(t), "rank": int(t) - first, "bytes": vocab[int(t)][0], "n_bytes": len(vocab[int(t)][0]),
             "merge_count": merge_counts[int(t) - first], "held_out": int(counts[int(t)])} for t in tids]


# -- data -----------------------------------------------------------------------------------


def gather(db: str | os.PathLike, held_out: str | os.PathLike | None = None,
           sample_bytes: int = DEFAULT_SAMPLE_BYTES, threads: int = 0,
           compare: Sequence[str] = ()) -> dict[str, Any]:
    """Everything the page shows, as plain data (also the ``--json`` output); ``compare``: the
    ``--compare`` files (``compare_tokenizer``)."""
    import numpy as np

    from ..tokenizer.tokenizer import Tokenizer
    from .answers import reading, splitter, status

    st = status(db)
    with reading(db) as store:
        vocab = {i: (b, k) for i, b, k in store.load_vocab()}
        merges = store.load_merges()  # (rank, left, right, token, count)
        n_special = sum(1 for _, k in vocab.values() if k == "special")
        split_rows = _split_words(store, splitter(store))
        stages = store.checkpoint_stages()
    text, source = _held_out_text(held_out, st, sample_bytes)
    n_bytes = len(text.encode("utf-8"))
    tok = Tokenizer.from_store(db)
    ids = tok.encode_to_array(text, threads)
    counts = np.bincount(ids, minlength=len(vocab))
    tokens = tokens_per_prefix(counts, [m[1] for m in merges], [m[2] for m in merges], n_special)
    assert int(tokens[-1]) == len(ids)  # the push-down accounts for every token
    first = n_special + 256
    merge_counts = [m[4] for m in merges]
    return {
        "db": str(db), "status": st, "n_special": n_special, "first_merge_id": first,
        "held_out": {**source, "bytes": n_bytes, "tokens": int(len(ids))},
        "vocab_sizes": list(range(first, first + len(merges) + 1)),
        "tokens": tokens.tolist(),
        "bytes_per_token": (n_bytes / np.maximum(tokens, 1)).tolist(),
        "merge_counts": merge_counts,
        "lengths_by_script": _lengths_by_script(vocab, first),
        "compare": _compared(db, st, vocab, text, ids, compare, threads),
        "tokens_tables": _tokens_tables(vocab, first, counts, merge_counts),
        "split_words": [{"word": w, "count": c, "split": [vocab[t][0] for t in ids_]} for w, c, ids_ in split_rows],
        "stages": _stages(stages),
        "evals": gather_evals(db),
    }


def _split_words(store: Any, split: Any) -> list[tuple[bytes, int, list[int]]]:
    """The most frequent words (a word of fewer bytes cannot take MANY_TOKENS tokens) that take
    MANY_TOKENS tokens or more, split under every merge (a finished store keeps no words' tokens),
    up to SPLIT_WORDS of them: ``(word, count, token ids)``."""
    split_rows: list[tuple[bytes, int, list[int]]] = []
    for w, c in store.most_frequent_words(MANY_TOKENS, SPLIT_SCAN):
        ids_ = split(w)
        if len(ids_) >= MANY_TOKENS:
            split_rows.append((w, c, ids_))
            if len(split_rows) == SPLIT_WORDS:
                break
    return split_rows


def _held_out_text(held_out: str | os.PathLike | None, st: dict[str, Any], sample_bytes: int) -> tuple[str, dict]:
    """The text the page measures compression on, and what it is: ``held_out``, else a sample of
    the training inputs."""
    if held_out is not None:
        p = Path(held_out)
        if not p.is_file():
            raise InputError(f"{p}: no such file (--held-out)")
        text = p.read_bytes().decode("utf-8", "replace")
        source = {"kind": "file", "path": str(p)}
    else:
        text = default_sample([i["path"] for i in st["inputs"]], sample_bytes)
        source = {"kind": "sample of the training inputs", "places": SAMPLE_PLACES}
    if not text:
        raise InputError("the held-out text is empty")
    return text, source


def _compared(db: str | os.PathLike, st: dict[str, Any], vocab: dict[int, tuple[bytes, str]], text: str,
              ids: Any, compare: Sequence[str], threads: int) -> list[dict[str, Any]]:
    """Compression by script of the store's encoding ``ids`` of ``text``, then of each ``--compare``
    tokenizer's, on the same bytes."""
    n_bytes = len(text.encode("utf-8"))
    classes, starts = byte_classes(text)
    vlen = lengths_of({i: b for i, (b, _k) in vocab.items()})
    compared = [{"name": Path(db).name, "kind": "store", "path": str(db), "pattern": st["pattern_name"],
                 "vocab_size": len(vocab), "tokens": int(len(ids)),
                 "bytes_per_token": n_bytes / max(len(ids), 1), "by_script": by_script(classes, starts, vlen[ids])}]
    for spec in compare:
        other = compare_tokenizer(spec, text, threads)
        lengths = other.pop("lengths")
        n_ids = len(other.pop("ids"))
        compared.append({**other, "tokens": n_ids, "bytes_per_token": n_bytes / max(n_ids, 1),
                         "by_script": by_script(classes, starts, lengths)})
    return compared


def _tokens_tables(vocab: dict[int, tuple[bytes, str]], first: int, counts: Any,
                   merge_counts: list[int]) -> dict[str, Any]:
    """The learned tokens (ids ``first`` ..) to look at: the longest, the last learned, the partial
    UTF-8 ones and those the held-out text never uses (``counts``: its encoding's, per id)."""
    import numpy as np

    learned = np.arange(first, len(vocab))
    by_length = sorted(learned.tolist(), key=lambda t: (-len(vocab[t][0]), t))[:TOKEN_ROWS]
    partial = [t for t in learned.tolist() if not _decodes(vocab[t][0])]
    unused = learned[counts[first:] == 0]
    return {
        "longest": _token_rows(by_length, vocab, first, counts, merge_counts),
        "last_learned": _token_rows(learned[::-1][:LAST_LEARNED], vocab, first, counts, merge_counts),
        "partial_utf8": _token_rows(partial[:TOKEN_ROWS * 2], vocab, first, counts, merge_counts),
        "partial_utf8_total": len(partial),
        "unused": _token_rows(unused[:UNUSED_ROWS], vocab, first, counts, merge_counts),
        "unused_total": int(len(unused)),
    }


def _lengths_by_script(vocab: dict[int, tuple[bytes, str]], first: int) -> dict[str, dict[int, int]]:
    """``{script: {length in bytes: learned tokens}}`` (``script_of``)."""
    by_script_lengths: dict[str, Counter[int]] = {}
    for tid in range(first, len(vocab)):
        b = vocab[tid][0]
        by_script_lengths.setdefault(script_of(b), Counter())[len(b)] += 1
    return {s: dict(sorted(c.items())) for s, c in by_script_lengths.items()}


def _stages(stages: list[tuple[str, int, float, float]]) -> dict[str, Any]:
    """Training time and checkpoints per stage, from the store's checkpoints per phase (the final
    checkpoint has phase "done": it belongs to merging)."""
    stage: dict[str, dict[str, float]] = {}
    for ph, n, el, w in stages:
        s = stage.setdefault("counting" if ph == "counting" else "merging",
                             {"checkpoints": 0, "elapsed_s": 0.0, "write_s": 0.0})
        s["checkpoints"] += n
        s["elapsed_s"] = max(s["elapsed_s"], float(el or 0))
        s["write_s"] += float(w)
    counting_s = stage.get("counting", {}).get("elapsed_s", 0.0)
    total_s = max((s["elapsed_s"] for s in stage.values()), default=0.0)
    if "merging" in stage:
        stage["merging"]["elapsed_s"] = max(total_s - counting_s, 0.0)  # time in the phase, not the clock
    return {"counting_s": counting_s, "merging_s": max(total_s - counting_s, 0.0), "total_s": total_s,
            "by_phase": stage}


# -- plots ----------------------------------------------------------------------------------


def _mark_superwords(ax: Any, data: dict[str, Any], offset: int) -> None:
    """On a superword store's plot, a line where stage 2 begins (merge ``from``, at ``offset +
    from`` on the x axis): what follows it is the stage-2 curve (docs/superword.md)."""
    sw = data["status"].get("superword")
    if sw:
        ax.axvline(offset + sw["from"], color="#777", linestyle="--", linewidth=1,
                   label=f"stage 2 (superwords) from merge {sw['from']:,}")
        ax.legend(fontsize="small")


def _plots(data: dict[str, Any]) -> dict[str, str]:
    Figure = matplotlib_figure()
    out = {}

    fig = Figure(figsize=(8, 4.2))
    ax = fig.subplots()
    ax.plot(data["vocab_sizes"], data["bytes_per_token"], color="#1f6fb4", linewidth=1.6)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("vocabulary size")
    ax.set_ylabel("bytes per token (higher compresses more)")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(f"{data['held_out']['bytes']:,} bytes of held-out text")
    _mark_superwords(ax, data, data["first_merge_id"])
    out["compression"] = svg(fig)

    fig = Figure(figsize=(8, 4.2))
    ax = fig.subplots()
    counts = data["merge_counts"]
    ax.plot(range(len(counts)), counts, color="#c0392b", linewidth=1.2)
    ax.set_xscale("symlog", linthresh=1)  # log from rank 1 on; rank 0 (the first merge) has its place
    ax.set_yscale("log")
    ax.set_xlabel("merge rank (0 = first)")
    ax.set_ylabel("pair count when merged")
    ax.grid(True, which="both", alpha=0.3)
    _mark_superwords(ax, data, 0)
    out["merges"] = svg(fig)

    fig = Figure(figsize=(8, 4.2))
    ax = fig.subplots()
    by = data["lengths_by_script"]
    scripts = sorted(by, key=lambda s: -sum(by[s].values()))
    if len(scripts) > 8:  # the default color cycle has 10 colors: the rest as one "other"
        other: Counter[int] = Counter()
        for s in scripts[7:]:
            other.update(by[s])
        by = {**{s: by[s] for s in scripts[:7]}, "other": dict(other)}
        scripts = scripts[:7] + ["other"]
    cap = 16
    bottom = [0] * cap
    for s in scripts:
        per = by[s]
        ys = [per.get(n, 0) for n in range(1, cap)] + [sum(v for n, v in per.items() if n >= cap)]
        ax.bar(range(1, cap + 1), ys, bottom=bottom, label=s)
        bottom = [a + b for a, b in zip(bottom, ys)]
    ax.set_xticks(range(1, cap + 1), [str(n) for n in range(1, cap)] + [f"{cap}+"])
    ax.set_xlabel("token length in bytes")
    ax.set_ylabel("learned tokens")
    ax.legend(fontsize="small", ncols=2)
    out["lengths"] = svg(fig)
    out["evals"] = eval_plot(data["evals"]["curve"])
    return out


# -- the page -------------------------------------------------------------------------------

def _when(at: str | None) -> str:
    """``2026-11-23T11:47:53.521+00:00`` -> ``2026-11-23 11:47:53``."""
    return at[:19].replace("T", " ") if at else "-"


def _dur(s: float) -> str:
    from .progress import format_duration

    return f"{format_duration(s)} ({s:.1f} s)"


def render_html(data: dict[str, Any]) -> str:
    """The page for ``gather``'s data: a summary, then a section per question."""
    plots = _plots(data)
    st = data["status"]
    name = Path(data["db"]).name
    sizes, ho = data["vocab_sizes"], data["held_out"]
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    full = data["bytes_per_token"][-1]
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>bpe-store report: {e(name)}</title><style>{CSS}</style></head>
<body>
<h1>bpe-store report: {e(name)}</h1>
<p class="summary">{st['merges_done']:,} merges, vocabulary {sizes[-1]:,}: {full:.3f} bytes per token on
{ho['bytes']:,} bytes of held-out text ({ho['tokens']:,} tokens).</p>

{_compression_section(data, plots['compression'])}

{_by_script_section(data)}

{_tokens_section(data)}

<section id="merge-counts"><h2>Merge count against rank</h2>
<figure>{plots['merges']}</figure>
<p class="note">How often each merged pair occurred when it was merged: the first merges cover most of the
text, the last ones rare pairs.</p>
</section>

<section id="token-lengths"><h2>Token length by script</h2>
<figure>{plots['lengths']}</figure>
<p class="note">The {sizes[-1] - sizes[0]:,} learned tokens by length in bytes; script from the first letter's
Unicode name (an approximation), tokens without letters as digits, whitespace, punctuation/symbols or
partial UTF-8.</p>
</section>

{eval_section(data["evals"], plots["evals"])}

{_split_words_section(data)}

{_facts_section(data)}
<footer class="note"><p>Made by bpe-store {e(__version__)} on {now}. This page is self-contained: it loads
nothing from the network.</p></footer>
</body></html>
"""


def _compression_section(data: dict[str, Any], plot: str) -> str:
    """Bytes per token at every vocabulary size, on the held-out text."""
    sizes, bpt, ho = data["vocab_sizes"], data["bytes_per_token"], data["held_out"]
    marks = [v for v in TABLE_SIZES if sizes[0] < v < sizes[-1]] + [sizes[-1]]
    comp_rows = [[f"{v:,}", f"{bpt[v - sizes[0]]:.3f}", f"{data['tokens'][v - sizes[0]]:,}"] for v in marks]
    if ho["kind"] == "file":
        ho_text = f"the file <code>{e(ho['path'])}</code>"
    else:
        ho_text = (f"a sample of the training inputs ({ho['places']} places, whole lines): in-sample, so a "
                   "little optimistic; <code>--held-out FILE</code> gives a real held-out text")
    return f"""<section id="compression"><h2>Compression at every vocabulary size</h2>
<figure>{plot}</figure>
<p class="note">Held-out text: {ho_text}. Every vocabulary size from {sizes[0]:,} (the 256 bytes and
{data['n_special']} special tokens) to {sizes[-1]:,} is a prefix of this store's merge log; one encoding at
the full size gives them all (each token's count pushed down its merge tree).</p>
{table(["vocabulary size", "bytes per token", "tokens"], comp_rows, {0, 1, 2})}
</section>"""


def _by_script_section(data: dict[str, Any]) -> str:
    """Bytes per token of the store and each ``--compare`` tokenizer, in all and by script."""
    compared, ho = data["compare"], data["held_out"]
    cmp_rows = [[e(c["name"]) + ("" if c["kind"] == "store" else f" <span class=\"note\">({e(c['kind'])}, "
                                  f"{e(c.get('pattern') or '')})</span>"),
                 f"{c['vocab_size']:,}", f"{c['tokens']:,}", f"{c['bytes_per_token']:.3f}"] for c in compared]
    script_rows = []
    share = compared[0]["by_script"]
    for cls in SCRIPT_CLASSES:
        if not any(c["by_script"][cls]["tokens"] for c in compared):
            continue
        cells = [e(cls), f"{100 * share[cls]['bytes'] / max(ho['bytes'], 1):.1f}%"]
        for c in compared:
            v = c["by_script"][cls]["bytes_per_token"]
            cells.append("-" if v is None else f"{v:.3f}")
        script_rows.append(cells)
    script_head = ["script", "share of the bytes"] + [f"bytes per token: {c['name']}" for c in compared]
    cmp_hint = "" if len(compared) > 1 else (" (<code>--compare FILE</code> adds one: a <code>.tiktoken</code> ranks "
                                             "file such as OpenAI's cl100k_base, or a tokenizer.json)")
    return f"""<section id="by-script"><h2>Compression by script, beside other tokenizers</h2>
<p class="note">The same held-out bytes encoded by each tokenizer{cmp_hint}.
Each token counts for the script of the first character it starts that is not whitespace.</p>
{table(["tokenizer", "vocabulary", "tokens", "bytes per token"], cmp_rows, {1, 2, 3})}
{table(script_head, script_rows, set(range(1, len(script_head))))}
</section>"""


def _tokens_section(data: dict[str, Any]) -> str:
    """Learned tokens to look at: the longest, the last learned, partial UTF-8, never used."""
    tt, sizes = data["tokens_tables"], data["vocab_sizes"]
    partial_more = ("" if tt["partial_utf8_total"] <= len(tt["partial_utf8"])
                    else f"; the first {len(tt['partial_utf8'])}")
    unused_more = "" if tt["unused_total"] <= len(tt["unused"]) else f"; the first {len(tt['unused'])} by rank"
    return f"""<section id="tokens"><h2>Tokens to look at</h2>
<h3>The longest learned tokens</h3>
{_tokenstable(tt["longest"])}
<h3>The last {LAST_LEARNED} learned</h3>
{_tokenstable(tt["last_learned"])}
<h3>Partial UTF-8 tokens ({tt["partial_utf8_total"]:,})</h3>
<p class="note">Learned tokens that are not whole characters (bytes shown as \\xNN){partial_more}.</p>
{_tokenstable(tt["partial_utf8"])}
<h3>Never used on the held-out text ({tt["unused_total"]:,} of {sizes[-1] - sizes[0]:,})</h3>
<p class="note">Learned tokens the held-out text's encoding never holds (a token whose bytes another id already
had is never used){unused_more}.</p>
{_tokenstable(tt["unused"])}
</section>"""


def _split_words_section(data: dict[str, Any]) -> str:
    """The frequent words that still take many tokens, as the store splits them."""
    split_rows = [["".join(f'<span class="tok">{e(display.escape(t).replace(" ", "␣"))}</span>'
                           for t in w["split"]),
                   f"{w['count']:,}", len(w["split"]), e(display.quote(w["word"]))]
                  for w in data["split_words"]]
    return f"""<section id="split-words"><h2>Frequent words still split into many tokens</h2>
<p class="note">The most frequent training words that take {MANY_TOKENS} or more tokens at the full vocabulary,
as the store splits them (␣ is a space; other escapes as in <code>bpe-store show</code>).</p>
{table(["split", "count", "tokens", "word"], split_rows, {1, 2})}
</section>"""


def _facts_section(data: dict[str, Any]) -> str:
    """The run: its parameters, inputs, time per stage and sessions."""
    from .progress import format_bytes

    st, stages = data["status"], data["stages"]
    stage_rows = [[ph, _dur(v["elapsed_s"]), v["checkpoints"], f"{v['write_s']:.2f} s"]
                  for ph, v in sorted(data["stages"]["by_phase"].items())]
    inputs = [[f"<code>{e(i['path'])}</code>", format_bytes(i["size"]),
               f"<code>{e(i['hash'])} {e(i['digest'][:16])}</code>", e(i["state"])] for i in st["inputs"]]
    params = [["vocabulary size", f"{st['vocab_size']:,} (merges {st['merges_done']:,} / {st['merges_target']:,})"],
              ["special tokens", e(", ".join(st["special_tokens"]) or "none")],
              ["pattern", _pattern_cell(st)],
              ["invalid UTF-8", e(st["invalid_utf8"])],
              ["phase", e(st["phase"] + (f" ({st['stop_reason']})" if st["stop_reason"] else ""))],
              ["distinct words", f"{st['words']:,}"],
              ["store", f"{e(st['path'])} ({format_bytes(st['db_bytes'])}, schema {e(st['schema'])})"],
              ["training time", f"{_dur(stages['total_s'])}: counting {_dur(stages['counting_s'])}, "
                                f"pairs and merging {_dur(stages['merging_s'])}"]]
    sessions = [[s["id"], e(_when(s["started_at"])), e(_when(s["ended_at"])), e(s["state"]),
                 f"{s['merges_start']} → {s['merges_end'] if s['merges_end'] is not None else '?'}",
                 e(f"pid {s['pid']} on {s['host']}" if s["pid"] else "before sessions were recorded")]
                for s in st["sessions"]]
    return f"""<section id="facts"><h2>The run</h2>
<h3>Parameters</h3>{table(["", ""], params)}
<h3>Inputs</h3>{table(["path", "size", "fingerprint", "now"], inputs)}
<h3>Time per stage and checkpoints</h3>
{table(["stage", "training time", "checkpoints", "writing them"], stage_rows, {2, 3})}
<p class="note">Training time is summed over sessions (a resume adds to it); "pairs and merging" includes
counting the pairs once.</p>
<h3>Sessions</h3>{table(["#", "started", "ended", "outcome", "merges", "process"], sessions)}
</section>"""


def _pattern_cell(st: dict[str, Any]) -> str:
    """The run's pattern by its name (as ``status`` says it), the regex itself for one of a user's own."""
    from ..text.pretokenize import PATTERNS

    name = st["pattern_name"]
    if name.split(" ")[0] in PATTERNS:
        return f"{e(name)} <span class=\"note\">(<code>{e(st['pattern'])}</code>)</span>"
    return f"a regex of its own: <code>{e(st['pattern'])}</code>"


def _tokenstable(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return '<p class="note">none</p>'
    body = [[f'<span class="tok">{e(display.escape(r["bytes"].decode("utf-8", "surrogateescape")).replace(" ", "␣"))}'
             "</span>", f"{r['n_bytes']}", f"{r['id']:,}", f"{r['rank']:,}", f"{r['merge_count']:,}",
             f"{r['held_out']:,}"] for r in rows]
    return table(["token", "bytes", "id", "merge rank", "count when merged", "in the held-out text"], body,
                  {1, 2, 3, 4, 5})


def write_report(db: str | os.PathLike, out: str | os.PathLike, held_out: str | os.PathLike | None = None,
                 sample_bytes: int = DEFAULT_SAMPLE_BYTES, threads: int = 0,
                 compare: Sequence[str] = ()) -> dict[str, Any]:
    """Gather, render and write the page to ``out`` (complete or absent); returns the data."""
    from ..tokenizer.outfiles import new_files

    out = Path(out)
    if out.is_dir():
        raise InputError(f"{out}: is a directory; -o names the HTML file to write")
    if out.exists() and out.resolve() == Path(db).resolve():
        raise InputError(f"{out}: is the store; -o names the HTML file to write")
    matplotlib_figure()  # before any work: a missing extra is said at once
    data = gather(db, held_out, sample_bytes, threads, compare)
    page = render_html(data)
    with new_files([out]) as (f,):  # complete or absent; a previous report is replaced at the end
        f.write(page.encode("utf-8"))
    return data
