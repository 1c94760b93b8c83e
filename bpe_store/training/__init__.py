"""Training: the recipe that turns a corpus into merges in a store.

Owns a run from its options to its result. ``train`` is the numbered recipe (``train``,
``train_bpe``, ``train_from_iterator``); ``options`` checks a run's options; ``merge`` is the
merge engine (Python spec and native choice, the tie-break, ``merge_pair``); ``reference`` is
the slow pure-Python trainer the tests hold the fast path to.
Uses the store (where the state lives) and counting (the map step).
"""
