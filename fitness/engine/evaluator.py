"""The fitness cascade: gate -> compile and call -> correctness -> replay -> timing.

The trust boundary: a process that imported a candidate is the candidate's. So the engine
never runs candidate code, and nothing a candidate's process says is evidence unless the engine
can check it:
- correctness: the candidate's child (a fresh fork, fitness.engine.pool) returns outputs, which the
  engine compares with a float64 reference it computes itself; seeds and held-out shapes are
  drawn fresh for every evaluation, and the child learns a case only when it runs it;
- the work: each call's trace (fitness.clean.replayer) is replayed alone in another fresh child on inputs
  from a seed the candidate never saw; the engine compares the replay's outputs with its own
  reference and bounds the torch work counted there;
- timing (GPU): the replay child (which never imports the candidate) and a long-lived baseline
  child (which only ever loads the suite's code) take turns, one trial each, on the same draws;
  the engine checks each reported time against its own clock and the outputs of the timed
  regions against its reference.
The checks inside the candidate's child (launch counts, torch-work meter, tamper snapshot) stay
as early filters with clear messages for honest mistakes; no verdict depends on them.

This module wires the stages, once: each is handed only what it needs (fitness.engine.settings,
the engine's oracle, its pool or child), returns a frozen record of what it found with a Failure
inside when it failed the candidate, and fitness.engine.outcome.verdict_from makes the verdict.
"""
from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import torch

from fitness.common.flags import Flag
from fitness.common.reference import ReferenceCache
from fitness.engine.correctness import Correctness, CorrectnessResult, Traces
from fitness.engine.gpu_memory import CANDIDATE_SHARE, CONTEXT_BYTES, ChildRole, GpuMemory, device_memory, out_of_memory
from fitness.engine.judges import Judge, ScriptJudge, judge_for
from fitness.engine.measuring import BASELINE_CHILDREN, MeasuringTurn
from fitness.engine.outcome import CleanChild, Evaluation, reference_verdict, task_code_verdict, verdict_from
from fitness.engine.outputs import EngineOracle
from fitness.engine.pool import CancelCheck, Cancelled, WorkerFailure, WorkerPool, raise_if_cancelled
from fitness.engine.reference_service import REFERENCE_CHILDREN, ReferenceService
from fitness.engine.replay import REFERENCES_AHEAD as REFERENCES_AHEAD
from fitness.engine.replay import Replayer, ReplayResult
from fitness.engine.replay import inplace_problem as inplace_problem
from fitness.engine.sandbox import detect
from fitness.engine.script_eval import ScriptReferences
from fitness.engine.settings import StageSettings
from fitness.engine.static_gate import check_source
from fitness.engine.trials import TimingResult
from fitness.engine.verdict import Failure, UnitStats, Verdict
from suites.task import Task, failure_line

# clean children at least (they replay, then time): one measuring, others replaying or getting ready;
# as many as correctness workers (H100 builtin with 8 workers and 5 clean children: the clean
# children, busy 87%, bound the steady rate)
TIMING_CHILDREN = 3
# per pool at least, else a third of its slots; each holds a CUDA context (~0.5 GiB of GPU memory)
SPARE_CHILDREN = 2
R = TypeVar("R")


def slots_per_unit(workers: int) -> int:
    """Evaluations kept in flight per evaluator: one per correctness worker, the rest waiting for
    the measuring turn or being compared, so the workers never wait to be handed a candidate."""
    return 3 * max(1, workers) + 1


