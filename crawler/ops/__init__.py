"""For operators: verifying a published branch, and the metrics file."""
