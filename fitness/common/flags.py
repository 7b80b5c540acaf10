"""A verdict's flags: one enum that the evaluator sets and the archive, reports, export and
validation read. A member is its string (the archive stores the value, and rows read back as plain
strings compare, hash and print the same), so older archives need no migration."""
from __future__ import annotations

from enum import Enum

# how a failure the replay's own limits caused begins (fitness.clean.compiled.NotReplayable): the
# verdict flags it Flag.NOT_REPLAYABLE, validate gives it a status of its own
NOT_REPLAYABLE = "not replayable: "

# a speedup above this is flagged for review (fitness.engine.verdict): the flag's name carries it
SUSPICIOUS_SPEEDUP = 10.0


class Flag(str, Enum):
    INVALID_HERE = "invalid-here"  # the task's reference fails on this machine
    AA_SENTINEL = "aa-sentinel"  # a starting kernel timed against itself (noise check)
    NO_SANDBOX = "no-sandbox"  # evaluated without bubblewrap
    UNTIMED_NO_GPU = "untimed-no-gpu"  # correct, and not timed: no GPU here
    UNTIMED = "untimed"  # correct, and not timed: the suite gives no benchmark inputs
    WORKER_REPLACED = "worker-replaced"  # a child died during the evaluation and was replaced
    KILLED_UNITS = "killed-units"  # its evaluation killed evaluation units (Dask)
    TIMING_FAILED = "timing-failed"  # correct, and the timing could not time it
    TIMING_BIASED = "timing-biased"  # the baseline's code times unlike its own kernels replayed
    NOISY_TIMING = "noisy-timing"  # a shape's trials spread more than the noise bound
    GPU_IDLE_UNVERIFIED = "gpu-idle-unverified"  # NVML could not show the GPU's other processes
    NOT_REPLAYABLE = "not-replayable"  # the replay cannot model the call (the engine's limit, not the candidate's)
    # a clean or baseline child ran out of GPU memory even with the GPU to itself (the engine's failure)
    ENGINE_OUT_OF_MEMORY = "engine-out-of-memory"
    FASTER_THAN_ROOFLINE = "faster-than-roofline"  # faster than the device's ceilings on some shape
    SPEEDUP_REVIEW = f"speedup-over-{SUSPICIOUS_SPEEDUP:g}x-review"  # too good to trust unreviewed

    __hash__ = str.__hash__  # a member and its string are one key in sets and dicts

    def __str__(self) -> str:
        return str(self.value)
