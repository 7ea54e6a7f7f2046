"""What the bench tools share: flags, servers, the race engine, the ideal, results and their tables.

A tool (bench/<tool>.py, run as `python -m bench.<tool>`) imports from here and
from bench/charts/, never from another tool (tests/test_modes.py checks).
"""
