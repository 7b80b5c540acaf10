"""The search for one task: N islands of P kernels, generation by generation.

Generation 0 is the starting kernel plus P-1 mutants of it on each island; in the instruction
setting (GEAK's) it is P kernels written afresh per island, and the starting kernel, still the
baseline, is neither a parent nor shown to the LLM. Each later generation:
every island picks parents (tournament), its operators make P children, the children are
evaluated (all islands' at once, through the shared evaluator), the best P of parents and
children survive, and every M generations the best kernel of each island replaces the worst of
the next one along the ring.

Everything goes to the archive as it happens: a child when it is made, its evaluation when it
completes, an island population when its generation has finished. Resuming therefore means:
reload the last finished generation, take the children already made for the next one (evaluating
those without an evaluation), and make only the ones still missing (evolve/breeding.py). A child
whose normalized source was already seen in this run is never evaluated twice.

Islands make their children concurrently (LLM operators wait on the network), each from its own
random stream, so a resumed run draws the same operators and parents, asks the LLM the same
questions, and finds their answers in the archive. A `repairs` operator (reflexion) gets the
island's failed children of the previous generation, up to half the places; the rest are drawn.
"""
from __future__ import annotations

import logging
import random
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from archives.archive import Archive
from archives.codehash import code_hash
from archives.records import Candidate, Draft, json_list
from evolve.breeding import AWAITING, Brood, Draw, Job, Proposal, breed
from evolve.config import SearchConfig
from evolve.invalid_here import _first_line
from evolve.invalid_here import invalid_reason as invalid_reason
from evolve.invalid_here import known_invalid as known_invalid
from evolve.policies import Policy
from evolve.population import Kernel
from evolve.progress import Evaluated, Event, GenerationDone
from evolve.stopping import at_roofline, saved_calls, stalled
from evolve.task_end import Halt, TaskEnd  # re-exported (__all__)
from fitness.common.flags import Flag
from fitness.engine.verdict import Verdict
from operators.base import Child, Context, Exhausted, Parent, Pending, Unusable, WeightedOperator
from operators.shape_facts import median_baselines
from suites.task import Task

logger = logging.getLogger(__name__)

__all__ = ["START_ISLAND", "Halt", "SearchConfig", "Shared", "TaskEnd", "TaskSearch"]

START_ISLAND = -1  # the starting kernel belongs to every island
MAX_REFLECTIONS = 50  # repairs of one lineage shown to the repair operator


@dataclass(frozen=True)
class Shared:
    """What the searches of one command share."""

    archive: Archive
    run_id: int
    submit: Callable[[Task, str], Future]  # evaluates a source; its Future gives None once stopping
    stop: threading.Event
    on_event: Callable[[Event], None] = lambda event: None
    policy: Policy = field(default_factory=Policy)


