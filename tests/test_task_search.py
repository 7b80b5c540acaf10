"""The per-task search loop, with a deterministic stand-in for the evaluator so the loop's own
logic (islands, migration, dedupe, resume, budgets) is checked quickly; the real evaluator is
exercised end to end in test_search_cli.py."""
import threading
from concurrent.futures import Future

from archives.archive import Archive
from archives.codehash import code_hash
from evolve.task_search import START_ISLAND, SearchConfig, Shared, TaskSearch
from fitness.common.flags import Flag
from fitness.engine.verdict import Verdict
from operators.knobs import find_knobs
from operators.registry import knob_operators


def speed(source: str) -> float:
    """A made-up, knob-dependent speed: larger BLOCK and more warps are faster."""
    knobs = {k.key[-1]: k.value for k in find_knobs(source)}
    return (knobs.get("BLOCK") or 1) / 128 * (1 + (knobs.get("num_warps") or 4) / 16)


class FakeEvaluator:
    def __init__(self):
        self.sources = []
        self.lock = threading.Lock()

    def submit(self, task, source):
        with self.lock:
            self.sources.append(source)
        f = Future()
        f.set_result(Verdict(task.name, stage="timed", correct=True, heldout_correct=True, speedup=speed(source)))
        return f


def search(tmp_path, builtin, run_id=None, archive=None, stop=None, **cfg):
    archive = archive or Archive(tmp_path / "a.db")
    run_id = run_id or archive.new_run("builtin", {})
    ev = FakeEvaluator()
    config = SearchConfig(**{"islands": 3, "population": 4, "generations": 4, "migration_interval": 100, **cfg})
    ts = TaskSearch(builtin["softmax"], knob_operators(), config,
                    Shared(archive, run_id, ev.submit, stop or threading.Event()))
    return ts, archive, run_id, ev


def island_of(archive, cid):
    return archive.candidate(cid).island


def test_islands_evolve_apart_without_migration(tmp_path, builtin):
    ts, archive, run, ev = search(tmp_path, builtin)
    assert str(ts.run()) == "done"
    gen, islands = archive.last_generation(run, "softmax")
    assert gen == 4 and len(islands) == 3
    for i, members in enumerate(islands):
        # every member was made on this island (or is the shared starting kernel)
        assert {island_of(archive, m) for m in members} <= {i, START_ISLAND}
        for row in archive.candidates(run, "softmax", island=i):
            assert {island_of(archive, p) for p in row.parent_ids} <= {i, START_ISLAND}
    assert len({tuple(sorted(m)) for m in islands}) == 3  # three different populations
    # nothing was evaluated twice, and the search improved on the start
    assert len(ev.sources) == len({code_hash(s) for s in ev.sources})
    assert ts.best > speed(builtin["softmax"].start_source)


def test_migration_carries_the_best_to_the_next_island(tmp_path, builtin):
    ts, archive, run, _ = search(tmp_path, builtin, generations=2, migration_interval=2)
    ts.run()
    gen, islands = archive.last_generation(run, "softmax")
    assert gen == 2
    for i, members in enumerate(islands):
        came_from = (i - 1) % len(islands)
        best_there = max(r.speedup for r in archive.candidates(run, "softmax", island=came_from))
        arrived = [archive.candidate(m) for m in members if island_of(archive, m) == came_from]
        assert any(r.speedup == best_there for r in arrived), f"island {i} lacks island {came_from}'s best"


def test_resume_continues_and_evaluates_nothing_twice(tmp_path, builtin):
    stop = threading.Event()
    ts, archive, run, ev = search(tmp_path, builtin, stop=stop, generations=3)
    calls = {"n": 0}
    original = ev.submit

    def stopping_submit(task, source):
        calls["n"] += 1
        if calls["n"] == 20:  # in the middle of generation 1 (1 start + 3 x 3 mutants + ...)
            stop.set()
        if stop.is_set():
            f = Future()
            f.set_result(None)  # what the runner answers once stopping: left unevaluated
            return f
        return original(task, source)

    ts.submit = stopping_submit
    assert str(ts.run()) == "stopped"
    done, _ = archive.last_generation(run, "softmax")
    pending = [r for r in archive.candidates(run, "softmax") if not r.evaluated]
    assert done == 0 and pending
    evaluated_before = {r.id for r in archive.candidates(run, "softmax") if r.evaluated}

    ts2, _, _, ev2 = search(tmp_path, builtin, run_id=run, archive=archive, generations=3)
    assert str(ts2.run()) == "done"
    assert archive.last_generation(run, "softmax")[0] == 3
    resumed = {code_hash(s) for s in ev2.sources}
    # the pending children were evaluated on resume, and no evaluated one again
    assert {r.code_hash for r in pending} <= resumed
    assert not resumed & {archive.candidate(i).code_hash for i in evaluated_before}
    counts = archive.db.execute("select candidate_id, count(*) from evaluations group by candidate_id "
                                "having count(*) > 1").fetchall()
    assert counts == []


