"""The bench: siege.sh and the Python race, sweep and summary tools."""
