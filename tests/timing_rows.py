"""Timing rows for tests that need a timed verdict without a GPU: what a test leaves out is
filled as a steady timing would (fitness.engine.trials.timed_row writes every field)."""
from typing import Any

from fitness.common.timing_row import TimingRow

STEADY = {"candidate_spread": 0.01, "baseline_spread": 0.01, "method": "cuda-graph", "input_sets": 4,
          "trials": 7, "baseline_trials": 7}


def timing_row(shape: dict, dtype: str = "float32", candidate_ms: float = 1.0, baseline_ms: float = 1.0,
               **fields: Any) -> TimingRow:
    return TimingRow(shape=shape, dtype=dtype, candidate_ms=candidate_ms, baseline_ms=baseline_ms,
                     **(STEADY | fields))
