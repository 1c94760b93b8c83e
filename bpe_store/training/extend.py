"""Extending a base (``train(..., extend=...)``): the base read and held to the run's options, its
merges put in the store's ids, and the engine's start from them.

The base fixes the pattern and the special tokens (a different ``pattern`` or ``special_tokens`` is
refused, saying why) and its merges are the run's first merges. ``vocab_size`` counts the tokens of
the result, the base's included (its special tokens too, whatever ids they sit at). Counting is the
usual counting, with the base's pattern; merging starts with every word as the base encodes it:
the engine replays the base's merges on the words' bytes, by rank (``bpe_store.formats.bases``: the
one rule every base is held to), and goes on learning from there.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import InputError
from ..store.base_rows import BaseRows
from ..store.params import RunParams
from ..text.pretokenize import GPT2_PATTERN, describe_pattern, resolve_pattern

if TYPE_CHECKING:  # the readers import regex and more: a run without a base does not load them
    from ..formats.bases import Base


def based_params(extend: str | os.PathLike, pattern: str, special_tokens: Sequence[str],
                 params: RunParams) -> tuple[Base, RunParams]:
    """The base ``extend`` names and the run's parameters under it; InputError (exit 2) for a base
    that cannot be extended or options it contradicts. ``pattern``: as given (GPT-2's, the default,
    is "not given" unless the base is a ``.tiktoken`` file, which holds no pattern of its own)."""
    from ..formats.bases import load_base

    base = load_base(extend, pattern=resolve_pattern(pattern))
    if resolve_pattern(pattern) not in (GPT2_PATTERN, base.pattern):
        raise InputError(f"--pattern {describe_pattern(pattern)} contradicts the base {base.source}, whose "
                         f"pattern is {describe_pattern(base.pattern)}: the base fixes the pattern (leave "
                         "--pattern out)")
    given = list(dict.fromkeys(special_tokens))
    if given and set(given) != set(base.specials):
        raise InputError(f"special tokens {given} contradict the base {base.source}, whose special tokens are "
                         f"{list(base.specials)}: the base fixes them (leave --special out)")
    if params.vocab_size < base.n_tokens:
        raise InputError(f"vocab size {params.vocab_size} is smaller than the base {base.source}, which has "
                         f"{base.n_tokens} tokens (vocab size counts the result's tokens, the base's included)")
    return base, dataclasses.replace(params, pattern=base.pattern, special_tokens=tuple(base.specials))


def base_rows(base: Base) -> BaseRows:
    """The base as the store records it: its merges in the store's ids (special tokens, the 256 bytes,
    then one id per merge, in rank order) and the model id of each."""
    n = len(base.specials)
    if base.store_merges is not None and base.merge_bytes is not None:  # made by the reader (a ranks file)
        return BaseRows(base.kind, base.source, base.sha256, base.store_merges, base.merge_bytes, base.model_ids(),
                        base.next_id)
    id_of = {bytes([b]): n + b for b in range(256)}
    merges: list[tuple[int, int, int]] = []
    made: list[bytes] = []
    for k, (a, b) in enumerate(base.merges):
        t = n + 256 + k
        merges.append((id_of[a], id_of[b], t))
        id_of[a + b] = t
        made.append(a + b)
    return BaseRows(base.kind, base.source, base.sha256, merges, made, base.model_ids(), base.next_id)


def replay_of(store) -> list[tuple[int, int, int]]:
    """The store's merges as the engine replays them, ``[(left, right, token)]`` in rank order."""
    return [(left, right, token) for _rank, left, right, token, _count in store.load_merges()]


def token_bytes_of(store) -> list[bytes | None]:
    """Every store id's bytes, None for a special token (the engine's ``token_bytes``)."""
    return [b if kind != "special" else None for _, b, kind in store.load_vocab()]
