"""The lab server's machinery: config, pools, processes, stats, the app factory."""

from pathlib import Path

# The checkout: where server.py, static/ and bench/ are (the lab runs from it, uninstalled).
ROOT = Path(__file__).resolve().parent.parent
