"""bpe_store: byte-level BPE training whose whole state lives in one SQLite file.

Public API (the CS336 one, plus the store-aware entry points)::

    from bpe_store import train_bpe
    vocab, merges = train_bpe("corpus.txt", 32000, ["<|endoftext|>"], db="run.db")
"""

__version__ = "0.1.0"

from .errors import BpeStoreError as BpeStoreError
from .errors import InputError as InputError
from .errors import ResumeMismatch as ResumeMismatch
from .errors import StoreError as StoreError
from .pretokenize import GPT2_PATTERN as GPT2_PATTERN
from .store import Store as Store
from .train import Interrupted as Interrupted
from .train import TrainResult as TrainResult
from .train import read_result as read_result
from .train import train as train
from .train import train_bpe as train_bpe
