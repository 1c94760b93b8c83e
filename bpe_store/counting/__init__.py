"""Counting: the map step, from text to word counts, its plan, and Ray (no store, no UI).

Owns how a corpus's words are counted; the text itself is read by the ``text`` wing below. From the
top:

- ``ray_count`` runs the map step on a Ray cluster (``ray_node`` its node counters,
  ``ray_reaper`` what a killed driver leaves); ``parallel`` on threads;
- ``count`` counts the words of one chunk or unit (native or ``regex``); ``planning`` checks and
  fingerprints the inputs and cuts them into work units.

A new way to count (another executor beside threads and Ray): a module here over ``count`` (and its
line in the ``counting`` contract of pyproject.toml's ``[tool.importlinter]``), chosen in
``training/count_step.py``. A new input kind or pattern: see ``bpe_store.text``.
Uses the text wing, the native core's face and the basics.
"""
