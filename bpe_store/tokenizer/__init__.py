"""A trained store as a tokenizer, and the files made from it."""