@dataclass(frozen=True)
class EvalConfig:
    seeds: tuple[int, ...] = (0, 1)  # every case runs once per seed: fresh data defeats result caches
    workers: int = 1  # correctness workers (compile + call + check), in parallel
    device: str = "auto"  # "auto", "cpu" (Triton interpreter) or "cuda"
    timeout_s: float = 120.0  # one candidate's correctness run, compile included
    timing_timeout_s: float = 300.0
    trials: int = 21  # the most timed trials per side and shape
    # trials after which a shape stops once both sides are steady (spread under
    # fitness.engine.measuring.STEADY); H100 builtin: trials held 86% of the measuring turn at 21
    min_trials: int = 7
    baseline: str = "reference"  # "reference" (PyTorch) or "start" (the task's starting kernel)
    mem_limit_gb: float = 16.0  # host memory per worker
    recycle_every: int = 50
    sandbox: bool = True
    reference_cache_bytes: int | None = None  # None: fitness.common.reference.default_bytes()
    suite_path: str | None = None
    # what the workers read besides the code and suite_path: a user suite's file and folder
    # (suites.user.visible_paths), which the sandbox would hide when they live under /tmp
    task_dirs: tuple[str, ...] = ()
    triton_cache: str | None = None  # compiled-kernel cache folder (default: the user cache)
    extra_flags: tuple[str, ...] = field(default_factory=tuple)


