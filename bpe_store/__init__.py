"""bpe_store: byte-level BPE training whose whole state lives in one SQLite file.

Public API (the CS336 one, plus the store-aware entry points)::

    from bpe_store import train_bpe
    vocab, merges = train_bpe("corpus.txt", 32000, ["<|endoftext|>"], db="run.db")

    from bpe_store import Tokenizer
    tok = Tokenizer.from_store("run.db", vocab_size=16000)  # a prefix of the merge log
    tok.decode(tok.encode("Hello<|endoftext|>"))
"""

__version__ = "0.1.0"

from .errors import BpeStoreError as BpeStoreError
from .errors import InputError as InputError
from .errors import ResumeMismatch as ResumeMismatch
from .errors import StoreError as StoreError
from .export import export_store as export_store
from .pretokenize import GPT2_PATTERN as GPT2_PATTERN
from .store import Store as Store
from .tokenizer import Tokenizer as Tokenizer
from .train import Interrupted as Interrupted
from .train import TrainResult as TrainResult
from .train import read_result as read_result
from .train import train as train
from .train import train_bpe as train_bpe
