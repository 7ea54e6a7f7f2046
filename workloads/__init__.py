"""Pure, picklable workloads and their registry (no Tornado in here)."""

from workloads.params import ParamError
from workloads.registry import DEFAULT_WORKLOAD, WORKLOADS, RunRecord, Workload, run_timed, warm_up

__all__ = ["DEFAULT_WORKLOAD", "WORKLOADS", "ParamError", "RunRecord", "Workload", "run_timed", "warm_up"]
