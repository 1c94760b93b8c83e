"""Reading a store for people: status, SQL, ``show`` / ``why``, the HTML report, and progress.

Owns what a person sees of a run. ``answers`` answers ``status``, ``sql``, ``show`` and
``why`` from a store; ``report`` renders the HTML page, ``compare`` measures its compression by
script and beside other tokenizers; ``progress`` turns a run's progress events into bars, lines or
JSON; ``display`` writes tokens and bytes as people read them.
Used by the CLI; uses the tokenizer, the merge rule (``bpe_store.bpe``), the store and the inputs' names.
"""
