"""``python -m bpe_store``: the same app as the ``bpe-store`` console script."""

from .cli import main

main()
