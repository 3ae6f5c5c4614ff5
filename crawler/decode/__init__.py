"""Decoding indexes: records, pieces of whole records, validation, summaries, and the worker
processes that do it."""
