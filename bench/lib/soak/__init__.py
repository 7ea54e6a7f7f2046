"""The soak's parts (python -m bench.soak): the mix, the traffic, the census of processes, the faults, the verdict."""
