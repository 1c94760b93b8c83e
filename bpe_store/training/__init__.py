"""Training: the recipe that turns a corpus into merges in a store.

Owns a run from its options to its result. From the top:

- ``train``: the numbered recipe (``train``, ``train_bpe``, ``train_from_iterator``) and its session;
- its steps: ``plan`` (1-2: check the options and inputs, create or check the store),
  ``count_step`` (3: count words into the store, in flushes) and ``merge_step`` (4-5: count the
  pairs, merge in checkpointed batches; the engine a resume builds from the store);
- ``job``: the checked job every step reads, and the writes done on a thread of their own;
  ``options``: ``TrainOptions``, a run's settings with their defaults, and their checks, which
  split them into ``RunParams`` and ``RunOptions``;
  ``wal_watch``: whether a reader pins the store's WAL, asked before a write training may defer;
  ``extend``: a base to extend (``options.extend``) held to the run's options, its merges in the
  store's ids, the engine's start from them;
- ``merge``: the merge engine (Python spec and native choice, the tie-break; the merge rule of one
  word is ``bpe_store.bpe``, shared with the tokenizer and inspection);
  ``reference``: the slow pure-Python trainer the tests hold the fast path to.

A new run option is a field of ``options.TrainOptions`` (its default, its line in the docstring's
Attributes, which ``help(train)`` shows, its check in ``checked``) and a keyword parameter of
``train`` of the same name; then a field of ``options.RunOptions``, which ``job.Job.options``
carries to the step that uses it. If the store keeps it, a field of ``RunParams`` instead (in
``job.Job.params``; ``options.PARAMS_OF_OPTIONS`` names it): its bounds in
``bpe_store.store.params``, a column (see ``bpe_store.store``), and its line in
``plan._param_diffs`` (what a resume compares). Its CLI option
in cli/train_cmd.py, then docs/cli.md (``python tools/gen_cli_docs.py``) and docs/training.md.
Stands beside the tokenizer (neither imports the other); uses the file formats, the store (where
the state lives), counting (the map step), the text wing, the merge rule and the native core.
"""
