"""Draws the package's wings and the imports between them, for docs/design.md.

A wing is a subpackage of ``bpe_store`` (cli, inspection, tokenizer, training, formats, store,
counting, text), a module on the ground floor (bpe: the merge rule; native: the native core's face),
or one of the basic modules at its root (errors, interrupts, temporaries, pauses, _version). Every
``import`` in the package counts, the ones inside functions too; the compiled ``_core`` and the
package root (the public facade, which imports everything on first use) are left out.

    python tools/draw_wings.py            # prints the drawing (a Mermaid flowchart)
    python tools/draw_wings.py --write    # rewrites it in docs/design.md, between its markers

tests/layout/test_architecture.py fails when docs/design.md's drawing is not what this prints, or when
an arrow points from a lower wing to a higher one or to one beside it (the order of import-linter's
layers; wings on one level, such as tokenizer and training, must not import each other).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "bpe_store"
DESIGN = ROOT / "docs" / "design.md"
BEGIN, END = "<!-- wings: begin (tools/draw_wings.py) -->", "<!-- wings: end -->"
#: The wings from the top down, level by level: import-linter's layers (pyproject.toml), the basics last.
LEVELS: tuple[tuple[str, ...], ...] = (
    ("__main__",), ("cli", "tiktoken_compat"), ("inspection",), ("tokenizer", "training"), ("formats",), ("store",),
    ("counting",), ("text",), ("bpe", "native"), ("basics",))
ORDER = tuple(wing for level in LEVELS for wing in level)


def level(wing: str) -> int:
    """The index of ``wing``'s level in LEVELS (0 at the top)."""
    return next(i for i, wings in enumerate(LEVELS) if wing in wings)
BASICS = ("errors", "interrupts", "temporaries", "pauses", "_version")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _wing(module: str) -> str | None:
    """The wing a module ``bpe_store.X[.Y]`` belongs to; None for the root and ``_core``."""
    parts = module.split(".")
    if parts[0] != "bpe_store" or len(parts) < 2 or parts[1] == "_core":
        return None
    return "basics" if parts[1] in BASICS else parts[1]


def _imported(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """The absolute names an import statement in ``module`` loads."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level == 0:
        base = node.module or ""
    else:
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join(package + ([node.module] if node.module else []))
    # `from . import x` may name a submodule: count it as one
    return [f"{base}.{alias.name}" if not node.module else base for alias in node.names]


def edges() -> Counter[tuple[str, str]]:
    """(from wing, to wing) -> how many import statements, over the whole package."""
    counts: Counter[tuple[str, str]] = Counter()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        source = _wing(module)
        if source is None:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            for target in {_wing(name) for name in _imported(node, module, path.name == "__init__.py")}:
                if target is not None and target != source:
                    counts[source, target] += 1
    return counts


def upward(counts: Counter[tuple[str, str]]) -> list[tuple[str, str]]:
    """The arrows that do not point down: from a wing to one above it or beside it in LEVELS."""
    return [(a, b) for a, b in counts if level(b) <= level(a)]


def drawing(counts: Counter[tuple[str, str]]) -> str:
    """The Mermaid flowchart: a box per wing, top to bottom (wings of one level side by side), an
    arrow per importing pair."""
    lines = ["```mermaid", "flowchart TD"]
    for i, wings in enumerate(LEVELS):
        indent = "    " if len(wings) == 1 else "        "
        if len(wings) > 1:
            lines += [f'    subgraph level{i} [" "]', "        direction LR"]
        for wing in wings:
            lines.append(f'{indent}{wing.strip("_")}["{_label(wing)}"]')
        if len(wings) > 1:
            lines.append("    end")
    for a, b in sorted(counts, key=lambda e: (ORDER.index(e[0]), ORDER.index(e[1]))):
        lines.append(f"    {a.strip('_')} -->|{counts[a, b]}| {b.strip('_')}")
    lines.append("```")
    return "\n".join(lines)


def _label(wing: str) -> str:
    if wing == "basics":
        return ", ".join(BASICS)
    if wing == "__main__" or (PACKAGE / f"{wing}.py").exists():  # a module, not a package
        return wing if wing == "__main__" else f"{wing}.py"
    return f"{wing}/"


def block(counts: Counter[tuple[str, str]]) -> str:
    return f"{BEGIN}\n{drawing(counts)}\n{END}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite the drawing in docs/design.md")
    args = ap.parse_args()
    counts = edges()
    if not args.write:
        print(drawing(counts))
        return 0
    text = DESIGN.read_text(encoding="utf-8")
    start, end = text.index(BEGIN), text.index(END) + len(END)
    DESIGN.write_text(text[:start] + block(counts) + text[end:], encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
