"""The output folder: writing and swapping in a branch, the state of past publishes, the run
lock."""
