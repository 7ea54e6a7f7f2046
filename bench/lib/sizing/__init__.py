"""The sizing advisor's parts (python -m bench.size): the model (model.py), the points it sweeps (points.py), the
load it drives (traffic.py), the servers it sizes (targets.py), what it measures of them (probe.py, outside.py),
what it warns about (checks.py) and its answer (answer.py)."""
