"""The fitness cascade: gate -> compile and call -> correctness -> timing.

The engine process never runs candidate code. It reads the source (static gate), asks a worker
to run the candidate on inputs it can regenerate itself, compares what comes back with a float64
reference it computes on its own, and asks the timing worker (one per GPU) for timings that it
then floors at the roofline and aggregates.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field

import torch

from fitness.compare import compare_outputs, on_device
from fitness.pool import Cancelled, WorkerFailure, WorkerPool
from fitness.reference import ReferenceCache
from fitness.sandbox import detect
from fitness.script_eval import ScriptReferences
from fitness.static_gate import allowance, check_source
from fitness.verdict import Verdict, speedup_from_rows
from suites.task import Task


@dataclass(frozen=True)
class EvalConfig:
    seeds: tuple[int, ...] = (0, 1)  # every case runs once per seed: fresh data defeats result caches
    workers: int = 1  # correctness workers (compile + call + check), in parallel
    device: str = "auto"  # "auto", "cpu" (Triton interpreter) or "cuda"
    timeout_s: float = 120.0  # one candidate's correctness run, compile included
    timing_timeout_s: float = 300.0
    trials: int = 21
    baseline: str = "reference"  # "reference" (PyTorch) or "start" (the task's starting kernel)
    mem_limit_gb: float = 16.0  # host memory per worker
    recycle_every: int = 50
    sandbox: bool = True
    reference_cache_bytes: int | None = None  # None: fitness.reference.default_bytes()
    suite_path: str | None = None
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
                                 os.environ.get("TRITON_EVOLVE_CACHE")) if p)
        self.sandbox = detect(not config.sandbox, config.triton_cache, data)
        mem = int(config.mem_limit_gb * 2**30)
        self.pool = WorkerPool(config.workers, self.sandbox, self.interpret, mem, config.recycle_every,
                               config.triton_cache)
        # the timing worker only sees candidates that already passed correctness elsewhere, and a
        # restart costs its start-up and its GPU input cache: recycled ten times less often
        self.timer = WorkerPool(1, self.sandbox, False, mem, 10 * config.recycle_every,
                                config.triton_cache) if self.gpu else None
        self.references = references or ReferenceCache(config.reference_cache_bytes,
                                                       "cuda" if self.gpu else "cpu")
        self.script_refs = ScriptReferences(self.pool, config.seeds, self.interpret, config.timeout_s, self._task_spec)
        self._allowances: dict[str, frozenset] = {}

    def close(self):
        self.pool.close()
        if self.timer:
            self.timer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -------------------------------------------------------------------------------------
    def evaluate_many(self, items: list[tuple[Task, str]]) -> list[Verdict]:
        # twice as many threads as correctness workers: while some candidates wait for the single
        # timing worker, the correctness workers already run the next ones
        with ThreadPoolExecutor(max(1, 2 * self.config.workers)) as ex:
            return list(ex.map(lambda it: self.evaluate(*it), items))

    def validate_iter(self, tasks: list[Task], timed: bool = True):
        """Each task's starting kernel evaluated, as verdicts complete; a task with none
        (KernelBench) gets its reference run."""
        def one(t):
            return self.evaluate(t, t.start_source, timed) if t.start_source else self._reference_verdict(t)
        with ThreadPoolExecutor(max(1, 2 * self.config.workers)) as ex:
            futures = [ex.submit(one, t) for t in tasks]
            yield from (f.result() for f in as_completed(futures))

    def retime(self, task: Task, source: str) -> Verdict:
        """Times a candidate that already passed correctness (export's second measurement)."""
        v = self._verdict(task)
        if self.gpu:
            self._timing(task, source, v)
        return v

    def _reference_verdict(self, task: Task) -> Verdict:
        v = self._verdict(task)
        problem = self.reference_status(task)
        v.device = self.pool.info().get("device", "")
        if problem:
            v.reason = problem
            v.flags.append("invalid-here")
        else:
            v.stage, v.correct, v.heldout_correct = "correct", True, True
            v.reason = "the reference runs here (the suite has no Triton starting kernel to time)"
        return v

    def evaluate(self, task: Task, source: str | bytes, timed: bool = True, cancel=None) -> Verdict | None:
        """The verdict; None when `cancel()` turned true before the candidate reached a worker or
        the timing worker (a stopping run: the candidate stays unevaluated, for a resume)."""
        try:
            return self._evaluate(task, source, timed, cancel)
        except Cancelled:
            return None

    def _evaluate(self, task: Task, source: str | bytes, timed: bool, cancel) -> Verdict:
        t0 = time.monotonic()
        v = self._verdict(task)
        if not self.sandbox.isolated:
            v.flags.append("no-sandbox")
        gate = check_source(source, task.entry, self._allowance(task))
        if not gate.ok:
            v.reason = f"static gate: {gate.reason}"
        else:
            source = source.decode() if isinstance(source, bytes) else source
            v.stage = "parse"
            # order: workers serve the candidates that began evaluating first, so a task's
            # starting kernel is not overtaken by the children other tasks make meanwhile
            if self._correctness(task, source, v, cancel, order=t0) and self.gpu and timed:
                if cancel and cancel():
                    raise Cancelled()
                self._timing(task, source, v, cancel, order=t0)
            elif v.passed and self.gpu:
                v.timing = "not timed: asked not to (--no-time)"
            elif v.passed:
                v.timing = "not timed: no GPU here; correctness ran under the Triton interpreter on CPU"
                v.flags.append("untimed-no-gpu")
        if v.passed and not v.reason:
            v.reason = (f"passed {len(v.cases)} correctness cases "
                        f"({sum(c['split'] == 'heldout' for c in v.cases)} held-out)")
            if v.timing.startswith("not timed"):
                v.reason += "; " + v.timing
        v.elapsed_s = round(time.monotonic() - t0, 3)
        return v

    def _verdict(self, task: Task) -> Verdict:
        return Verdict(task=task.name, sandbox=self.sandbox.description, baseline=self._baseline_name(task))

    def _baseline_name(self, task: Task) -> str:
        if task.script is not None:
            return task.script.baseline_name
        return "the starting kernel" if self.config.baseline == "start" else "the PyTorch reference"

    def _allowance(self, task: Task) -> frozenset:
        """What the gate lets a script task's candidates use: what the suite's reference uses."""
        if task.script is None:
            return frozenset()
        if task.name not in self._allowances:
            self._allowances[task.name] = allowance(task.script.reference_source)
        return self._allowances[task.name]

    def reference_status(self, task: Task) -> str:
        """'' when the task's reference runs here, else why not (script tasks; builtin always run)."""
        return self.script_refs.get(task).error if task.script is not None else ""

    def _cases(self, task: Task) -> list[dict]:
        shapes = task.shape_set(self.interpret)
        cases = []
        for split, offset, group in (("tuning", 0, shapes.tuning), ("heldout", 100, shapes.heldout)):
            for shape in group:
                for dt in task.dtypes:
                    for seed in self.config.seeds:
                        cases.append({"split": split, "shape": dict(shape), "dtype": dt, "seed": seed + offset})
        return cases

    def _task_spec(self, task: Task) -> dict:
        return {"suite": task.suite, "name": task.name, "path": self.config.suite_path}

    def _correctness(self, task: Task, source: str, v: Verdict, cancel=None, order: float | None = None) -> bool:
        spec = self._task_spec(task)
        if task.script is not None:
            ref = self.script_refs.get(task, cancel)
            if ref.error:
                v.reason = ref.error
                v.flags.append("invalid-here")
                v.device = self.pool.info().get("device", "")
                return False
            cases = self.script_refs.cases(ref)
            req = {"op": "script", "source": source, "task": spec, "cases": cases}
            check = lambda case, res: self.script_refs.check(task, ref, case, res)
        else:
            cases = self._cases(task)
            req = {"op": "correctness", "source": source, "task": spec, "cases": cases}
            check = lambda case, res: self._check_case(task, case, res.get("outputs"))
        t0 = time.monotonic()
        try:
            reply = self.pool.request(req, self.config.timeout_s, cancel, order)
        except WorkerFailure as e:
            v.reason = str(e)
            v.flags.append("worker-replaced")
            return False
        v.device = self.pool.info().get("device", "")
        t1 = time.monotonic()
        results = self._for_comparison(reply.get("results", []))
        for case, res in zip(cases, results):
            problem = check(case, res)
            v.cases.append({**case, "ok": not problem, "error": problem})
        v.phases.update(worker_s=round(t1 - t0, 3), reference_compare_s=round(time.monotonic() - t1, 3),
                        worker_ms=reply.get("phase_ms") or {})
        failed = reply.get("case") or {}  # the case a worker-side error stopped at
        if reply.get("error"):
            v.cases.append({**failed, "ok": False, "error": reply["error"]})
            v.reason = reply["error"] if not failed else f"{failed.get('split')} case {failed.get('shape')} " \
                f"{failed.get('dtype')}: {reply['error']}"
            if reply.get("fatal"):
                v.flags.append("worker-replaced")
        v.stage = reply.get("stage", "parse")
        tuning = [c for c in v.cases if c.get("split") == "tuning"]
        heldout = [c for c in v.cases if c.get("split") == "heldout"]
        n_tuning = sum(c["split"] == "tuning" for c in cases)
        v.correct = len(tuning) == n_tuning and all(c["ok"] for c in tuning)
        v.heldout_correct = len(heldout) == len(cases) - n_tuning and all(c["ok"] for c in heldout)
        # a kernel right on every tuning case goes on to timing even when a held-out case failed:
        # held-out shapes decide what is exported, not what the search breeds from, and export
        # can only name a faster kernel it passed over for failing them if that kernel was timed
        if reply.get("error") and not (v.correct and failed.get("split") == "heldout"):
            return False
        bad = next((c for c in v.cases if not c["ok"]), None)
        if bad:
            v.reason = f"wrong result on {bad['split']} shape {bad['shape']} {bad['dtype']} (seed {bad['seed']}): " \
                       f"{bad['error']}"
            if not v.correct:
                return False
        v.stage = "correct"
        return True

    def _for_comparison(self, results: list) -> list:
        """On a GPU machine the outputs are compared there: a dozen passes over float64 copies of
        64 MiB outputs took the engine 3 s of CPU per candidate on the H100 machine, CPU its
        correctness workers needed for compiling (on the GPU: milliseconds)."""
        if self.gpu:
            try:
                return on_device(results, "cuda")
            except torch.cuda.OutOfMemoryError:
                pass  # compared on the CPU instead
        return results

    def _check_case(self, task: Task, case: dict, outputs) -> str:
        if outputs is None:
            return "no outputs returned"
        refs, expected = self.references.get(task, case)
        return compare_outputs(outputs, refs, task.tolerance, expected=expected)

    # -------------------------------------------------------------------------------------
    def _timing(self, task: Task, source: str, v: Verdict, cancel=None, order: float | None = None):
        if task.script is not None:
            shapes = tuple({"perf": i} for i in self.script_refs.get(task, cancel).timed)
            if not shapes:
                v.timing = "not timed: the suite gives no benchmark inputs for this task"
                v.flags.append("untimed")
                return
        else:
            shapes = task.shape_set(False).tuning
        seed = self.config.seeds[0] + 7
        cases = [{"shape": dict(s), "dtype": dt, "seed": seed} for s in shapes for dt in task.dtypes]
        req = {"op": "timing", "source": source, "task": self._task_spec(task), "cases": cases,
               "trials": self.config.trials}
        if self.config.baseline == "start" and task.script is None:
            req["baseline_source"] = task.start_source
        t0 = time.monotonic()
        try:
            reply = self.timer.request(req, self.config.timing_timeout_s, cancel, order)
        except WorkerFailure as e:
            v.reason = f"timing: {e}"
            v.flags.append("worker-replaced")
            v.correct = False  # a kernel that cannot be timed (hang, crash) is no parent and no export
            return
        if reply.get("error"):
            # the timing worker's own checks (results captured into a graph, times beyond the wall
            # clock, disagreement with the baseline on the benchmark inputs) fail the candidate
            v.reason = f"timing: {reply['error']}"
            v.correct = False
            return
        v.phases["timing_s"] = round(time.monotonic() - t0, 3)  # waiting for the timing worker included
        v.phases["timing_setup_s"] = round(reply.get("setup_ms", 0) / 1e3, 3)
        v.times = reply["rows"]
        v.speedup, flags = speedup_from_rows(v.times, reply.get("peaks"), floor=task.script is None)
        v.flags += flags
        methods = sorted({r["method"] for r in v.times})
        v.timing = (f"median of {self.config.trials} interleaved trials per shape, L2 flushed, "
                    f"{'/'.join(methods)}; {time.monotonic() - t0:.1f} s")
        if any(max(r["candidate_spread"], r["baseline_spread"]) > 0.1 for r in v.times):
            v.flags.append("noisy-timing")
        v.stage = "timed"