class TaskSearch:
    def __init__(self, task: Task, operators: list[WeightedOperator], config: SearchConfig, shared: Shared):
        self.task, self.config, self.shared = task, config, shared
        self.archive, self.run_id, self.stop = shared.archive, shared.run_id, shared.stop
        self.submit = shared.submit
        self.operators = list(operators)
        # lineages of repairs are walked by what the operator does, not by its name
        self.repairing = {w.operator.name for w in operators if w.operator.repairs}
        self.known = {c.code_hash for c in self.archive.candidates(self.run_id, task.name)}
        self.best: float | None = None
        self.done = 0  # the last finished generation, for the early stops
        self.waiting = False  # an operator's answer is pending (LLM exchange round)
        self.exhausted: Exhausted | None = None  # why operators were dropped (LLM budget, endpoint)
        self.invalid = ""  # the evaluator found the task's reference failing on this machine
        self.lock = threading.Lock()
        # islands propose side by side but add their children to the archive in island order, so
        # which island keeps a kernel two of them made does not depend on thread timing
        self._turn = threading.Condition()
        self._next_island = 0
        from operators.interface import describe_interface, entry_phrase
        from operators.retrieval import reference_source

        self.blind = config.setting == "instruction"
        self.reference = "" if self.blind else reference_source(task)
        self.interface = describe_interface(task) if self.blind else ""
        self.entry_form = entry_phrase(task.entry, task.start_source)

    # -------------------------------------------------------------------------------------
    def run(self) -> TaskEnd:
        state = self.archive.last_generation(self.run_id, self.task.name)
        # known invalid here by an earlier session: no LLM call nor evaluation can be judged (a
        # resumed run used to ask the LLM again each round, every child failing on the reference)
        self.invalid = self.invalid or known_invalid(self.archive.candidates(self.run_id, self.task.name))
        if self.invalid:
            return TaskEnd(Halt.INVALID, self.invalid)
        if state is None:
            islands = self._generation_zero()
            if islands is None:
                return (self._should_stop() if self.invalid else None) or self._halted()
            self._save(0, islands)
            done = 0
        else:
            done, ids = state
            if not self._evaluate_kept(ids):  # kept kernels re-timed on this device (--retime)
                return self._should_stop() or self._halted()
            islands = [[Kernel(self.archive.candidate(i)) for i in members] for members in ids]
        self._note_best(islands)
        self._event(done, islands)
        for gen in range(done + 1, self.config.generations + 1):
            self.done = gen - 1
            end = self._should_stop()
            if end:
                return end
            children = self._evaluate_generation(gen, islands)
            if children is None or self.waiting:
                return self._halted()
            policy = self.shared.policy
            islands = [policy.replacement.survivors(pop, kids, self.config.population)
                       for pop, kids in zip(islands, children)]
            if self.config.migration_interval and gen % self.config.migration_interval == 0:
                policy.migration.migrate(islands, self._rng(-1, gen))
            self._save(gen, islands)
            self._note_best(islands)
            self._event(gen, islands)
        self.done = self.config.generations
        return self._should_stop() or TaskEnd(Halt.DONE)

    def _evaluate_kept(self, ids: list[list[int]]) -> bool:
        """The starting kernel and the last finished generation's kernels that hold no evaluation
        (their evaluation on another device was retired: evolve.device_identity) are evaluated
        here before any is compared; False when stopped first or the task turned out invalid."""
        kept = dict.fromkeys([c.id for c in self.archive.candidates(self.run_id, self.task.name, START_ISLAND, 0)]
                             + [i for members in ids for i in members])
        pending = [c for c in (self.archive.candidate(i) for i in kept) if not c.evaluated]
        if not pending:
            return True
        if not self._evaluate_pending(pending):
            return False
        start = next((c for c in pending if c.operator == "start"), None)
        if start is not None and not self.invalid:
            self.invalid = invalid_reason(self.archive.candidate(start.id))
        return not self.invalid

    def _save(self, gen: int, islands: list[list[Kernel]]) -> None:
        self.archive.save_generation(self.run_id, self.task.name, gen, [[k.id for k in p] for p in islands])

    def _halted(self) -> TaskEnd:
        return TaskEnd(Halt.WAITING if self.waiting else Halt.STOPPED)

    def _should_stop(self) -> TaskEnd | None:
        if self.stop.is_set():
            return TaskEnd(Halt.STOPPED)
        if self.invalid:  # nothing can be judged against a reference that does not run here
            return TaskEnd(Halt.INVALID, self.invalid)
        if not any(w.operator.arity == 1 and not w.operator.repairs for w in self.operators):
            return TaskEnd(Halt.EXHAUSTED, str(self.exhausted or ""), unusable=isinstance(self.exhausted, Unusable))
        if self.config.target_speedup and self.best and self.best >= self.config.target_speedup:
            return TaskEnd(Halt.TARGET)
        if self.config.budget_evals and self._evaluations() >= self.config.budget_evals:
            return TaskEnd(Halt.BUDGET)
        return self._early_stop()

    def _early_stop(self) -> TaskEnd | None:
        """--roofline-stop and --patience: only while generations are left (else it is done)."""
        cfg = self.config
        left = cfg.generations - self.done
        if left <= 0 or not (cfg.patience or cfg.roofline_stop):
            return None
        rows = self.archive.candidates(self.run_id, self.task.name)
        halt = Halt.ROOFLINE if cfg.roofline_stop and at_roofline(rows, cfg.roofline_stop) else \
            Halt.PATIENCE if cfg.patience and stalled(rows, self.done, cfg.patience) else None
        if halt is None:
            return None
        return TaskEnd(halt, saved_calls=saved_calls(left, cfg.islands, cfg.population, self.operators))

    def _evaluations(self) -> int:
        return self.archive.evaluation_count(self.run_id, self.task.name)

    def _rng(self, island: int, generation: int) -> random.Random:
        return random.Random(f"{self.config.seed}/{self.task.name}/{island}/{generation}")

    # -------------------------------------------------------------------------------------
    def _generation_zero(self) -> list[list[Kernel]] | None:
        starts = self.archive.candidates(self.run_id, self.task.name, START_ISLAND, 0)
        if not starts:
            h = code_hash(self.task.start_source)
            self.known.add(h)
            starts = [self.archive.add_candidate(Draft(self.run_id, self.task.name, START_ISLAND, 0,
                                                       self.task.start_source, h, (), "start",
                                                       "the task's starting kernel"))]
        if not self._evaluate_pending(starts):
            return None
        start = Kernel(self.archive.candidate(starts[0].id))
        if not self.invalid:
            self.invalid = invalid_reason(start.candidate)
        if self.invalid:
            return None
        # the instruction setting starts each island empty: only a fresh operator can fill it
        seeds = [[] if self.blind else [start.copy()] for _ in range(self.config.islands)]
        mutants = self._evaluate_generation(0, seeds, mutations_only=True)
        if mutants is None or self.waiting:
            return None
        return [pop + kids for pop, kids in zip(seeds, mutants)]

    def _wants(self, islands: int, full: int) -> list[int]:
        """Children per island: all places, or what is left of the budget, shared out exactly."""
        if not self.config.budget_evals:
            return [full] * islands
        left = max(0, self.config.budget_evals - self._evaluations())
        share, extra = divmod(left, islands)
        return [min(full, share + (i < extra)) for i in range(islands)]

    def _evaluate_generation(self, gen: int, islands: list[list[Kernel]],
                             mutations_only: bool = False) -> list[list[Kernel]] | None:
        """Children of every island for this generation, all evaluated; None when stopped."""
        wants = self._wants(len(islands), self.config.population - (len(islands[0]) if mutations_only else 0))

        def island_children(i: int) -> list[Candidate]:
            have = self.archive.candidates(self.run_id, self.task.name, i, gen)
            try:
                brood = Brood(wants[i], tuple(c.code_hash for c in have), islands[i],
                              self.shared.policy.selection, mutations_only)
                return have + self._make_children(i, gen, brood)
            finally:
                self._pass_turn(i)

        self._next_island = 0
        with ThreadPoolExecutor(len(islands), thread_name_prefix=f"{self.task.name}-island") as pool:
            made = list(pool.map(island_children, range(len(islands))))
        if not self._evaluate_pending([c for island in made for c in island]):
            return None
        return [[Kernel(self.archive.candidate(c.id)) for c in island] for island in made]

    def _make_children(self, island: int, gen: int, brood: Brood) -> list[Candidate]:
        """The children still missing from this island's generation, added to the archive."""
        if brood.wanted - len(brood.made_before) <= 0 or self.stop.is_set():
            return self._adopt(island, gen)
        rows = self.archive.candidates(self.run_id, self.task.name)
        context = Context(self.task.name, self.task.instruction, self.task.entry, island, gen,
                          self._temperature(island), self._history(rows, island, gen), self.reference,
                          baselines=median_baselines(c.evaluation.times for c in rows if c.evaluation),
                          setting=self.config.setting, entry_form=self.entry_form, interface=self.interface)
        # the previous generation's failures of this island, for the repair operator
        failed = [Kernel(c) for c in rows if c.island == island and c.generation == gen - 1
                  and c.evaluated and not c.correct]
        draw = Draw(self._rng(island, gen), failed, repair_cap=(brood.wanted + 1) // 2)
        made: list[Candidate] = []

        def propose(jobs: list[Job]) -> list[Proposal] | None:
            with ThreadPoolExecutor(len(jobs), thread_name_prefix=f"{self.task.name}-propose") as pool:
                outcomes = list(pool.map(lambda j: self._propose(j, context), jobs))
            # stopped before this island's turn: it adds nothing, a resume makes it all
            return outcomes if self._await_turn(island) else None

        def keep(job: Job, child: Child, h: str) -> bool:
            with self.lock:
                if h in self.known:
                    return False  # the same kernel was made before in this run: not evaluated again
                self.known.add(h)
            made.append(self.archive.add_candidate(Draft(self.run_id, self.task.name, island, gen, child.source, h,
                                                         tuple(p.id for p in job.parents), child.operator,
                                                         child.note)))
            if child.llm_calls:
                self.archive.link_llm_calls(child.llm_calls, made[-1].id)
            return True

        breed(brood, draw, lambda: self._drawable(brood.population), propose, keep, self.stop.is_set)
        return made + self._adopt(island, gen)

    def _adopt(self, island: int, gen: int) -> list[Candidate]:
        """Children made from the answers stored for this island's generation that no job of this
        draw took (asked on another machine, where the kept kernels' other timings drew other
        parents or operators): a paid answer is used,
        never dropped. Each is the child of the parents its request named, by the operator that
        asked; one that holds no module is recorded as failed, as the operator would have."""
        rows = self.archive.unused_answers(self.run_id, self.task.name, island, gen)
        if not rows or not self._await_turn(island):
            return []
        from operators.llm_parse import parse_answer

        made: list[Candidate] = []
        for row in rows:
            self.archive.use_llm_call(row["id"], ADOPTED, {})
            parsed = parse_answer(row["response"], self.task.entry)
            if parsed.code is None:
                self.archive.note_llm_failure(row["id"], parsed.error)
                continue
            h = code_hash(parsed.code)
            with self.lock:
                if h in self.known:
                    continue
                self.known.add(h)
            parents = tuple(int(i) for i in json_list(row["parent_ids"]))
            made.append(self.archive.add_candidate(Draft(self.run_id, self.task.name, island, gen, parsed.code, h,
                                                         parents, row["operator"] or "llm", parsed.note)))
            self.archive.link_llm_calls([row["id"]], made[-1].id)
        if made:
            logger.info("%s: island %d generation %d adopted %d stored answer(s)", self.task.name, island, gen,
                        len(made))
        return made

    def _drawable(self, population: list[Kernel]) -> list[WeightedOperator]:
        """An island with no kernel (the instruction setting's generation 0, or one whose fresh
        kernels all failed to parse) can only be written afresh."""
        return self.operators if population else [w for w in self.operators if w.operator.fresh]

    def _await_turn(self, island: int) -> bool:
        """Waits until the islands before this one have added their children; False if the run
        was stopped by then."""
        with self._turn:
            self._turn.wait_for(lambda: self._next_island >= island)
        return not self.stop.is_set()

    def _pass_turn(self, island: int) -> None:
        with self._turn:
            self._turn.wait_for(lambda: self._next_island >= island)
            self._next_island = island + 1
            self._turn.notify_all()

    def _propose(self, job: Job, context: Context) -> Proposal:
        op = job.operator
        try:
            return op.propose([self._parent(p.candidate) for p in job.parents], context, job.rng())
        except Pending:
            self.waiting = True
            return AWAITING
        except Exhausted as e:
            logger.info("%s: operator %s can make nothing more: %s", self.task.name, op.name, e)
            with self.lock:
                self.exhausted = e
                self.operators = [w for w in self.operators if w.operator is not op and
                                  getattr(w.operator, "client", None) is not getattr(op, "client", 0)]
            return None

    def _parent(self, c: Candidate) -> Parent:
        """What operators see of a kernel: its results and, for repairs, its lineage's reflections."""
        reflections: list[str] = []
        cur = c
        while cur.operator in self.repairing and len(reflections) < MAX_REFLECTIONS:
            reflections.insert(0, cur.note)
            if not cur.parent_ids:
                break
            cur = self.archive.candidate(cur.parent_ids[0])
        return Parent(c, tuple(reflections))

    def _history(self, rows: list[Candidate], island: int, gen: int) -> list[Parent]:
        """The island's correct earlier attempts (the start included), ascending by speedup."""
        shown = (island,) if self.blind else (island, START_ISLAND)  # instruction: never the start's code
        done = [c for c in rows if c.island in shown and c.generation < gen and c.correct]
        done.sort(key=lambda c: (c.speedup or 0.0, c.id))
        return [self._parent(c) for c in done]

    def _temperature(self, island: int) -> float | None:
        t = self.config.temperatures
        return t[island % len(t)] if t else None

    def _evaluate_pending(self, candidates: list[Candidate]) -> bool:
        """Evaluates the candidates that have no evaluation yet; False when stopped before all were."""
        pending = [c for c in candidates if not c.evaluated]
        if pending and self.stop.is_set():
            return False
        futures = [(c, self.submit(self.task, c.source)) for c in pending]
        complete = True
        for c, fut in futures:
            verdict: Verdict | None = fut.result()
            if verdict is None:  # the run is stopping: left pending, evaluated on resume
                complete = False
                continue
            self.archive.add_evaluation(c.id, verdict)
            if Flag.INVALID_HERE in verdict.flags:  # the suite's reference fails on this machine
                self.invalid = self.invalid or _first_line(verdict.reason)
            if verdict.passed and verdict.speedup:
                self.best = max(self.best or 0.0, verdict.speedup)
            self.shared.on_event(Evaluated(self.task.name))
        return complete

    def _note_best(self, islands: list[list[Kernel]]) -> None:
        for pop in islands:
            for k in pop:
                if k.correct and k.speedup:
                    self.best = max(self.best or 0.0, k.speedup)

    def _event(self, gen: int, islands: list[list[Kernel]]) -> None:
        self.shared.on_event(GenerationDone(self.task.name, gen, self.config.generations, self.best,
                                            sum(k.correct for pop in islands for k in pop)))


ADOPTED = "adopted"  # llm_calls.used_for of an answer that made a child without a request of this draw
