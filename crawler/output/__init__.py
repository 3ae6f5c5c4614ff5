"""The output folder: rendering, staging and swapping in a branch, the published branch folder,
the work folder and its recovery, the state of past publishes, the run lock."""
