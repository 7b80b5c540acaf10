"""Correctness for script tasks (TritonBench, ROCm, KernelBench): the reference's results, run
once per task in a worker and kept here, and the per-case judgement of a candidate's results.

Cases: the suite's test at the run's seeds (tuning) and at another seed (held-out). When the
test's results are weak (no tensor of more than one element: a shape, a flag, a scalar), the
call on the benchmark inputs is compared too: the timed inputs are tuning cases, two others held
out. A reference that fails here makes the task `invalid-here`, with the reason.

Every task's reference also runs once on the benchmark inputs it will be timed or judged on, then
again on the same draw inside guard bands (fitness.clean.guard_bands): an input whose result depends on
the bytes around its tensors (or whose bands the call wrote) is dropped, with its reason kept in
`ScriptReference.unstable`; a task left with none is `invalid-here`. On a GPU those inputs are the
timed and held-out ones; under the interpreter (which times nothing) the smallest one, which is
also the one a weak test is backed by there.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from fitness.clean.guard_bands import Finding
from fitness.common.compare import compare_tree_on, count_elements, is_weak
from fitness.common.messages import Script
from fitness.common.replies import CaseRan, Reply, ScriptRan
from fitness.engine.pool import CancelCheck, Cancelled, WorkerFailure, WorkerPool
from suites.script import GIVEN, tensors_of
from suites.task import Task
from suites.validation import short_reason

MAX_TIMED = 6  # benchmark inputs timed per candidate (spread over the suite's list, largest usable included)
HELDOUT_PERF = 2
# benchmark inputs above this are not timed: a suite's largest (3 GiB of fp16 made by torch.rand on
# the host, say) took 35 s to draw, and the timing worker's GPU cache could not hold those of a
# dozen tasks, so every candidate drew them again (seen on the H100: 8 s of timing per candidate)
MAX_TIMED_BYTES = 256 << 20
HELDOUT_SEED = 100
# under the interpreter a script task's benchmark call is recorded at the run's seed and replayed on
# another draw, where the suite's reference ran too (on a GPU the timing replays it on its own draws)
REPLAY_SEED = 200
TORCH_WORK_SLACK = 0.01  # share of the outputs a candidate may compute in torch beyond the reference


@dataclass
class ScriptReference:
    error: str = ""
    weak: bool = False
    perf_count: int = 0
    timed: tuple[int, ...] = ()
    heldout_perf: tuple[int, ...] = ()
    results: dict = field(default_factory=dict)  # case key -> {"tree", "torch_elements"}
    unstable: dict[int, Finding] = field(default_factory=dict)  # benchmark inputs dropped, and why
    unchecked: str = ""  # why (some of) the benchmark inputs were not checked in guard bands
    replayed: tuple[int, ...] = ()  # under the interpreter: the benchmark input whose call is replayed

    def dropped(self) -> str:
        """The benchmark inputs left out, for a line of validate's table ('' when none)."""
        if not self.unstable:
            return ""
        whats = sorted({f.what for f in self.unstable.values()})
        return f"perf {', '.join(map(str, sorted(self.unstable)))} left out ({'; '.join(whats)})"


def spread(n: int, k: int) -> tuple[int, ...]:
    """k indices spread evenly over range(n), the last one included."""
    if n <= k:
        return tuple(range(n))
    return tuple(sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})) if k > 1 else (n - 1,)


def timing_inputs(sizes: list[int], max_bytes: int = MAX_TIMED_BYTES) -> list[int]:
    """Indices of the benchmark inputs of at most `max_bytes` (unknown sizes count as small);
    the smallest one when none is."""
    small = [i for i, b in enumerate(sizes) if b <= max_bytes]
    return small or ([min(range(len(sizes)), key=sizes.__getitem__)] if sizes else [])


def drop_unstable(ref: ScriptReference, checked: tuple[int, ...], findings: list[dict]) -> str:
    """Drops the benchmark inputs with a guard-band finding from `ref`'s timed and held-out ones;
    returns the task's error when none of those checked, or of those to be timed, is left."""
    for i, wire in zip(checked, findings):
        finding = Finding.from_wire(wire)
        if finding is not None:
            ref.unstable[i] = finding
    if not ref.unstable:
        return ""
    had_timed = bool(ref.timed)
    ref.timed = tuple(i for i in ref.timed if i not in ref.unstable)
    ref.heldout_perf = tuple(i for i in ref.heldout_perf if i not in ref.unstable)
    if (had_timed and not ref.timed) or len(ref.unstable) == len(checked):
        i = min(ref.unstable)
        f = ref.unstable[i]
        # the index before the first ': ', so that a brief reason (suites.validation.brief) keeps the detail
        return f"the suite's reference {f.what} on the benchmark inputs (perf {i}): {f.detail}"
    return ""