def _children(archive, run):
    return {(i, g): sorted(r.code_hash for r in archive.candidates(run, "softmax", i, g))
            for i in range(3) for g in range(1, 4)}


def test_a_generation_stopped_while_its_children_are_made_resumes_exactly(tmp_path, builtin):
    ts, archive, run, _ = search(tmp_path / "whole", builtin, generations=3)
    ts.run()
    unbroken = _children(archive, run)

    stop = threading.Event()
    ts, archive, run, _ = search(tmp_path / "broken", builtin, stop=stop, generations=3)
    add = archive.add_candidate

    def add_then_stop(draft):
        cid = add(draft)
        if draft.generation == 1:  # the first child of generation 1 is in: stop there
            stop.set()
        return cid
    archive.add_candidate = add_then_stop
    assert str(ts.run()) == "stopped"
    assert [len(archive.candidates(run, "softmax", i, 1)) for i in range(3)] == [1, 0, 0]
    archive.add_candidate = add
    ts2, _, _, _ = search(tmp_path / "broken", builtin, run_id=run, archive=archive, generations=3)
    assert str(ts2.run()) == "done"
    assert _children(archive, run) == unbroken


def test_budget_and_target_stop_a_task(tmp_path, builtin):
    ts, archive, run, ev = search(tmp_path, builtin, budget_evals=12)
    assert str(ts.run()) == "evaluation budget spent"
    assert archive.evaluation_count(run, "softmax") == 12  # shared out over the islands exactly
    ts, archive, run, _ = search(tmp_path / "b", builtin, budget_evals=10)
    ts.run()
    assert archive.evaluation_count(run, "softmax") == 10
    ts, archive, run, _ = search(tmp_path / "t", builtin, target_speedup=1e-6)
    assert str(ts.run()) == "target reached"


def test_a_task_whose_reference_fails_here_stops_after_its_starting_kernel(tmp_path, builtin):
    class Invalid(FakeEvaluator):
        def submit(self, task, source):
            self.sources.append(source)
            f = Future()
            f.set_result(Verdict(task.name, reason="the suite's reference fails here: ptxas error",
                                 flags=["invalid-here"]))
            return f

    archive = Archive(tmp_path / "a.db")
    run_id = archive.new_run("builtin", {})
    ev = Invalid()
    ts = TaskSearch(builtin["softmax"], knob_operators(), SearchConfig(islands=2, population=3, generations=5),
                    Shared(archive, run_id, ev.submit, threading.Event()))
    assert str(ts.run()) == "invalid here: the suite's reference fails here: ptxas error"
    assert archive.last_generation(run_id, "softmax") is None and len(ev.sources) == 1


FAULT = ("timing: Traceback (most recent call last):\n  File \"gpu_timing.py\", line 150, in time_case\n"
         "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n")


class Untimeable(FakeEvaluator):
    """Every kernel passes correctness and then fails in the timing worker with `reason`."""

    def __init__(self, reason=FAULT):
        super().__init__()
        self.reason = reason

    def submit(self, task, source):
        self.sources.append(source)
        f = Future()
        f.set_result(Verdict(task.name, stage="correct", reason=self.reason, flags=[Flag.TIMING_FAILED]))
        return f


def test_a_task_whose_starting_kernel_cannot_be_timed_stops_before_any_child(tmp_path, builtin):
    """Every child descends from the start (on a script task it is the baseline's own code): a
    start the timing worker faults on stops the task at once, saying why, and a resume agrees."""
    archive = Archive(tmp_path / "a.db")
    run_id = archive.new_run("builtin", {})
    for attempt in range(2):  # the second: a resume finds the start evaluated and stops alike
        ev = Untimeable()
        ts = TaskSearch(builtin["softmax"], knob_operators(), SearchConfig(islands=2, population=3, generations=5),
                    Shared(archive, run_id, ev.submit, threading.Event()))
        assert str(ts.run()) == ("invalid here: its starting kernel cannot be timed here: "
                            "timing: torch.AcceleratorError: CUDA error: an illegal memory access was encountered")
        assert len(ev.sources) == (1 if attempt == 0 else 0)
    # running out of GPU memory can be another process's doing: not a reason to give up the task
    archive = Archive(tmp_path / "b.db")
    ev = Untimeable("timing: torch.OutOfMemoryError: CUDA out of memory")
    ts = TaskSearch(builtin["softmax"], knob_operators(), SearchConfig(islands=2, population=3, generations=1),
                    Shared(archive, archive.new_run("builtin", {}), ev.submit, threading.Event()))
    assert str(ts.run()) == "done" and len(ev.sources) > 1
