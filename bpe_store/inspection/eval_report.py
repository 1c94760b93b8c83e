"""The report's evaluation section: the held-out measurements recorded in the store (``eval_curve``,
by ``bpe-store eval`` and ``train --eval``) drawn against vocabulary size, this store's prefixes as
curves and other tokenizers as points; and its residue tokens (``residue.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .display import quote
from .page import e, matplotlib_figure, svg, table

#: The metrics drawn, each a panel: ``(eval_curve column, axis label)``.
PANELS = (("bytes_per_token", "bytes per token"), ("tokens_per_word", "tokens per word"),
          ("renyi_efficiency", "Rényi efficiency"))
#: Residue tokens listed (lowest final-to-merge ratio first).
RESIDUE_ROWS = 30


def gather_evals(db: str | Path) -> dict[str, Any]:
    """``{"curve": eval_curve's rows over all held-out text, "residues": {...}}`` of the store."""
    from ..store import evaluation_rows
    from .answers import reading
    from .residue import RESIDUE_RATIO, residues, token_use

    with reading(db) as store:
        curve = evaluation_rows.curve(store) if evaluation_rows.has_table(store) else []
        vocab = {i: b for i, b, _ in store.load_vocab()}
    rows, n_merges = token_use(db) if len(vocab) > 256 else ([], 0)
    few = residues(rows)
    return {"curve": curve, "residues": {
        "ratio": RESIDUE_RATIO, "merged": len(rows), "count": len(few),
        "rows": [{"id": t, "token": vocab[t], "merge_count": m, "final_count": f} for t, m, f in few[:RESIDUE_ROWS]]}}


def eval_plot(curve: list[dict[str, Any]]) -> str:
    """The panels of ``PANELS`` against vocabulary size, as inline SVG ('' without measurements)."""
    if not curve:
        return ""
    Figure = matplotlib_figure()
    fig = Figure(figsize=(8, 8))
    axes = fig.subplots(len(PANELS), 1, sharex=True)
    series: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in curve:
        series.setdefault((r["tokenizer"], r["heldout"]), []).append(r)
    for ax, (col, label) in zip(axes, PANELS):
        for (who, held), rows in series.items():
            pts = [(r["vocab_size"], r[col]) for r in rows if r[col] is not None]
            if not pts:
                continue
            xs, ys = zip(*pts)
            name = f"this store on {held}" if who == "self" else f"{who} on {held}"
            if who == "self" and len(pts) > 1:
                ax.plot(xs, ys, marker=".", linewidth=1.4, label=name)
            else:
                ax.scatter(xs, ys, marker="D", s=28, label=name)
        ax.set_ylabel(label)
        ax.set_xscale("log", base=2)
        ax.grid(True, which="both", alpha=0.3)
    axes[-1].set_xlabel("vocabulary size")
    axes[0].legend(fontsize="small")
    return svg(fig)


def eval_section(data: dict[str, Any], plot: str) -> str:
    """The section: the curves, their latest points as a table, the residue tokens."""
    curve, res = data["curve"], data["residues"]
    if curve:
        head = ["tokenizer", "held out", "vocabulary size", "bytes/token", "tokens/word", "Rényi eff."]
        fmt = lambda v: "" if v is None else f"{v:.3f}"  # noqa: E731
        rows = [[e(r["tokenizer"]), e(r["heldout"]), f"{r['vocab_size']:,}", fmt(r["bytes_per_token"]),
                 fmt(r["tokens_per_word"]), fmt(r["renyi_efficiency"])] for r in curve]
        measured = f"<figure>{plot}</figure>\n{table(head, rows, {2, 3, 4, 5})}"
    else:
        measured = ('<p class="note">No measurement is recorded: <code>bpe-store eval DB --on HELD_OUT '
                    "--every N</code> or <code>train --eval FILE --eval-every N</code> records them "
                    "(docs/evaluate.md).</p>")
    res_rows = [[f"{r['id']:,}", f'<span class="tok">{e(quote(r["token"]))}</span>', f"{r['merge_count']:,}",
                 f"{r['final_count']:,}"] for r in res["rows"]]
    residue = (f"<p>{res['count']:,} of the {res['merged']:,} merged tokens are residues: the store's own words end "
               f"in them less than {res['ratio']:.0%} as often as their pair was merged (LiteToken's "
               "final-to-intermediate ratio; analysis only, nothing is removed).</p>"
               + (table(["id", "token", "merge count", "final uses"], res_rows, {0, 2, 3}) if res_rows else ""))
    return f"""<section id="evaluations"><h2>Evaluations: which vocabulary size</h2>
{measured}
<h3>Residue tokens</h3>
{residue}
</section>"""
