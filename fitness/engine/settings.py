"""What the cascade's stages read of the run's options and of the machine, fixed for an evaluator's
life: handed to each stage by fitness.engine.evaluator, which is the one place that wires them, so
that no stage reaches back into the evaluator for them."""
from __future__ import annotations

from dataclasses import dataclass

from fitness.engine.trials import TrialBudget
from suites.task import Task


@dataclass(frozen=True)
class StageSettings:
    seeds: tuple[int, ...] = (0, 1)  # every case runs once per seed
    timeout_s: float = 120.0  # one candidate's correctness run (a replay gets twice this)
    timing_timeout_s: float = 300.0  # one request of the timing's children
    trials: int = 21  # the most timed trials per side and shape
    min_trials: int = 7  # trials after which a shape may stop (fitness.engine.trials)
    baseline: str = "reference"  # "reference" (PyTorch) or "start" (the task's starting kernel)
    interpret: bool = True  # the children run kernels under the Triton interpreter (no GPU)
    gpu: bool = False
    suite_path: str | None = None  # the suite's data folder, for the children

    @property
    def compare_device(self) -> str:
        """Where outputs are compared: on a GPU machine the GPU, where it has room. A dozen passes
        over float64 copies of 64 MiB outputs took the engine 3 s of CPU per candidate on the H100
        machine, CPU its correctness workers needed for compiling."""
        return "cuda" if self.gpu else "cpu"

    @property
    def budget(self) -> TrialBudget:
        """The timing's trials per shape and its requests' timeout."""
        return TrialBudget(self.trials, self.min_trials, self.timing_timeout_s)

    def task_spec(self, task: Task) -> dict:
        """How a child finds the task: the suite, the name and the suite's data folder."""
        return {"suite": task.suite, "name": task.name, "path": self.suite_path}
