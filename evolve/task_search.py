"""The search for one task: N islands of P kernels, generation by generation.

Generation 0 is the starting kernel plus P-1 mutants of it on each island. Each later generation:
every island picks parents (tournament), its operators make P children, the children are
evaluated (all islands' at once, through the shared evaluator), the best P of parents and
children survive, and every M generations the best kernel of each island replaces the worst of
the next one along the ring.

Everything goes to the archive as it happens: a child when it is made, its evaluation when it
completes, an island population when its generation has finished. Resuming therefore means:
reload the last finished generation, take the children already made for the next one (evaluating
those without an evaluation), and make only the ones still missing. A child whose normalized
source was already seen in this run is never evaluated twice.

Islands make their children concurrently (LLM operators wait on the network), each from its own
random stream, so a resumed run draws the same operators and parents, asks the LLM the same
questions, and finds their answers in the archive. A `repairs` operator (reflexion) gets the
island's failed children of the previous generation, up to half the places; the rest are drawn.
"""
from __future__ import annotations

import random
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from archives.archive import Archive
from archives.codehash import code_hash
from evolve.population import Kernel, Policy, kernel_from_row
from operators.base import Context, Exhausted, Parent, Pending, WeightedOperator, pick
from suites.task import Task
from suites.validation import untimeable_start

START_ISLAND = -1  # the starting kernel belongs to every island


@dataclass(frozen=True)
class SearchConfig:
    islands: int = 4
    population: int = 8
    generations: int = 10
    migration_interval: int = 3
    seed: int = 0
    budget_evals: int | None = None  # per task
    target_speedup: float | None = None
    temperatures: tuple[float, ...] = ()  # per island, for LLM operators; islands differ in it