def key(case: dict) -> tuple:
    return case["kind"], case["shape"].get("perf"), case["seed"]


def test_case(split: str, seed: int) -> dict:
    return {"split": split, "kind": "test", "shape": {"test": "result_gold"}, "dtype": GIVEN, "seed": seed}


def perf_case(split: str, index: int, seed: int) -> dict:
    return {"split": split, "kind": "perf", "shape": {"perf": index}, "dtype": GIVEN, "seed": seed}


class ScriptReferences:
    def __init__(self, pool: WorkerPool, seeds: tuple[int, ...], interpret: bool, timeout_s: float,
                 spec: Callable[[Task], dict]):
        self.pool, self.seeds, self.interpret, self.timeout_s, self.spec = pool, seeds, interpret, timeout_s, spec
        self._items: dict[str, ScriptReference] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def get(self, task: Task, cancel: CancelCheck | None = None) -> ScriptReference:
        """The task's reference results, computed once however many candidates wait for them;
        raises Cancelled when `cancel()` turns true while waiting (nothing is cached then)."""
        with self._lock:
            lock = self._locks.setdefault(task.name, threading.Lock())
        while not lock.acquire(timeout=0.2):
            if cancel and cancel():
                raise Cancelled()
        try:
            if task.name not in self._items:
                self._items[task.name] = self._compute(task, cancel)
            return self._items[task.name]
        finally:
            lock.release()

    def _run(self, req: Script, cancel: CancelCheck | None = None) -> Reply[ScriptRan]:
        """The reference child's reply; a failed one where it answered no result per case."""
        try:
            reply = self.pool.ask(req, 2 * self.timeout_s, cancel)
        except WorkerFailure as e:
            return Reply.failed(str(e))
        if reply.payload is not None and len(reply.payload.results) != len(req.cases):  # fail closed
            return Reply.failed(f"{len(req.cases)} cases sent, the reference's child answered "
                                f"{len(reply.payload.results)}")
        return reply

    def _compute(self, task: Task, cancel: CancelCheck | None = None) -> ScriptReference:
        tests = self.test_cases()
        reply = self._run(Script(task=self.spec(task), cases=tuple(tests), count=True), cancel)
        if reply.error or reply.payload is None:
            return ScriptReference(error=f"the suite's reference fails here: {reply.error}")
        ran = reply.payload
        ref = ScriptReference(results={key(c): r for c, r in zip(tests, ran.results)})
        ref.weak = is_weak(ran.results[0]["tree"])
        if ran.perf_error:
            return ScriptReference(error=f"the suite's benchmark inputs fail here: {ran.perf_error}")
        ref.perf_count = ran.perf_count
        sizes = list(ran.perf_bytes or ()) or [0] * ref.perf_count
        if not self.interpret:
            usable = timing_inputs(sizes)
            ref.timed = tuple(usable[j] for j in spread(len(usable), MAX_TIMED))
            rest = [i for i in usable if i not in ref.timed]
            ref.heldout_perf = tuple(rest[j] for j in spread(len(rest), HELDOUT_PERF))
            checked = ref.timed + ref.heldout_perf
        else:  # the interpreter: the smallest input only (the first among equals, or unknown sizes)
            checked = tuple(timing_inputs(sizes, 0)[:1])
            ref.timed = checked if ref.weak else ()
        problem = self._benchmark_inputs(task, ref, checked, cancel)
        if problem:
            return ScriptReference(error=problem, unstable=ref.unstable)
        if self.interpret and checked and checked[0] not in ref.unstable and not ref.unchecked:
            self._replay_reference(task, ref, checked[0], cancel)
        return ref

    def _replay_reference(self, task: Task, ref: ScriptReference, index: int, cancel: CancelCheck | None) -> None:
        """Under the interpreter: the suite's reference on the draw the replay of a candidate's
        benchmark call runs on (none kept where it fails there: that call is then not replayed)."""
        case = self.replay_case(index)
        ran = self._run(Script(task=self.spec(task), cases=(case,), count=False, keep=True), cancel)
        if not ran.error and ran.payload is not None:
            ref.results[key(case)] = ran.payload.results[0]
            ref.replayed = (index,)

    def _benchmark_inputs(self, task: Task, ref: ScriptReference, checked: tuple[int, ...],
                          cancel: CancelCheck | None) -> str:
        """The reference on the `checked` benchmark inputs, plainly and inside guard bands: a weak
        task keeps the plain results as cases (and fails where they fail); unstable inputs are
        dropped. Returns why the task cannot be used here, or ''."""
        if not checked:
            return ""
        cases = [perf_case("tuning" if i in ref.timed else "heldout", i, self.seeds[0]) for i in checked]
        more = self._run(Script(task=self.spec(task), cases=tuple(cases), count=False, guard=True, keep=ref.weak),
                         cancel)
        if more.error or more.payload is None:
            if ref.weak:
                return f"the suite's reference fails here on the benchmark inputs: {more.error}"
            ref.unchecked = f"the benchmark inputs fail here: {short_reason(more.error or '')}"
            return ""  # a failure the timing reports, as it did before this check
        if ref.weak:
            ref.results.update({key(c): r for c, r in zip(cases, more.payload.results)})
        findings = list(more.payload.guard)
        skipped = {i: f.get("unchecked", "") for i, f in zip(checked, findings) if f.get("unchecked")}
        if more.fatal:  # the child stopped at a CUDA fault: the inputs after it were not run
            skipped.update({i: "not reached after a CUDA fault" for i in checked[len(findings):]})
        if skipped:
            ref.unchecked = "; ".join(f"perf {i}: {why}" for i, why in skipped.items())
        return drop_unstable(ref, checked, findings)

    def test_cases(self) -> list[dict]:
        return [test_case("tuning", s) for s in self.seeds] + [test_case("heldout", self.seeds[0] + HELDOUT_SEED)]

    def perf_cases(self, ref: ScriptReference) -> list[dict]:
        seed = self.seeds[0]
        return [perf_case("tuning", i, seed) for i in ref.timed] + \
               [perf_case("heldout", i, seed) for i in ref.heldout_perf]

    def replay_case(self, index: int) -> dict:
        """The draw a recorded benchmark call is replayed on under the interpreter (not the one recorded)."""
        return perf_case("replay", index, self.seeds[0] + REPLAY_SEED)

    def replay_check(self, task: Task, ref: ScriptReference, case: dict, outputs: tuple) -> str:
        """The replayed outputs of a benchmark call against the suite's reference on the same draw,
        flattened as a trace's outputs are."""
        expected = tensors_of(ref.results[key(self.replay_case(case["shape"]["perf"]))]["tree"])
        return compare_tree_on("cpu", list(outputs), expected, task.tolerance, slack=4.0, path="output")

    def timing_cases(self, ref: ScriptReference) -> list[dict]:
        """The benchmark inputs to be timed (the evaluator gives each a fresh seed)."""
        return [perf_case("timing", i, self.seeds[0]) for i in ref.timed]

    def cases(self, ref: ScriptReference) -> list[dict]:
        cases = self.test_cases() + (self.perf_cases(ref) if ref.weak else []) + \
            [perf_case("timing", i, self.seeds[0]) for i in ref.replayed]  # recorded, for the replay
        return sorted(cases, key=lambda c: c["split"] != "tuning")  # tuning first: the reply stops at a failure

    @staticmethod
    def check(task: Task, ref: ScriptReference, case: dict, result: CaseRan | None, device: str = "cpu") -> str:
        """'' or what is wrong with a candidate's `result` for `case`, compared on `device` where
        it has room (fitness.common.compare.compare_where_room)."""
        if result is None:
            return "no result returned"
        expected = ref.results[key(case)]
        problem = compare_tree_on(device, result.tree, expected["tree"], task.tolerance)
        if problem or not task.script.torch_work_relative:
            return problem
        extra = result.torch_elements - expected["torch_elements"]
        if extra > max(1024, TORCH_WORK_SLACK * count_elements(expected["tree"])):
            return f"torch computed {extra} elements outside Triton kernels beyond what the reference does"
        return ""
