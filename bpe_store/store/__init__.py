"""The store: one SQLite file that holds a run's whole state, and the code that reads and writes it."""
