"""``python -m bpe_store`` and the ``bpe-store`` console script: the command line (``bpe_store.cli.main``).

Why this small entry before the CLI module: Ctrl-C is ours (``interrupts.ctrl_c_stops_statements``)
already while the CLI's modules load (Typer and the rest take 0.2 s, seconds on a loaded machine). Under
Python's own handler a SIGINT in that window raised KeyboardInterrupt wherever it was noticed, and
where that was inside a callback whose exceptions Python ignores (an import lock's weakref
callback: "Exception ignored in ... KeyboardInterrupt") it was lost, and a long ``sql`` query then
ran on as if no Ctrl-C had come.
"""

import sys


def main() -> None:
    from .interrupts import ctrl_c_stops_statements

    with ctrl_c_stops_statements():
        try:
            from .cli.main import main as cli_main
        except KeyboardInterrupt:
            print("error: interrupted", file=sys.stderr)
            raise SystemExit(130) from None
        cli_main()


if __name__ == "__main__":
    main()
