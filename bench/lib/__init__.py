"""What the bench tools share: flags, servers, results and their tables.

A tool (bench/<tool>.py, run as `python -m bench.<tool>`) imports from here,
from bench/charts/ and from the lab's race engine and ideal (lab/race/), never
from another tool (tests/test_layers.py checks).
"""
