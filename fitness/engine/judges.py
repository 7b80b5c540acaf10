"""What differs between the two kinds of task, in one place each, instead of `task.script`
switches through the evaluator.

- FunctionJudge (builtin, user tasks): the oracle is the engine's own float64 reference of a
  torch function; cases are drawn fresh for every evaluation; every call is replayed against it;
  the baseline is that torch function (or the starting kernel); speedups are floored at the
  roofline of the task's cost model.
- ScriptJudge (TritonBench, ROCm, KernelBench): the oracle is the suite's own kernel, run by the
  suite's test in a clean child (fitness.engine.script_eval); the benchmark calls are what is timed,
  their outputs checked against the baseline's (the suite's kernel) on the same input sets;
  the suite's cost estimate only flags, never clamps.
"""
from __future__ import annotations

import random
import secrets
from collections.abc import Callable
from typing import Any

from fitness.common.compare import compare_tree_on
from fitness.common.flags import Flag
from fitness.common.replies import CaseRan
from fitness.engine.outputs import OutputsChecker
from fitness.engine.pool import CancelCheck
from fitness.engine.script_eval import ScriptReferences
from fitness.engine.settings import StageSettings
from fitness.engine.static_gate import allowance
from fitness.engine.verdict import Failure
from suites.task import Task

Check = Callable[[dict, CaseRan], str]  # (case, what the child's call gave) -> '' or what was wrong
Planned = tuple[list[dict], Check]  # an evaluation's cases, and how each one's reply is judged


def fresh_seed() -> int:
    """A seed no candidate can predict: the engine draws one for every case of every evaluation."""
    return secrets.randbelow(2**31 - 1)


def assign_variants(cases: list[dict], variants: tuple[str, ...], seeds: int) -> None:
    """Gives the untimed cases the task's input variants in turn, so that every variant is met
    in each evaluation that has as many untimed cases. Timed and traced is each tuning shape's
    last seed (fitness.engine.correctness.trace_key): it keeps the task's own distribution, which the
    timing, its baseline and their shared oracles draw from. Cases are grouped by shape and
    dtype, `seeds` at a time, in order."""
    if not variants:
        return
    untimed = [c for i, c in enumerate(cases) if c["split"] != "tuning" or i % seeds != seeds - 1]
    for k, case in enumerate(untimed):
        case["variant"] = variants[k % len(variants)]


class FunctionJudge:
    timed_split = "tuning"
    replays = True  # each call replayed alone against the engine's reference
    floor = True  # the task's own cost model: times are clamped at its roofline
    oracle_is_baseline = False  # the timed outputs are checked against the engine's reference

    def __init__(self, task: Task, settings: StageSettings, outputs: OutputsChecker):
        """`outputs`: the engine's float64 reference, the oracle of every call's outputs."""
        self.task, self.settings, self.outputs = task, settings, outputs

    @property
    def baseline_name(self) -> str:
        return "the starting kernel" if self.settings.baseline == "start" else "the PyTorch reference"

    def allowance(self) -> frozenset:
        return frozenset()

    def status(self, cancel: CancelCheck | None = None) -> str:
        return ""  # a torch function runs wherever torch does

    aa_name = "the starting kernel (an A/A sentinel)"

    def is_baseline(self, source: str) -> bool:
        """Whether `source` is the baseline's own code (its timing is then an A/A)."""
        return source == self.baseline_source()

    def baseline_source(self, aa: bool = False) -> str | None:
        """The kernel the baseline child runs; None: the torch reference."""
        return self.task.start_source if aa or self.settings.baseline == "start" else None

    def cases(self, cancel: CancelCheck | None = None) -> Planned | Failure:
        """This evaluation's cases: the tuning shapes and held-out shapes drawn for it alone,
        each at fresh seeds (as many as the run's --seeds): nothing repeats to be cached or
        looked up, and no list of held-out shapes exists anywhere to be read."""
        interpret = self.settings.interpret
        heldout = self.task.draw_heldout(random.Random(secrets.randbits(64)), interpret)
        cases = [{"split": split, "shape": dict(shape), "dtype": dt, "seed": fresh_seed()}
                 for split, group in (("tuning", self.task.shape_set(interpret).tuning), ("heldout", heldout))
                 for shape in group for dt in self.task.dtypes for _ in self.settings.seeds]
        assign_variants(cases, self.task.variants, len(self.settings.seeds))
        return cases, lambda case, ran: self.outputs.check_case(self.task, case, ran.outputs)

    def prefetch(self, case: dict) -> None:
        """The case's reference computed while its outputs are on their way."""
        self.outputs.prefetch(self.task, case)

    def traced(self, case: dict) -> bool:
        """Whether the call of `case` must come back with a trace (fail closed: every call is replayed)."""
        return True

    def replayed_calls(self, calls: list[tuple[dict, dict]]) -> list[tuple[dict, dict]]:
        """Every recorded call, each with a seed of its own for the replay's draw; and the trace
        the timing will time (each tuning shape's last call) again on every input distribution its
        shape's other calls met, so the program timed is the program checked on each variant, its
        recorded scalars included."""
        timed = {(repr(sorted(c["shape"].items())), c["dtype"]): t for c, t in calls if c["split"] == self.timed_split}
        again = [({**case, "seed": fresh_seed()}, timed[key]) for case, trace in calls
                 if case.get("variant") and (key := (repr(sorted(case["shape"].items())), case["dtype"])) in timed
                 and timed[key] is not trace]
        return [({**case, "seed": fresh_seed()}, trace) for case, trace in calls] + again

    def check_replayed(self, case: dict, outputs: tuple) -> str:
        """A replayed call's outputs against the engine's reference on the replay's draw."""
        return self.outputs.check_case(self.task, case, outputs)

    def check_timed(self, case: dict, seed: int, candidate: Any, baseline: Any) -> str:
        """The timed replay's outputs on the third draw, against the engine's reference."""
        return self.outputs.check_case(self.task, {**case, "seed": seed}, candidate)


