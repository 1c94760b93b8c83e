"""Counting: the map step, from inputs to word counts (no store, no UI)."""
