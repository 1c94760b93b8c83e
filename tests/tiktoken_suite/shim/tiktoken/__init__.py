"""bpe_store's stand-in for the ``tiktoken`` package, for running tiktoken's own tests against
``bpe_store.tiktoken_compat`` (tests/tokenizer/test_tiktoken_suite.py puts this directory first on the path)."""

from bpe_store.tiktoken_compat import (  # noqa: F401
    Encoding,
    encoding_for_model,
    encoding_name_for_model,
    get_encoding,
    list_encoding_names,
)
