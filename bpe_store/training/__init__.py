"""Training: the recipe that turns a corpus into merges in a store."""