class Evaluator:
    def __init__(self, config: EvalConfig = EvalConfig(), references: ReferenceCache | None = None):
        self.config = config
        want_gpu = config.device in ("auto", "cuda")
        self.gpu = want_gpu and torch.cuda.is_available()
        if config.device == "cuda" and not self.gpu:
            raise RuntimeError("--device cuda was asked for but torch sees no GPU")
        self.interpret = not self.gpu
        # what the stages read of the options and the machine: handed to each, wired here only
        self.settings = StageSettings(config.seeds, config.timeout_s, config.timing_timeout_s, config.trials,
                                      config.min_trials, config.baseline, self.interpret, self.gpu, config.suite_path)
        data = tuple(p for p in (config.suite_path, os.environ.get("TRITON_EVOLVE_DATA"),
                                 os.environ.get("TRITON_EVOLVE_CACHE"), *config.task_dirs) if p)
        self.sandbox = detect(not config.sandbox, config.triton_cache, data)
        mem = int(config.mem_limit_gb * 2**30)
        # on a GPU a few children wait forked with CUDA started (fitness.engine.pool.WorkerPool)
        def spares(size: int) -> int:
            return max(SPARE_CHILDREN, -(-size // 3)) if self.gpu else 0
        # admission by GPU memory: every child of every pool holds its role's need while it lives
        self.memory: GpuMemory | None = device_memory() if self.gpu else None
        self.pool = WorkerPool(config.workers, self.sandbox, self.interpret, mem, config.triton_cache,
                               spares=spares(config.workers), role=ChildRole("candidate", self.memory))
        # one measuring turn per GPU (the baseline lock): the replay children and the baseline child take
        # turns in it, while the next candidates' replay children get ready beside it
        n_clean = max(TIMING_CHILDREN, config.workers)

        def clean(size: int, spares: int, role: str) -> WorkerPool:
            return WorkerPool(size, self.sandbox, False, mem, config.triton_cache, spares, ChildRole(role, self.memory))
        self.timer = clean(n_clean, spares(n_clean), "clean") if self.gpu else None
        self.turn = MeasuringTurn(self.settings, clean(BASELINE_CHILDREN, 0, "baseline")) if self.gpu else None
        if self.memory is not None:  # the spares' CUDA contexts, held before any admission
            self.memory.set_aside(CONTEXT_BYTES * (self.pool.spares + (self.timer.spares if self.timer else 0)))
        self.references = references or ReferenceCache(config.reference_cache_bytes, self.compare_device)
        # on a GPU the references and comparisons run in clean children (fitness.engine.reference_service)
        self.ref_service = ReferenceService(clean(REFERENCE_CHILDREN, 0, "reference"), self.references,
                                            self.settings.task_spec,
                                            config.timeout_s) if self.gpu else None
        self.outputs = EngineOracle(self.references, self.ref_service)
        self.script_refs = ScriptReferences(self.pool, config.seeds, self.interpret, config.timeout_s,
                                            self.settings.task_spec)
        self.correctness = Correctness(self.pool, self.settings, self.sandbox.description)
        self.replayer = Replayer(self.pool, self.settings, self.outputs)
        self._judges: dict[tuple, Judge] = {}

    def close(self) -> None:
        self.pool.close()
        if self.ref_service is not None:
            self.ref_service.close()
        if self.timer:
            if self.turn is not None:
                self.turn.close()
                if self.turn.pool is not None:
                    self.turn.pool.close()
            self.timer.close()

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -------------------------------------------------------------------------------------
    def evaluate_many(self, items: list[tuple[Task, str]]) -> list[Verdict | None]:
        # twice as many threads as correctness workers: while some candidates wait for the single
        # timing worker, the correctness workers already run the next ones
        with ThreadPoolExecutor(max(1, 2 * self.config.workers)) as ex:
            return list(ex.map(lambda it: self.evaluate(*it), items))

    def validate_iter(self, tasks: list[Task], timed: bool = True) -> Iterator[Verdict]:
        """Each task's starting kernel evaluated, as verdicts complete; a task with none
        (KernelBench) gets its reference run. Stopped early (Ctrl-C in the caller), the tasks
        not begun are dropped and those waiting for a worker give up: the thread pool would
        otherwise have evaluated every remaining task before the interrupt got through."""
        stop = threading.Event()

        def one(t: Task) -> Verdict | None:
            if stop.is_set():
                return None
            try:
                if t.start_source:
                    return self.evaluate(t, t.start_source, timed, cancel=stop.is_set)
                return self._reference_verdict(t, stop.is_set)
            except Exception as e:  # noqa: BLE001 - the task's own code (a reference raising on a drawn shape)
                return task_code_verdict(self._evaluation(t), self.pool.device(), failure_line(e))
        ex = ThreadPoolExecutor(max(1, 2 * self.config.workers))
        try:
            futures = [ex.submit(one, t) for t in tasks]
            for f in as_completed(futures):
                verdict = f.result()
                if verdict is not None:
                    yield verdict
        finally:
            stop.set()
            ex.shutdown(wait=False, cancel_futures=True)

    def retime(self, task: Task, source: str) -> Verdict:
        """A second measurement of a candidate (export's): the whole cascade again, since a
        timing rests on traces recorded and replayed for this very evaluation."""
        return self.evaluate(task, source) or verdict_from(self._evaluation(task))

    def _reference_verdict(self, task: Task, cancel: CancelCheck | None = None) -> Verdict | None:
        try:
            problem = self.reference_status(task, cancel)
        except Cancelled:
            return None
        return reference_verdict(self._evaluation(task), self.pool.device(), problem)

    def evaluate(self, task: Task, source: str | bytes, timed: bool = True, cancel: CancelCheck | None = None,
                 aa: bool = False) -> Verdict | None:
        """The verdict; None when `cancel()` turned true before the candidate reached a worker or
        the timing worker (a stopping run: the candidate stays unevaluated, for a resume)."""
        try:
            return self._evaluate(task, source, timed, cancel, aa)
        except Cancelled:
            return None

    def _evaluate(self, task: Task, source: str | bytes, timed: bool, cancel: CancelCheck | None,
                  aa: bool = False) -> Verdict:
        t0 = time.monotonic()
        found = self._stages(task, source, timed, cancel, aa, t0)
        return verdict_from(found, round(time.monotonic() - t0, 3))

    def _stages(self, task: Task, source: str | bytes, timed: bool, cancel: CancelCheck | None, aa: bool,
                t0: float) -> Evaluation:
        """Each stage in turn, handed what it needs; what each found, for verdict_from."""
        judge = self.judge(task)
        base_src = judge.baseline_source(aa)
        found = self._evaluation(task, aa, timed)
        gate = check_source(source, task.entry, judge.allowance())
        if not gate.ok:
            return replace(found, gate=Failure(f"static gate: {gate.reason}", "none"))
        source = source.decode() if isinstance(source, bytes) else source
        # order: slots serve the candidates that began evaluating first, so a task's
        # starting kernel is not overtaken by the children other tasks make meanwhile
        correct = self._alone_on_oom(lambda: self.correctness.run(task, judge, source, cancel, order=t0),
                                     lambda c: (c.failure,), _cap_named, cancel)
        found = replace(found, correctness=correct)
        if correct.traces is None:
            return found
        found = replace(found, replayed=self._replayed_words(judge, correct.traces))
        if not self.gpu:
            return replace(found, replay=self.replayer.run(task, judge, source, correct.traces, cancel))
        traces = correct.traces
        replayed, timing, clean = self._alone_on_oom(
            lambda: self._clean_stages(task, judge, traces, timed, cancel, t0, (base_src, source)),
            lambda r: (r[0].failure, r[1] and r[1].failure, r[2].failure), lambda r: _engines_own(*r), cancel)
        aa_source = source if not aa and judge.is_baseline(source) else None
        return replace(found, replay=replayed, timing=timing, clean=clean, aa_source=aa_source)

    def _alone_on_oom(self, stage: Callable[[], R], failures: Callable[[R], tuple], named: Callable[[R], R],
                      cancel: CancelCheck | None) -> R:
        """The stage, run again alone where it failed for the GPU's memory (fitness.engine.gpu_memory),
        and `named`: what still ran out of memory alone says so. Without the ledger (no NVML) it runs
        once, and nothing claims it ran alone."""
        if self.memory is None:
            return stage()
        return named(self.memory.retried(stage, lambda r: (f.reason for f in failures(r) if f is not None),
                                         functools.partial(raise_if_cancelled, cancel)))

    def _evaluation(self, task: Task, aa: bool = False, timed: bool = True) -> Evaluation:
        """An evaluation of `task` before any stage ran: what this evaluator says of every one."""
        judge = self.judge(task)
        # aa: an A/A sentinel, the starting kernel against itself, where the judge can say so
        flags = ((Flag.AA_SENTINEL,) if aa else ()) + (() if self.sandbox.isolated else (Flag.NO_SANDBOX,))
        return Evaluation(task.name, self.sandbox.description, judge.aa_name if aa else judge.baseline_name,
                          flags, self.gpu, timed)

    def judge(self, task: Task) -> Judge:
        """The task's judge (fitness.engine.judges): what its kind decides, kept per task."""
        key = (task.suite, task.name)
        if key not in self._judges:
            self._judges[key] = judge_for(task, self.settings, self.outputs, self.script_refs)
        return self._judges[key]

    def reference_status(self, task: Task, cancel: CancelCheck | None = None) -> str:
        """'' when the task's reference runs here, else why not (script tasks; builtin always run)."""
        return self.judge(task).status(cancel)

    def _clean_stages(self, task: Task, judge: Judge, traces: Traces, timed: bool, cancel: CancelCheck | None,
                      order: float, sources: tuple[str | None, str]) -> tuple[ReplayResult, TimingResult | None,
                                                                           CleanChild]:
        """On a GPU: one clean child (it never imports the candidate) replays every recorded call
        and then, if asked, times the replayed kernels against the baseline, each kernel compiled
        there from the candidate's source (`sources`: the baseline's and the candidate's). One
        fork, one CUDA start and one set of launchers per candidate for both stages."""
        base_src, source = sources
        assert self.timer is not None and self.turn is not None, "the clean stages run on a GPU only"
        t0 = time.monotonic()
        replayed, timing = ReplayResult(), None
        wait_s = held_s = None
        try:
            with self.timer.child(cancel, order) as clean:
                held = time.monotonic()
                wait_s = round(held - t0, 3)
                try:
                    replayed = self.replayer.run(task, judge, source, traces, cancel, clean)
                    if replayed.failure is None and timed:
                        if cancel and cancel():
                            raise Cancelled()
                        timing = self.turn.time(task, judge, traces, clean, base_src, cancel, source)
                finally:  # the clean child's slot held for this candidate: what bounds it, when it does
                    held_s = round(time.monotonic() - held, 3)
        except WorkerFailure as e:  # the clean child could not be had (its zygote failed)
            lost = Failure(f"replay: {e}", "call", (Flag.WORKER_REPLACED,))
            return replayed, timing, CleanChild(wait_s, held_s, lost)
        return replayed, timing, CleanChild(wait_s, held_s)

    def _replayed_words(self, judge: Judge, traces: Traces) -> str:
        """What the replay established, for the pass reason: how many calls, and what ran."""
        if isinstance(judge, ScriptJudge):
            return ("its benchmark call replayed alone on another draw, against the suite's kernel there: the "
                    "candidate's @triton.jit kernels built from their source alone, under the Triton interpreter"
                    if judge.replayed_calls(traces.calls) else "calls not replayed here: a script task's benchmark "
                    "calls are replayed and checked in the timing (GPU), against the suite's kernel on the same draws")
        what = ("the candidate's @triton.jit kernels compiled in the clean child from their source alone (the "
                "builds its launches recorded), on engine-allocated buffers" if self.gpu else
                "the candidate's @triton.jit kernels built from their source alone (its module never "
                "imported), under the Triton interpreter")
        return (f"each of the {len(traces.calls)} calls replayed alone on fresh inputs: {what}, plus only the "
                f"engine's own tensor primitives")

    def prefetch_reference(self, task: Task, case: dict) -> None:
        """The case's reference computed while its outputs are on their way."""
        self.outputs.prefetch(task, case)

    def check_case(self, task: Task, case: dict, outputs: Any) -> str:
        """'' or what is wrong with a child's `outputs` (as they came, on the CPU) for `case`."""
        return self.outputs.check_case(task, case, outputs)

    # -------------------------------------------------------------------------------------
    @property
    def compare_device(self) -> str:
        """Where outputs are compared (fitness.engine.settings.StageSettings.compare_device)."""
        return self.settings.compare_device

    @property
    def measuring_s(self) -> float:
        """Time the GPU's measuring turn was held: the exclusive resource."""
        return self.turn.busy_s if self.turn else 0.0

    @property
    def correctness_busy_s(self) -> float:
        return self.pool.busy_s

    @property
    def workers(self) -> int:
        return self.config.workers

    @property
    def gpus(self) -> int:
        return int(self.gpu)

    @property
    def parallelism(self) -> int:
        return slots_per_unit(self.config.workers)

    def unit_stats(self, unit: str) -> UnitStats:
        """A Dask unit's running totals (fitness.engine.cluster); its evaluations are counted by the
        engine, per command."""
        return UnitStats(unit=unit, device=self.pool.device("?"), gpu=self.gpu,
                         workers=self.config.workers, evaluations=0,
                         correctness_busy_s=self.pool.busy_s, measuring_s=self.measuring_s)

    def units(self, evaluations: int = 0) -> list[UnitStats]:
        return [UnitStats("local", self.pool.device("?"), self.gpu, self.config.workers,
                          evaluations, round(self.pool.busy_s, 3), round(self.measuring_s, 3))]


def _cap_named(correct: CorrectnessResult) -> CorrectnessResult:
    """A candidate's process that ran out of GPU memory with the GPU to itself: its failure, with its cap named."""
    f = correct.failure
    if f is None or not out_of_memory(f.reason):
        return correct
    note = (f"the candidate's process ran out of GPU memory with the GPU to itself (its cap: {CANDIDATE_SHARE:.0%} "
            "of the GPU's memory): ")
    return replace(correct, failure=replace(f, reason=note + f.reason))


def _engines_own(replayed: ReplayResult, timing: TimingResult | None,
                 clean: CleanChild) -> tuple[ReplayResult, TimingResult | None, CleanChild]:
    """A clean or baseline child that ran out of GPU memory even alone: the evaluator's failure, flagged so."""
    def named(f: Failure | None) -> Failure | None:
        if f is None or not out_of_memory(f.reason):
            return f
        return Failure(f"the evaluator ran out of GPU memory in its own child, even alone (not the candidate's "
                       f"failure): {f.reason}", f.stage, f.flags + (Flag.ENGINE_OUT_OF_MEMORY,))
    timing = replace(timing, failure=named(timing.failure)) if timing is not None else None
    return replace(replayed, failure=named(replayed.failure)), timing, replace(clean, failure=named(clean.failure))
