"""The race: requests released together at one mode of a lab server, /ping probed meanwhile (engine.py).

The lab page's race runs it as a program beside the server (`python -m lab.race`,
__main__.py); the bench's tools race with it too (bench/race.py, bench/compare.py...).
It is a client: it asks a server over HTTP and imports nothing of the server's web stack.
"""
