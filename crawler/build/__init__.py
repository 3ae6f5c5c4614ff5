"""Building a branch's output from its summaries: consolidation by hash, changes, the report."""