class ScriptJudge:
    timed_split = "timing"
    floor = False  # the suite's cost estimate flags, never clamps
    oracle_is_baseline = True  # the timed outputs are checked against the baseline's, on the same sets

    def __init__(self, task: Task, settings: StageSettings, refs: ScriptReferences):
        """`refs`: the suite's own kernel's results (fitness.engine.script_eval), the oracle."""
        self.task, self.settings, self.refs = task, settings, refs
        self._allowance: frozenset | None = None
        # on a GPU the benchmark calls are replayed by the timing, against the suite's kernel on the
        # same draws; under the interpreter one benchmark call is replayed here, on another draw
        self.replays = not settings.gpu

    def traced(self, case: dict) -> bool:
        return case["split"] == "timing"

    def replayed_calls(self, calls: list[tuple[dict, dict]]) -> list[tuple[dict, dict]]:
        """The recorded benchmark calls, each on the draw the suite's reference ran for the replay."""
        return [(self.refs.replay_case(case["shape"]["perf"]), trace) for case, trace in calls
                if case["split"] == "timing" and self.replays]

    def check_replayed(self, case: dict, outputs: tuple) -> str:
        ref = self.refs.get(self.task)
        return self.refs.replay_check(self.task, ref, case, outputs)

    @property
    def baseline_name(self) -> str:
        return self.task.script.baseline_name

    def allowance(self) -> frozenset:
        """What the gate lets candidates use: what the suite's reference uses."""
        if self._allowance is None:
            self._allowance = allowance(self.task.script.reference_source)
        return self._allowance

    def status(self, cancel: CancelCheck | None = None) -> str:
        return self.refs.get(self.task, cancel).error

    def baseline_source(self, aa: bool = False) -> str | None:
        return None  # the child loads the suite's kernel itself (the starting kernel: A/A already)

    def is_baseline(self, source: str) -> bool:
        return source == self.task.script.reference_source

    @property
    def aa_name(self) -> str:
        return self.baseline_name

    def cases(self, cancel: CancelCheck | None = None) -> Planned | Failure:
        """The suite's test and benchmark cases; on a GPU also the benchmark inputs to be timed
        (their calls' traces are what is timed). A Failure when the suite's reference fails here."""
        refs = self.refs
        ref = refs.get(self.task, cancel)
        if ref.error:
            return Failure(ref.error, "parse", (Flag.INVALID_HERE,))
        cases = refs.cases(ref)
        if self.settings.gpu:  # one seed for the timed inputs, only recorded: a draw serves every shape
            seed = fresh_seed()  # of a perf file that makes them all at once (suites.tritonbench)
            cases += [{**c, "split": "timing", "seed": seed} for c in refs.timing_cases(ref)]
        return cases, lambda case, ran: refs.check(self.task, ref, case, ran, self.settings.compare_device)

    def prefetch(self, case: dict) -> None:
        """Nothing: the suite's own kernel is the oracle, computed once per task (fitness.engine.script_eval)."""

    def check_timed(self, case: dict, seed: int, candidate: Any, baseline: Any) -> str:
        return compare_tree_on(self.settings.compare_device, candidate, baseline, self.task.tolerance, slack=4.0,
                               path="output")


Judge = FunctionJudge | ScriptJudge  # what an evaluator asks of a task's kind


def judge_for(task: Task, settings: StageSettings, outputs: OutputsChecker, refs: ScriptReferences) -> Judge:
    """The task's judge, handed the oracle of its kind: the engine's reference, or the suite's kernel."""
    return ScriptJudge(task, settings, refs) if task.script is not None else FunctionJudge(task, settings, outputs)
