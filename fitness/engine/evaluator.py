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
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

import torch

from fitness.common.compare import compare_where_room
from fitness.common.flags import Flag
from fitness.common.reference import ReferenceCache, compare_case, with_variant
from fitness.engine.correctness import Traces, run_correctness
from fitness.engine.judges import Judge, judge_for
from fitness.engine.measuring import BASELINE_CHILDREN, MeasuringTurn
from fitness.engine.pool import CancelCheck, Cancelled, ChildProcess, WorkerFailure, WorkerPool
from fitness.engine.reference_service import REFERENCE_CHILDREN, ReferenceService
from fitness.engine.replay import REFERENCES_AHEAD as REFERENCES_AHEAD
from fitness.engine.replay import inplace_problem as inplace_problem
from fitness.engine.replay import replay
from fitness.engine.sandbox import detect
from fitness.engine.script_eval import ScriptReferences
from fitness.engine.static_gate import check_source
from fitness.engine.verdict import TASK_CODE_RAISED, UnitStats, Verdict, biased_aa
from suites.task import Task, failure_line

# clean children at least (they replay, then time): one measuring, others replaying or getting ready;
# as many as correctness workers (H100 builtin with 8 workers and 5 clean children: the clean
# children, busy 87%, bound the steady rate)
TIMING_CHILDREN = 3
# per pool at least, else a third of its slots; each holds a CUDA context (~0.5 GiB of GPU memory)
SPARE_CHILDREN = 2


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
        data = tuple(p for p in (config.suite_path, os.environ.get("TRITON_EVOLVE_DATA"),
                                 os.environ.get("TRITON_EVOLVE_CACHE"), *config.task_dirs) if p)
        self.sandbox = detect(not config.sandbox, config.triton_cache, data)
        mem = int(config.mem_limit_gb * 2**30)
        # on a GPU a few children wait forked with CUDA started (fitness.engine.pool.WorkerPool)
        def spares(size: int) -> int:
            return max(SPARE_CHILDREN, -(-size // 3)) if self.gpu else 0
        self.pool = WorkerPool(config.workers, self.sandbox, self.interpret, mem, config.triton_cache,
                               spares=spares(config.workers))
        # one measuring turn per GPU (the baseline lock): the replay children and the baseline child take
        # turns in it, while the next candidates' replay children get ready beside it
        n_clean = max(TIMING_CHILDREN, config.workers)

        def clean(size: int, spares: int) -> WorkerPool:
            return WorkerPool(size, self.sandbox, False, mem, config.triton_cache, clean=True, spares=spares)
        self.timer = clean(n_clean, spares(n_clean)) if self.gpu else None
        self.turn = MeasuringTurn(self, clean(BASELINE_CHILDREN, 0)) if self.gpu else None
        self.references = references or ReferenceCache(config.reference_cache_bytes, self.compare_device)
        # on a GPU the references and comparisons run in clean children (fitness.engine.reference_service)
        self.ref_service = ReferenceService(clean(REFERENCE_CHILDREN, 0), self.references, self.task_spec,
                                            config.timeout_s) if self.gpu else None
        self.script_refs = ScriptReferences(self.pool, config.seeds, self.interpret, config.timeout_s, self.task_spec)
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
                v = self._verdict(t)
                v.reason, v.device = f"{TASK_CODE_RAISED}: {failure_line(e)}", self.pool.info().get("device", "")
                return v  # that task fails; the others are validated
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
        return self.evaluate(task, source) or self._verdict(task)

    def _reference_verdict(self, task: Task, cancel: CancelCheck | None = None) -> Verdict | None:
        v = self._verdict(task)
        try:
            problem = self.reference_status(task, cancel)
        except Cancelled:
            return None
        v.device = self.pool.info().get("device", "")
        if problem:
            v.reason = problem
            v.flags.append(Flag.INVALID_HERE)
        else:
            v.stage, v.correct, v.heldout_correct = "correct", True, True
            v.reason = "the reference runs here (the suite has no Triton starting kernel to time)"
        return v

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
        v = self._verdict(task)
        base_src = self.judge(task).baseline_source(aa)
        if aa:  # an A/A sentinel: the starting kernel against itself, where the judge can say so
            v.baseline, v.flags = self.judge(task).aa_name, v.flags + [Flag.AA_SENTINEL]
        if not self.sandbox.isolated:
            v.flags.append(Flag.NO_SANDBOX)
        traces: Traces | None = None
        gate = check_source(source, task.entry, self.judge(task).allowance())
        if not gate.ok:
            v.reason = f"static gate: {gate.reason}"
        else:
            source = source.decode() if isinstance(source, bytes) else source
            v.stage = "parse"
            # order: slots serve the candidates that began evaluating first, so a task's
            # starting kernel is not overtaken by the children other tasks make meanwhile
            traces = run_correctness(self, task, source, v, cancel, order=t0)
            if traces is not None and self.gpu:
                self._clean_stages(task, traces, v, timed, cancel, t0, base_src)
                if v.stage == "timed" and not aa and self.judge(task).is_baseline(source):
                    biased_aa(v, source)
            elif traces is not None:
                self._replay(task, source, traces, v, cancel)
            if v.passed and not self.gpu:
                v.timing = "not timed: no GPU here; correctness ran under the Triton interpreter on CPU"
                v.flags.append(Flag.UNTIMED_NO_GPU)
            elif v.passed and not timed:
                v.timing = "not timed: asked not to (--no-time)"
        if v.passed and not v.reason:
            v.reason = (f"passed {len(v.cases)} correctness cases "
                        f"({sum(c['split'] == 'heldout' for c in v.cases)} held-out); "
                        + self._replayed_words(task, traces))
            if v.timing.startswith("not timed"):
                v.reason += "; " + v.timing
        v.elapsed_s = round(time.monotonic() - t0, 3)
        return v

    def _verdict(self, task: Task) -> Verdict:
        return Verdict(task=task.name, sandbox=self.sandbox.description, baseline=self.judge(task).baseline_name)

    def judge(self, task: Task) -> Judge:
        """The task's judge (fitness.engine.judges): what its kind decides, kept per task."""
        key = (task.suite, task.name)
        if key not in self._judges:
            self._judges[key] = judge_for(self, task)
        return self._judges[key]

    def reference_status(self, task: Task, cancel: CancelCheck | None = None) -> str:
        """'' when the task's reference runs here, else why not (script tasks; builtin always run)."""
        return self.judge(task).status(cancel)

    def task_spec(self, task: Task) -> dict:
        """How a child finds the task: the suite, the name and the suite's data folder."""
        return {"suite": task.suite, "name": task.name, "path": self.config.suite_path}

    def _clean_stages(self, task: Task, traces: dict, v: Verdict, timed: bool, cancel: CancelCheck | None,
                      order: float, base_src: str | None) -> None:
        """On a GPU: one clean child (it never imports the candidate) replays every recorded call
        and then, if asked, times the replayed kernels against the baseline. One fork, one CUDA
        start and one set of launchers per candidate for both stages."""
        assert self.timer is not None and self.turn is not None, "the clean stages run on a GPU only"
        t0 = time.monotonic()
        try:
            with self.timer.child(cancel, order) as clean:
                held = time.monotonic()
                v.phases["clean_wait_s"] = round(held - t0, 3)
                try:
                    if self._replay(task, "", traces, v, cancel, clean) is None:
                        return
                    if timed:
                        if cancel and cancel():
                            raise Cancelled()
                        self.turn.time(task, traces, v, clean, base_src, cancel)
                finally:  # the clean child's slot held for this candidate: what bounds it, when it does
                    v.phases["clean_held_s"] = round(time.monotonic() - held, 3)
        except WorkerFailure as e:  # the clean child could not be had (its zygote failed)
            self._fail(v, f"replay: {e}")
            v.flags.append(Flag.WORKER_REPLACED)

    def _replay(self, task: Task, source: str, traces: dict, v: Verdict, cancel: CancelCheck | None = None,
                clean: ChildProcess | None = None) -> dict | None:
        """Each recorded call replayed alone, in a fresh child (`clean`, on a GPU), on inputs from
        a new seed, and compared with the engine's reference: the candidate's own kernels did the
        work, or it fails. Script tasks' benchmark calls are checked in the timing instead (their
        reference is the suite's kernel)."""
        return replay(self, task, source, traces, v, cancel, clean)

    def _replayed_words(self, task: Task, traces: dict | None) -> str:
        """What the replay established, for the pass reason: how many calls, and what ran."""
        if not self.judge(task).replays:
            return ("calls not replayed: a script task's benchmark calls are checked in the timing (GPU only), "
                    "against the suite's kernel")
        n = len(traces.calls) if isinstance(traces, Traces) else len(traces or {})
        what = ("the recorded compiled kernels on engine-allocated buffers" if self.gpu else
                "the candidate's @triton.jit kernels built from their source alone (its module never "
                "imported), under the Triton interpreter")
        return (f"each of the {n} calls replayed alone on fresh inputs: {what}, plus only the engine's "
                f"own tensor primitives")

    @staticmethod
    def _fail(v: Verdict, reason: str) -> None:
        v.reason = reason
        v.correct = v.heldout_correct = False
        v.stage = "call"
        return None

    def prefetch_reference(self, task: Task, case: dict) -> None:
        """The case's reference computed while its outputs are on their way."""
        (self.ref_service or self.references).prefetch(task, case)

    def check_case(self, task: Task, case: dict, outputs: Any) -> str:
        """'' or what is wrong with a child's `outputs` (as they came, on the CPU) for `case`."""
        if outputs is None:
            return "no outputs returned"
        if self.ref_service is not None:
            problem = self.ref_service.check(task, case, outputs)
            if problem is not None:
                return with_variant(problem, case)
        refs, expected = self.references.get(task, case)  # here: no GPU, or no reference child answered
        problem = compare_where_room(self.references.device,
                                     lambda o, r: compare_case(task, o, r, expected, case), outputs, refs)
        return with_variant(problem, case)

    # -------------------------------------------------------------------------------------
    @property
    def compare_device(self) -> str:
        """Where outputs are compared: on a GPU machine the GPU, where it has room. A dozen passes
        over float64 copies of 64 MiB outputs took the engine 3 s of CPU per candidate on the H100
        machine, CPU its correctness workers needed for compiling."""
        return "cuda" if self.gpu else "cpu"

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

    def units(self, evaluations: int = 0) -> list[UnitStats]:
        return [UnitStats("local", self.pool.info().get("device", "?"), self.gpu, self.config.workers,
                          evaluations, round(self.pool.busy_s, 3), round(self.measuring_s, 3))]
