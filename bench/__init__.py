"""Benchmark kit: synthetic mirrors, a shaping loopback server, a baseline and the runner.

See ``bench/README.md``. The modules are scripts (``python bench/<name>.py``) and importable
(``import bench.generate``) for the tests.
"""
