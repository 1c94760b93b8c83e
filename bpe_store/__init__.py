"""bpe_store: byte-level BPE training whose whole state lives in one SQLite file.

Public API (the CS336 one, plus the store-aware entry points)::

    from bpe_store import train_bpe
    vocab, merges = train_bpe("corpus.txt", 32000, ["<|endoftext|>"], db="run.db")

    from bpe_store import Tokenizer
    tok = Tokenizer.from_store("run.db", vocab_size=16000)  # a prefix of the merge log
    tok.decode(tok.encode("Hello<|endoftext|>"))

Names are imported on first use (module ``__getattr__``): ``import bpe_store`` loads nothing
heavy (no numpy, regex, SQLAlchemy or Alembic), so a script that trains pays only for training.
"""

from __future__ import annotations

from importlib import import_module

from ._version import __version__

TYPE_CHECKING = False  # not typing's: importing typing alone costs more than the rest of this file

#: ``{public name: module that defines it}``
_EXPORTS: dict[str, str] = {
    "BpeStoreError": "errors", "InputError": "errors", "ResumeMismatch": "errors", "StoreError": "errors",
    "export_store": "tokenizer.export",
    "GPT2_PATTERN": "text.pretokenize",
    "Store": "store.store",
    "Tokenizer": "tokenizer.tokenizer",
    "Interrupted": "errors", "TrainResult": "store.result", "read_result": "store.result", "train": "training.train",
    "train_bpe": "training.train", "train_from_iterator": "training.train",
}

__all__ = ["__version__", *_EXPORTS]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from .errors import BpeStoreError, InputError, Interrupted, ResumeMismatch, StoreError
    from .store.result import TrainResult, read_result
    from .store.store import Store
    from .text.pretokenize import GPT2_PATTERN
    from .tokenizer.export import export_store
    from .tokenizer.tokenizer import Tokenizer
    from .training.train import train, train_bpe, train_from_iterator




def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'bpe_store' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
