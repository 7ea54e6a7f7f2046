"""The modes: what a mode is (contract.py), the registry (registry.py), the pools' admission gate (pool.py),
and one folder per mode: its entry in __init__.py, its runner and whatever runs on its workers beside it."""
