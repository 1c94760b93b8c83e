"""Training: the recipe that turns a corpus into merges in a store.

Owns a run from its options to its result. From the top:

- ``train``: the numbered recipe (``train``, ``train_bpe``, ``train_from_iterator``) and its session;
- its steps: ``plan`` (1-2: check the options and inputs, create or check the store),
  ``count_step`` (3: count words into the store, in flushes) and ``merge_step`` (4-5: count the
  pairs, merge in checkpointed batches; the engine a resume builds from the store);
- ``job``: the checked job every step reads, and the writes done on a thread of their own;
  ``options``: the checks of a run's options;
- ``merge``: the merge engine (Python spec and native choice, the tie-break, ``merge_pair``);
  ``reference``: the slow pure-Python trainer the tests hold the fast path to.

A new run option is checked in ``options`` and carried by ``job._Job`` to the step that uses it.
Uses the store (where the state lives) and counting (the map step).
"""
