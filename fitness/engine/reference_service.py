"""On a GPU machine: the float64 references and the comparisons of outputs with them, in clean
processes of their own (reference children) instead of the engine.

Why: the engine's one Python interpreter also decodes every child's reply and drives ~50
threads; under H100 builtin load a reference took it 14-19 ms (1.31 ms alone; 5.33 ms in a
process of its own beside 8 processes busy on the GPU, `bench/reference_cost.py --load 8`), its
one reference turn was 76-80% busy, and the clean children that wait on it bounded the steady
rate at 108-114 candidates/min.

Trust: a reference child is forked from the clean zygote and loads only the suite's code (like
the baseline children): no candidate's code or kernel ever runs in it. It receives a
candidate's outputs as tensors over the no-pickle protocol (fitness.process.protocol), draws the case's
inputs from the engine's seed, computes the reference and answers what is wrong, if anything.
Where no reference child answers (it died twice, or the reference raised there), the engine
computes the reference itself, as on a machine without a GPU.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from fitness.common.messages import RefCheck, RefPrefetch, Request
from fitness.common.reference import ReferenceCache
from fitness.common.replies import P, RefChecked, Reply
from fitness.engine.baseline_child import BaselineChild
from fitness.engine.pool import WorkerFailure, WorkerPool
from suites.task import Task, nbytes

# reference children per evaluator; a case always goes to the same one (its prefetch and its
# comparison meet the same cache). H100 builtin, steady state (bench/evaluator_bench.py
# --ref-children): 1 child 73/min, 2 children 97-100/min, 4 children 122-123/min with outputs sent
# through the socket; each holds a CUDA context, its share of the cache and
# fitness.common.reference.REFERENCE_WORK_BYTES
REFERENCE_CHILDREN = 4


@dataclass
class ServiceStats:
    """What the reference children cost the engine (bench/evaluator_bench.py prints it)."""
    checks: int = 0  # comparisons answered by a reference child
    check_s: float = 0.0  # the engine's wall seconds over those comparisons (send, wait, answer)
    fallbacks: int = 0  # comparisons the engine made itself (no reference child answered)
    # the children's own ms over those comparisons, by step (reference, upload, compare) and in all
    # ("handle"); the rest of check_s is the trip (the outputs sent, the queue for the child)
    child_ms: dict[str, float] = field(default_factory=dict)
    sent_bytes: int = 0  # the outputs' bytes sent to the children

    def add(self, wall_s: float, reply: Reply[RefChecked], outputs: Any) -> None:
        self.checks += 1
        self.sent_bytes += nbytes(outputs) if isinstance(outputs, (list, tuple)) else 0
        self.check_s += wall_s
        steps = reply.payload.ms if reply.payload is not None else {}
        for k, ms in {**steps, **reply.phase_ms}.items():
            self.child_ms[k] = self.child_ms.get(k, 0.0) + float(ms)


class ReferenceService:
    """The engine's side: routes each case's prefetch and comparison to its reference child."""

    def __init__(self, pool: WorkerPool, local: ReferenceCache, spec: Callable[[Task], dict],
                 timeout_s: float):
        """`local`: the engine's own cache (its bytes are shared out among the children's caches);
        `spec`: how a child finds a task."""
        self.pool, self.local, self.spec, self.timeout_s = pool, local, spec, timeout_s
        self._children = [BaselineChild(pool) for _ in range(pool.size)]
        self._ahead = ThreadPoolExecutor(pool.size, thread_name_prefix="reference-prefetch")
        self.cache_bytes = max(1, local.max_bytes // pool.size)
        self.stats = ServiceStats()

    def prefetch(self, task: Task, case: dict) -> None:
        """The case's reference started in its child (which answers at once and computes it
        beside its comparisons); a failure here is met again by the comparison."""
        req = RefPrefetch(task=self.spec(task), case=case, cache_bytes=self.cache_bytes)
        self._ahead.submit(self._ask, task, case, req)

    def check(self, task: Task, case: dict, outputs: Any) -> str | None:
        """'' or what is wrong with `outputs` (as the child sent them, on the CPU); None where no
        reference child answered (the caller compares them itself)."""
        t0 = time.monotonic()
        req = RefCheck(outputs=outputs, task=self.spec(task), case=case, cache_bytes=self.cache_bytes)
        reply = self._ask(task, case, req)
        if reply is not None and reply.payload is not None:
            self.stats.add(time.monotonic() - t0, reply, outputs)
            return reply.payload.problem
        self.stats.fallbacks += 1
        return None

    def _ask(self, task: Task, case: dict, req: Request[P]) -> Reply[P] | None:
        """The case's child's reply; None where it failed to answer twice (a fresh child the
        second time: a reply of the wrong form counts as no answer) or the reference raised there."""
        holder = self._children[hash(task.case_key(case)) % len(self._children)]
        for _ in range(2):
            with holder.lock:
                try:
                    reply = holder.get().ask(req, self.timeout_s)
                except WorkerFailure:
                    continue  # the next get() forks a fresh child
            return None if reply.error else reply
        return None

    def close(self) -> None:
        self._ahead.shutdown(wait=False, cancel_futures=True)
        for holder in self._children:
            with holder.lock:
                holder.close()
        self.pool.close()

