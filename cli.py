"""Run the bpe-store command line from a checkout: ``python cli.py --help``."""

from bpe_store.__main__ import main

if __name__ == "__main__":
    main()
