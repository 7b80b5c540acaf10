"""Archived kernels for tests of what operators are shown: the record the archive returns
(archives.records.Candidate with its Evaluation), made without an archive."""
from collections.abc import Sequence

from archives.records import Candidate, Evaluation
from fitness.common.timing_row import TimingRow


def candidate(cid: int, source: str, speedup: float | None = None, correct: bool = False, error: str = "",
              stage: str = "none", times: Sequence[TimingRow] = (), operator: str = "",
              note: str = "") -> Candidate:
    """Stage "none": not evaluated yet (no Evaluation), as a fresh candidate reads."""
    evaluation = None if stage == "none" else Evaluation(cid, stage, correct, correct, correct, speedup, error, "gpu",
                                                          times=tuple(times))
    return Candidate(cid, 1, "softmax", 0, 1, source, f"h{cid}", (), operator, note, evaluation=evaluation)
