"""The command line: arguments, exit codes, signals and the deadline, the live display."""
