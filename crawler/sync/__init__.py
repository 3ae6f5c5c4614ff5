"""Syncing: one source from the mirror to its summary, one branch from its sources to its published
folder, and the run."""
