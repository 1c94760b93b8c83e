"""The report's HTML page, its pieces: fonts, CSS, matplotlib figures as inline SVG, tables.
Shared by the report's sections (``report``, ``eval_report``).
"""

from __future__ import annotations

import html
import io
import re
from typing import Any

from ..errors import InputError

#: The command that installs what ``report`` needs.
REPORT_INSTALL = "pip install 'bpe-store[report]'"
#: Fonts for the page and its plots: the system's, with CJK faces where the system has them
#: (else the browser falls back on its own), so Chinese or Japanese tokens are not boxes.
FONT_STACK = ('system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", "DejaVu Sans", "Noto Sans CJK SC", '
              '"Noto Sans CJK JP", "Source Han Sans SC", "PingFang SC", "Hiragino Sans", "Microsoft YaHei", '
              '"WenQuanYi Micro Hei", sans-serif')
MONO_STACK = ('ui-monospace, "SFMono-Regular", Menlo, Consolas, "DejaVu Sans Mono", "Noto Sans Mono CJK SC", '
              '"Noto Sans CJK SC", "Source Han Sans SC", monospace')


def matplotlib_figure() -> Any:
    """matplotlib's Figure class, or an InputError (exit 2) naming the install command."""
    try:
        import matplotlib
        from matplotlib.figure import Figure
    except ImportError:
        raise InputError(f"bpe-store report draws its plots with matplotlib, which is not installed: "
                         f"{REPORT_INSTALL}") from None
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: smaller, searchable, no glyph paths
    matplotlib.rcParams["svg.hashsalt"] = "bpe-store"  # the same store gives the same SVG ids
    return Figure


def svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    svg = buf.getvalue()
    # the plots' text in the page's font stack (CJK faces where the system has them), not the one
    # face matplotlib measured with
    fonts = FONT_STACK.replace('"', "'")  # inside the SVG's style="..." attributes
    svg = re.sub(r"font-family: ?'?[^;'\"]*'?", lambda _m: f"font-family: {fonts}", svg)
    svg = re.sub(r"(font: [^;\"]*?\d+(?:\.\d+)?px) '[^']*'", lambda m: f"{m.group(1)} {fonts}", svg)
    return svg[svg.index("<svg"):]  # drop the XML declaration and DOCTYPE: inline SVG in HTML


CSS = """
body { font: 15px/1.45 FONTS; margin: 2em auto; max-width: 60em; padding: 0 1em; color: #222; }
h1 { font-size: 1.6em; margin-bottom: .2em; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .6em 0; } td, th { padding: .15em .7em; text-align: left; }
th { border-bottom: 1px solid #bbb; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
code, .tok { font-family: MONO; }
.tok { background: #eef; border-radius: 3px; padding: 0 .2em; margin-right: .15em; }
figure { margin: .5em 0; } figure svg { max-width: 100%; height: auto; } .note { color: #555; }
"""


CSS = CSS.replace("FONTS", FONT_STACK).replace("MONO", MONO_STACK)


def e(x: Any) -> str:
    return html.escape(str(x))


def table(head: list[str], rows: list[list[Any]], numeric: set[int] = frozenset()) -> str:  # type: ignore[assignment]
    h = "".join(f"<th>{e(c)}</th>" for c in head)
    body = "".join("<tr>" + "".join(f'<td class="n">{e(v)}</td>' if i in numeric else f"<td>{v}</td>"
                                    for i, v in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>"
