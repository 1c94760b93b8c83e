"""Training: the recipe that turns a corpus into merges in a store.

Owns a run from its options to its result. From the top:

- ``train``: the numbered recipe (``train``, ``train_bpe``, ``train_from_iterator``) and its session;
- its steps: ``plan`` (1-2: check the options and inputs, create or check the store),
  ``count_step`` (3: count words into the store, in flushes) and ``merge_step`` (4-5: count the
  pairs, merge in checkpointed batches; the engine a resume builds from the store);
- ``job``: the checked job every step reads, and the writes done on a thread of their own;
  ``options``: ``TrainOptions``, a run's settings with their defaults, and their checks;
  ``wal_watch``: whether a reader pins the store's WAL, asked before a write training may defer;
- ``merge``: the merge engine (Python spec and native choice, the tie-break, ``merge_pair``);
  ``reference``: the slow pure-Python trainer the tests hold the fast path to.

A new run option is a field of ``options.TrainOptions`` (its default, its line in the docstring's
Attributes, which ``help(train)`` shows, its check in ``checked``) and a keyword parameter of
``train`` of the same name; ``job._Job.options`` carries it to the step that uses it. Its bounds,
if the store keeps it, go in ``bpe_store.store.params``.
Uses the store (where the state lives) and counting (the map step).
"""