class TaskSearch:
    def __init__(self, task: Task, archive: Archive, run_id: int, submit: Callable[[Task, str], Future],
                 operators: list[WeightedOperator], config: SearchConfig, stop: threading.Event,
                 policy: Policy | None = None, on_event: Callable[[dict], None] | None = None):
        self.task, self.archive, self.run_id = task, archive, run_id
        self.submit, self.operators, self.config, self.stop = submit, list(operators), config, stop
        self.policy = policy or Policy()
        self.on_event = on_event or (lambda e: None)
        self.known = {r["code_hash"] for r in archive.candidates(run_id, task.name)}
        self.best: float | None = None
        self.status = "running"
        self.waiting = False  # an operator's answer is pending (LLM exchange round)
        self.exhausted = ""  # why operators were dropped (LLM budget, endpoint)
        self.invalid = ""  # the evaluator found the task's reference failing on this machine
        self.lock = threading.Lock()
        # islands propose side by side but add their children to the archive in island order, so
        # which island keeps a kernel two of them made does not depend on thread timing
        self._turn = threading.Condition()
        self._next_island = 0
        from operators.retrieval import reference_source

        self.reference = reference_source(task)

    # -------------------------------------------------------------------------------------
    def run(self) -> str:
        state = self.archive.last_generation(self.run_id, self.task.name)
        if state is None:
            islands = self._generation_zero()
            if islands is None:
                return self._finish(self._should_stop() if self.invalid else self._halt_reason())
            self.archive.save_generation(self.run_id, self.task.name, 0, [[k.id for k in p] for p in islands])
            done = 0
        else:
            done, ids = state
            islands = [[kernel_from_row(self.archive.candidate(i)) for i in members] for members in ids]
        self._note_best(islands)
        self._event(done, islands)
        for gen in range(done + 1, self.config.generations + 1):
            reason = self._should_stop()
            if reason:
                return self._finish(reason)
            children = self._evaluate_generation(gen, islands)
            if children is None or self.waiting:
                return self._finish(self._halt_reason())
            islands = [self.policy.replace(pop, kids, self.config.population) for pop, kids in zip(islands, children)]
            if self.config.migration_interval and gen % self.config.migration_interval == 0:
                self.policy.migrate(islands, self._rng(-1, gen))
            self.archive.save_generation(self.run_id, self.task.name, gen, [[k.id for k in p] for p in islands])
            self._note_best(islands)
            self._event(gen, islands)
        return self._finish(self._should_stop() or "done")

    def _finish(self, status: str) -> str:
        self.status = status
        return status

    def _halt_reason(self) -> str:
        return "waiting for LLM answers" if self.waiting else "stopped"

    def _should_stop(self) -> str:
        if self.stop.is_set():
            return "stopped"
        if self.invalid:  # nothing can be judged against a reference that does not run here
            return f"invalid here: {self.invalid}"
        if not any(w.operator.arity == 1 and not w.operator.repairs for w in self.operators):
            return self.exhausted or "no operators left"
        if self.config.target_speedup and self.best and self.best >= self.config.target_speedup:
            return "target reached"
        if self.config.budget_evals and self.archive.evaluation_count(self.run_id, self.task.name) >= \
                self.config.budget_evals:
            return "evaluation budget spent"
        return ""

    def _rng(self, island: int, generation: int) -> random.Random:
        return random.Random(f"{self.config.seed}/{self.task.name}/{island}/{generation}")

    # -------------------------------------------------------------------------------------
    def _generation_zero(self) -> list[list[Kernel]] | None:
        starts = self.archive.candidates(self.run_id, self.task.name, START_ISLAND, 0)
        if not starts:
            h = code_hash(self.task.start_source)
            self.known.add(h)
            cid = self.archive.add_candidate(self.run_id, self.task.name, START_ISLAND, 0, self.task.start_source,
                                             h, [], "start", "the task's starting kernel")
            starts = [self.archive.candidate(cid)]
        if not self._evaluate_pending(starts):
            return None
        start = kernel_from_row(self.archive.candidate(starts[0]["id"]))
        if not self.invalid:
            # every child descends from the start, and on a script task it is the baseline's own
            # code: what the timing worker cannot time (a fault on the suite's benchmark inputs, a
            # result that differs from itself) no child can be judged on, and each try may crash
            # the timing worker, whose restart loses its caches (seen on the H100: TritonBench's
            # token_softmax_llama and triton_attention cut the run's timing throughput by half)
            self.invalid = untimeable_start(start.error)
        if self.invalid:
            return None
        seeds = [[start.copy()] for _ in range(self.config.islands)]
        mutants = self._evaluate_generation(0, seeds, mutations_only=True)
        if mutants is None or self.waiting:
            return None
        return [pop + kids for pop, kids in zip(seeds, mutants)]

    def _evaluate_generation(self, gen: int, islands: list[list[Kernel]],
                             mutations_only: bool = False) -> list[list[Kernel]] | None:
        """Children of every island for this generation, all evaluated; None when stopped."""
        full = self.config.population - (1 if mutations_only else 0)
        wants = [full] * len(islands)
        if self.config.budget_evals:  # what is left of the budget, shared out exactly
            left = max(0, self.config.budget_evals - self.archive.evaluation_count(self.run_id, self.task.name))
            share, extra = divmod(left, len(islands))
            wants = [min(full, share + (i < extra)) for i in range(len(islands))]

        def island_rows(i: int) -> list[dict]:
            have = self.archive.candidates(self.run_id, self.task.name, i, gen)
            try:
                return have + self._make_children(i, gen, islands[i], wants[i], have, mutations_only)
            finally:
                self._pass_turn(i)

        self._next_island = 0

        with ThreadPoolExecutor(len(islands), thread_name_prefix=f"{self.task.name}-island") as pool:
            rows = list(pool.map(island_rows, range(len(islands))))
        if not self._evaluate_pending([r for island in rows for r in island]):
            return None
        return [[kernel_from_row(self.archive.candidate(r["id"])) for r in island] for island in rows]

    def _make_children(self, island: int, gen: int, pop: list[Kernel], n: int, have: list[dict],
                       mutations_only: bool) -> list[dict]:
        """Up to `n` children in all, `have` (made before a stop) included. The island's stream is
        drawn from its start again and a child already in `have` counts as made, so a resumed
        generation draws exactly what an unbroken one would have."""
        if n - len(have) <= 0 or self.stop.is_set():
            return []
        made_before = {r["code_hash"] for r in have}
        replayed = 0
        rng = self._rng(island, gen)
        rows = self.archive.candidates(self.run_id, self.task.name)
        context = Context(self.task.name, self.task.instruction, self.task.entry, island, gen,
                          self._temperature(island), self._history(rows, island, gen), self.reference)
        # the previous generation's failures of this island, for the repair operator
        failed = [r for r in rows if r["island"] == island and r["generation"] == gen - 1 and
                  r.get("evaluation_id") is not None and not r.get("correct")]
        made, waiting, attempts, repairs = [], 0, 0, 0
        while (replayed + len(made) + waiting < n and len(made) < n - len(have) and attempts < 5 * n
               and not self.stop.is_set()):
            jobs = []  # drawn in order from the island's stream: the same on resume
            for _ in range(n - replayed - len(made) - waiting):
                attempts += 1
                repair = self._repairer() if not mutations_only else None
                if repair is not None and failed and repairs < (n + 1) // 2:
                    repairs += 1
                    op, parents = repair, [kernel_from_row(failed.pop(0))]
                else:
                    ops = [w for w in self.operators if not w.operator.repairs and
                           (w.operator.arity == 1 or not mutations_only)]
                    if not ops:
                        break
                    op = pick(ops, rng)
                    parents = self.policy.parents(pop, op.arity, rng) if len(pop) > 1 else [pop[0]] * op.arity
                jobs.append((op, parents, random.Random(rng.getrandbits(64))))
            if not jobs:
                break
            with ThreadPoolExecutor(len(jobs), thread_name_prefix=f"{self.task.name}-propose") as pool:
                outcomes = list(pool.map(lambda j: self._propose(j, context), jobs))
            if not self._await_turn(island):
                break  # stopped before this island's turn: it adds nothing, a resume makes it all
            for (_, parents, _), child in zip(jobs, outcomes):
                if self.stop.is_set():
                    break
                if child == "pending":
                    waiting += 1
                    continue
                if child is None:
                    continue
                h = code_hash(child.source)
                if h in made_before:  # made by this draw before the stop: already in the archive
                    made_before.discard(h)
                    replayed += 1
                    continue
                with self.lock:
                    if h in self.known:
                        continue  # the same kernel was made before in this run: it is not evaluated again
                    self.known.add(h)
                cid = self.archive.add_candidate(self.run_id, self.task.name, island, gen, child.source, h,
                                                 [p.id for p in parents], child.operator, child.note)
                if child.llm_calls:
                    self.archive.link_llm_calls(child.llm_calls, cid)
                made.append(self.archive.candidate(cid))
        return made

    def _await_turn(self, island: int) -> bool:
        """Waits until the islands before this one have added their children; False if the run
        was stopped by then."""
        with self._turn:
            self._turn.wait_for(lambda: self._next_island >= island)
        return not self.stop.is_set()

    def _pass_turn(self, island: int):
        with self._turn:
            self._turn.wait_for(lambda: self._next_island >= island)
            self._next_island = island + 1
            self._turn.notify_all()

    def _propose(self, job, context: Context):
        op, parents, rng = job
        try:
            return op.propose([self._parent(p) for p in parents], context, rng)
        except Pending:
            self.waiting = True
            return "pending"
        except Exhausted as e:
            with self.lock:
                self.exhausted = str(e)
                self.operators = [w for w in self.operators if w.operator is not op and
                                  getattr(w.operator, "client", None) is not getattr(op, "client", 0)]
            return None

    def _repairer(self):
        return next((w.operator for w in self.operators if w.operator.repairs), None)

    def _parent(self, k: Kernel, row: dict | None = None) -> Parent:
        """What operators see of a kernel: its results and, for repairs, its lineage's reflections."""
        row = row or self.archive.candidate(k.id)
        reflections, cur = [], row
        while cur.get("operator") == "llm_repair" and len(reflections) < 50:
            reflections.insert(0, cur.get("note") or "")
            if not cur.get("parent_ids"):
                break
            cur = self.archive.candidate(cur["parent_ids"][0])
        return Parent(k.id, k.source, k.speedup, k.correct, k.error, stage=k.stage, times=row.get("times") or [],
                      flags=row.get("flags") or [], operator=row.get("operator") or "", note=row.get("note") or "",
                      reflections=reflections, repairs=len(reflections))

    def _history(self, rows: list[dict], island: int, gen: int) -> list[Parent]:
        """The island's correct earlier attempts (the start included), ascending by speedup."""
        done = [r for r in rows if r["island"] in (island, START_ISLAND) and r["generation"] < gen
                and r.get("evaluation_id") is not None and r.get("correct")]
        done.sort(key=lambda r: (r.get("speedup") or 0.0, r["id"]))
        return [self._parent(kernel_from_row(r), r) for r in done]

    def _temperature(self, island: int) -> float | None:
        t = self.config.temperatures
        return t[island % len(t)] if t else None

    def _evaluate_pending(self, rows: list[dict]) -> bool:
        """Evaluates the rows that have no evaluation yet; False when stopped before all were."""
        pending = [r for r in rows if r.get("evaluation_id") is None]
        if pending and self.stop.is_set():
            return False
        futures = [(r, self.submit(self.task, r["source"])) for r in pending]
        complete = True
        for row, fut in futures:
            verdict = fut.result()
            if verdict is None:  # the run is stopping: left pending, evaluated on resume
                complete = False
                continue
            self.archive.add_evaluation(row["id"], verdict.to_dict())
            if "invalid-here" in verdict.flags:  # the suite's reference fails on this machine
                self.invalid = verdict.reason.splitlines()[0][:200] if verdict.reason else "reference fails here"
            if verdict.passed and verdict.speedup:
                self.best = max(self.best or 0.0, verdict.speedup)
            self.on_event({"task": self.task.name, "evaluated": 1})
        return complete

    def _note_best(self, islands: list[list[Kernel]]):
        for pop in islands:
            for k in pop:
                if k.correct and k.speedup:
                    self.best = max(self.best or 0.0, k.speedup)

    def _event(self, gen: int, islands: list[list[Kernel]]):
        self.on_event({"task": self.task.name, "generation": gen, "of": self.config.generations, "best": self.best,
                       "correct": sum(k.correct for pop in islands for k in pop)})
