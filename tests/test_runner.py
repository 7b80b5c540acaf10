"""evolve.runner.run_search in this process, over the builtin suite's real tasks, the knob
operators and a real SQLite archive, with a stand-in evaluator: it plays the evaluator's part of
the SearchEvaluator protocol, judging each source from a hash of it (some fail, the others pass
with a speedup of their own), and counts what it is asked. So the properties tests/test_search_cli.py
and tests/test_config.py check of whole `run.py` processes (every candidate archived with its
evaluation, generations completed, the best kernel exported, resume and --extend evaluating
nothing twice, the same seed giving the same run) are checked here in about a second a run."""
from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections import Counter
from contextlib import closing
from pathlib import Path
from typing import Callable

import pytest

import run
from archives.archive import Archive
from archives.records import Candidate, RunStatus
from evolve.cli_options import parse
from evolve.export import HEADER
from evolve.runner import SearchResult, run_search
from evolve.task_end import Halt
from fitness.common.flags import Flag
from fitness.engine.verdict import UnitStats, Verdict
from suites.task import Task
from tests.conftest import CHEAP, CHEAP_TOO

TASKS = (CHEAP, CHEAP_TOO)
DEVICE = "Stand-in GPU"
RETIME_FACTOR = 0.9  # the stand-in's second timing of a winner, alone: the winner's curse undone


def digest(task: str, source: str, salt: str = "") -> int:
    return int(hashlib.sha256(f"{salt}{task}\n{source}".encode()).hexdigest(), 16)


def judged(task: Task, source: str) -> Verdict:
    """The stand-in's verdict on a source, from its hash alone: a quarter of the children fail to
    compile; the rest (and the starting kernel, always) pass, with a speedup in [0.5, 2.5)."""
    h = digest(task.name, source)
    if source != task.start_source and h % 4 == 0:
        return Verdict(task.name, stage="compile", reason="stand-in: this child does not compile", device=DEVICE)
    return Verdict(task.name, stage="timed", correct=True, heldout_correct=True, speedup=0.5 + (h % 1000) / 500,
                   device=DEVICE, baseline="reference", timing="stand-in")


Judge = Callable[[Task, str], "Verdict | None"]


class StandIn:
    """A SearchEvaluator (evolve/evaluating.py) that never runs a kernel. `judge` gives a source's
    verdict (None: cancelled); `delay` seconds per evaluation. As the real one, it gives up
    (None) on a candidate the run's stop caught before it started, and finishes one it started."""

    gpu = True  # it gives speedups, so the export times the winners again (`retime`)
    gpus = 1
    workers = 2
    parallelism = 4
    measuring_s = 0.0
    correctness_busy_s = 0.0

    def __init__(self, judge: Judge = judged, delay: float = 0.0):
        self.judge, self.delay = judge, delay
        self.lock = threading.Lock()
        self.asked: Counter[tuple[str, str]] = Counter()  # (task, source) -> evaluations asked, A/A left out
        self.given: dict[tuple[str, str], Verdict | None] = {}  # what it answered, last answer per source
        self.aa: list[tuple[str, str]] = []  # the A/A sentinels asked of it
        self.retimed: list[tuple[str, str]] = []
        self.closed = 0

    def evaluate(self, task: Task, source: str | bytes, timed: bool = True,
                 cancel: Callable[[], bool] | None = None, aa: bool = False) -> Verdict | None:
        source = source.decode() if isinstance(source, bytes) else source
        if aa:
            with self.lock:
                self.aa.append((task.name, source))
            return Verdict(task.name, stage="timed", correct=True, heldout_correct=True,
                           speedup=1.0 + digest(task.name, source, "aa") % 21 / 1000,
                           flags=[Flag.AA_SENTINEL], device=DEVICE, baseline="reference")
        with self.lock:
            self.asked[(task.name, source)] += 1
        if cancel is not None and cancel():
            verdict = None  # the stop came while it waited for a worker: it gives up
        else:  # sent: it runs to its end, the stop notwithstanding
            if self.delay:
                time.sleep(self.delay)
            verdict = self.judge(task, source)
        with self.lock:
            self.given[(task.name, source)] = verdict
        return verdict

    def retime(self, task: Task, source: str) -> Verdict:
        with self.lock:
            self.retimed.append((task.name, source))
        v = judged(task, source)
        v.speedup = v.speedup * RETIME_FACTOR if v.speedup else None
        return v

    def units(self, evaluations: int) -> list[UnitStats]:
        return [UnitStats("local", DEVICE, True, self.workers, evaluations, 0.0, 0.0)]

    def close(self) -> None:
        self.closed += 1

    def verdicts(self, task: str) -> list[Verdict]:
        return [v for (t, _), v in self.given.items() if t == task and v is not None]


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    """Anything a run writes by a relative path (runs/...) lands in tmp_path."""
    monkeypatch.chdir(tmp_path)


def search(tmp: Path, ev: StandIn, *options: str, tasks: tuple[str, ...] = TASKS, command: str = "search",
           generations: int = 2) -> SearchResult:
    """A search as run.py makes it: the command line parsed and checked into configs by run.py's
    own `search_configs`, then run_search over the stand-in."""
    if command == "resume":
        argv = ["resume", str(tmp / "a.db"), *options]
    else:
        argv = ["search", "--suite", "builtin", "--tasks", ",".join(tasks), "--islands", "2", "--population", "3",
                "--generations", str(generations), "--archive", str(tmp / "a.db"), "--export", str(tmp / "best"),
                # no validation record of this machine leaves a task out
                "--validation", str(tmp / "validation.json"), "--aa-every", "0", *options]
    c = run.search_configs(parse(argv))
    assert c.llm is None and c.run.operators == "knobs"
    result = run_search(c.run, c.search, c.llm, lambda: ev)
    assert ev.closed == 1
    return result


def rows(tmp: Path, table: str) -> list[tuple]:
    with closing(sqlite3.connect(f"file:{tmp / 'a.db'}?mode=ro", uri=True)) as conn:
        return conn.execute(f"select * from {table} order by 1").fetchall()


def candidates(tmp: Path, task: str) -> list[Candidate]:
    archive = Archive(tmp / "a.db")
    try:
        run_id = archive.latest_run().id  # type: ignore[union-attr]
        return archive.candidates(run_id, task)
    finally:
        archive.close()


def generations(tmp: Path) -> dict[tuple[str, int], list[int]]:
    """(task, island) -> the generations saved for it, ascending."""
    saved: dict[tuple[str, int], list[int]] = {}
    for _, task, island, gen, *_ in sorted(rows(tmp, "populations"), key=lambda r: r[3]):
        saved.setdefault((task, island), []).append(gen)
    return saved


def evaluations_per_candidate(tmp: Path) -> Counter[int]:
    return Counter(r[1] for r in rows(tmp, "evaluations"))


def summary_entry(result: SearchResult, task: str) -> dict:
    return next(e for e in result.summary["tasks"] if e["task"] == task)


# -------------------------------------------------------------------------------------------------
def test_a_search_archives_every_candidate_with_its_verdict_and_exports_the_fastest_passing_kernel(tmp_path):
    ev = StandIn()
    result = search(tmp_path, ev)
    assert (result.status, result.exit_code) == (RunStatus.FINISHED, 0)
    assert {t: e.halt for t, e in result.ends.items()} == {t: Halt.DONE for t in TASKS}
    # every island of every task reached generation 2, each generation saved once
    assert generations(tmp_path) == {(t, i): [0, 1, 2] for t in TASKS for i in (0, 1)}
    assert all(n == 1 for n in evaluations_per_candidate(tmp_path).values())
    asked: Counter[tuple[str, str]] = Counter()
    for task in TASKS:
        rows_ = candidates(tmp_path, task)
        # generation 0: the start and 2 mutants per island; then 3 children per island and generation
        assert len(rows_) == 1 + 2 * 2 + 2 * 2 * 3
        assert [c.operator for c in rows_].count("start") == 1
        assert len({c.code_hash for c in rows_}) == len(rows_)
        for c in rows_:
            given = ev.given[(task, c.source)]
            assert c.evaluation is not None and given is not None
            assert (c.evaluation.stage, c.evaluation.passed, c.speedup, c.device) == \
                (given.stage, given.passed, given.speedup, DEVICE)
            asked[(task, c.source)] += 1
        verdicts = ev.verdicts(task)
        assert any(not v.passed for v in verdicts) and any(v.passed for v in verdicts)  # the stand-in's mix
        best = max(v.speedup for v in verdicts if v.passed)
        entry = summary_entry(result, task)
        assert entry["status"] == "exported" and entry["evaluations"] == len(rows_)
        # the export timed the winner (and the start) again, alone: its speedup is that timing
        assert entry["search_speedup"] == pytest.approx(best)
        assert entry["speedup"] == pytest.approx(best * RETIME_FACTOR)
        winner = next(c for c in rows_ if c.id == entry["candidate"])
        assert winner.speedup == pytest.approx(best) and winner.evaluation.passed
        text = (tmp_path / "best" / f"{task}.py").read_text()
        assert text.startswith(HEADER) and text.endswith(winner.source)
        assert (task, winner.source) in ev.retimed
    # the stand-in was asked for exactly the archived candidates, each once
    assert ev.asked == asked
    saved = json.loads((tmp_path / "best" / "summary.json").read_text())
    assert saved["exported"] == 2 and [e["task"] for e in saved["tasks"]] == list(TASKS)
    assert rows(tmp_path, "runs")[0][5] == "finished"
    session = rows(tmp_path, "sessions")
    assert len(session) == 1 and session[0][4] == sum(asked.values())  # the session's evaluations


def test_resuming_a_finished_run_evaluates_nothing_and_extend_evaluates_only_new_candidates(tmp_path, capsys):
    first = StandIn()
    search(tmp_path, first, generations=1)
    before = {t: rows(tmp_path, t) for t in ("candidates", "evaluations")}
    capsys.readouterr()

    again = StandIn()
    result = search(tmp_path, again, command="resume")
    assert result.status is RunStatus.FINISHED and not again.asked
    assert "is finished: resuming it evaluates nothing new" in capsys.readouterr().out
    assert {t: rows(tmp_path, t) for t in before} == before

    more = StandIn()
    result = search(tmp_path, more, "--extend", "--generations", "3", command="resume")
    assert result.status is RunStatus.FINISHED
    # nothing judged before was asked again, and nothing twice
    assert more.asked and not set(more.asked) & set(first.asked)
    assert set(more.asked.values()) == {1}
    # the earlier rows are as they were; the new ones follow them
    after = {t: rows(tmp_path, t) for t in before}
    for table, old in before.items():
        assert after[table][:len(old)] == old and len(after[table]) > len(old)
    assert len(after["candidates"]) == len(after["evaluations"]) == sum(first.asked.values()) + \
        sum(more.asked.values())
    assert generations(tmp_path) == {(t, i): [0, 1, 2, 3] for t in TASKS for i in (0, 1)}
    assert len(rows(tmp_path, "runs")) == 1 and json.loads(rows(tmp_path, "runs")[0][2])["generations"] == 3


def test_cancelled_evaluations_stay_pending_and_a_resume_evaluates_exactly_those(tmp_path):
    def cancelling(task: Task, source: str) -> Verdict | None:
        if source != task.start_source and digest(task.name, source, "cancel") % 5 == 0:
            return None  # as the evaluator does for a candidate the stop caught waiting
        return judged(task, source)

    first = StandIn(cancelling)
    result = search(tmp_path, first, generations=3)
    cancelled = {k for k, v in first.given.items() if v is None}
    assert cancelled, "the stand-in should cancel some candidates"
    assert result.status is RunStatus.STOPPED
    for task in TASKS:
        if any(t == task for t, _ in cancelled):
            assert result.ends[task].halt is Halt.STOPPED
    pending = {(t, c.source) for t in TASKS for c in candidates(tmp_path, t) if not c.evaluated}
    assert pending == cancelled
    made_before = {(t, c.source) for t in TASKS for c in candidates(tmp_path, t)}

    resumed = StandIn()
    result = search(tmp_path, resumed, command="resume")
    assert result.status is RunStatus.FINISHED
    assert set(resumed.asked.values()) == {1}
    assert set(resumed.asked) & made_before == cancelled  # of what the archive held, exactly the pending ones
    assert all(c.evaluated for t in TASKS for c in candidates(tmp_path, t))
    assert all(n == 1 for n in evaluations_per_candidate(tmp_path).values())
    assert generations(tmp_path) == {(t, i): [0, 1, 2, 3] for t in TASKS for i in (0, 1)}


def archived(tmp: Path) -> dict[str, list[tuple]]:
    """Per task, its candidates in order: what they are and where they sit, parents by source."""
    out = {}
    for task in TASKS:
        rows_ = candidates(tmp, task)
        source = {c.id: c.source for c in rows_}
        out[task] = [(c.source, c.operator, c.generation, c.island, tuple(source[p] for p in c.parent_ids),
                      c.speedup) for c in rows_]
    return out


def test_the_same_seed_gives_the_same_archive(tmp_path):
    runs = {}
    for name, seed in (("a", "0"), ("b", "0"), ("c", "1")):
        (tmp_path / name).mkdir()
        search(tmp_path / name, StandIn(), "--seed", seed)
        runs[name] = archived(tmp_path / name)
    assert runs["a"] == runs["b"]
    assert all(len(runs["a"][t]) == 17 for t in TASKS)
    assert runs["a"] != runs["c"]  # the comparison tells seeds apart


def test_a_kernel_that_fails_held_out_shapes_is_never_exported_however_fast(tmp_path):
    def overfitting(task: Task, source: str) -> Verdict:
        v = judged(task, source)
        if v.passed and source != task.start_source and digest(task.name, source, "heldout") % 3 == 0:
            v.heldout_correct, v.speedup = False, 50.0 + digest(task.name, source) % 100  # fastest of all
            v.reason = "stand-in: wrong on a held-out shape"
        return v

    ev = StandIn(overfitting)
    result = search(tmp_path, ev)
    for task in TASKS:
        verdicts = ev.verdicts(task)
        overfit = [v for v in verdicts if v.correct and not v.heldout_correct]
        assert overfit, "the stand-in should give some held-out failures"
        entry = summary_entry(result, task)
        assert entry["status"] == "exported"
        best = max(v.speedup for v in verdicts if v.passed)
        assert best < 50 and entry["search_speedup"] == pytest.approx(best)
        assert len(entry["passed_over_heldout"]) == len(overfit)
        assert all(p["speedup"] >= 50 for p in entry["passed_over_heldout"])
        assert "failed held-out shapes" in entry["note"]
        exported = (tmp_path / "best" / f"{task}.py").read_text()
        assert all(not exported.endswith(s) for (t, s), v in ev.given.items()
                   if t == task and v is not None and not v.passed)


def test_a_task_whose_reference_fails_here_stops_alone_and_the_summary_says_so(tmp_path, capsys, builtin):
    def reference_fails(task: Task, source: str) -> Verdict:
        if task.name == CHEAP:
            return Verdict(task.name, stage="call", reason="reference failed here: stand-in fault", device=DEVICE,
                           flags=[Flag.INVALID_HERE])
        return judged(task, source)

    ev = StandIn(reference_fails)
    result = search(tmp_path, ev)
    assert result.ends[CHEAP].halt is Halt.INVALID and "stand-in fault" in result.ends[CHEAP].detail
    assert result.ends[CHEAP_TOO].halt is Halt.DONE
    # only the starting kernel was asked: no child of the task can be judged
    assert [s for t, s in ev.asked if t == CHEAP] == [builtin[CHEAP].start_source]
    entry = summary_entry(result, CHEAP)
    assert entry["status"] == "invalid-here" and not (tmp_path / "best" / f"{CHEAP}.py").exists()
    assert summary_entry(result, CHEAP_TOO)["status"] == "exported"
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith(CHEAP + " "))
    assert "invalid here: reference failed here: stand-in fault" in line
    # a resume knows it from the archive: the task is not tried again
    again = StandIn(reference_fails)
    result = search(tmp_path, again, command="resume")
    assert result.ends[CHEAP].halt is Halt.INVALID and not again.asked


def test_a_task_whose_search_raises_ends_alone_and_a_resume_completes_it(tmp_path, capsys):
    def breaking(task: Task, source: str) -> Verdict:
        if task.name == CHEAP and source != task.start_source:
            raise RuntimeError("stand-in broke")
        return judged(task, source)

    result = search(tmp_path, StandIn(breaking))
    assert result.ends[CHEAP].halt is Halt.INVALID
    assert "its search failed: RuntimeError: stand-in broke" in result.ends[CHEAP].detail
    assert result.ends[CHEAP_TOO].halt is Halt.DONE
    assert generations(tmp_path) == {(CHEAP_TOO, i): [0, 1, 2] for i in (0, 1)}  # none saved for CHEAP
    assert summary_entry(result, CHEAP)["operator"] == "start"  # the start, evaluated before it broke
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith(CHEAP + " "))
    assert "its search failed" in line
    # nothing in the archive says the task is invalid: a resume searches it to the end
    ev = StandIn()
    result = search(tmp_path, ev, command="resume")
    assert result.ends[CHEAP].halt is Halt.DONE and result.ends[CHEAP_TOO].halt is Halt.DONE
    assert ev.asked and {t for t, _ in ev.asked} == {CHEAP}
    assert generations(tmp_path) == {(t, i): [0, 1, 2] for t in TASKS for i in (0, 1)}
    assert all(c.evaluated for c in candidates(tmp_path, CHEAP))


def test_a_time_limit_stops_the_run_keeping_every_verdict_given_and_the_rest_pending(tmp_path):
    ev = StandIn(delay=0.1)  # a full run would take over 2 s of evaluations
    t0 = time.monotonic()
    result = search(tmp_path, ev, "--time-limit", "0.5", generations=6)
    assert time.monotonic() - t0 < 10
    assert result.status is RunStatus.STOPPED and result.exit_code == 0
    assert {e.halt for e in result.ends.values()} == {Halt.STOPPED}
    assert all(gens[-1] < 6 for gens in generations(tmp_path).values())
    # evaluations in flight at the stop finish and are recorded; the others stay pending
    held = {(t, c.source): c.evaluated for t in TASKS for c in candidates(tmp_path, t)}
    assert {k for k, done in held.items() if done} == {k for k, v in ev.given.items() if v is not None}
    assert json.loads((tmp_path / "best" / "summary.json").read_text())["exported"] == 2
    assert rows(tmp_path, "runs")[0][5] == "stopped"

    resumed = StandIn()
    result = search(tmp_path, resumed, "--time-limit", "600", command="resume")
    assert result.status is RunStatus.FINISHED
    assert not {k for k in resumed.asked if held.get(k)}  # nothing evaluated before is asked again
    assert generations(tmp_path) == {(t, i): list(range(7)) for t in TASKS for i in (0, 1)}


def test_a_run_stopped_by_its_time_limit_ends_with_the_resume_hint(tmp_path, capsys):
    """As Ctrl-C's does: the user learns that the run goes on, and with which command."""
    result = search(tmp_path, StandIn(delay=0.1), "--time-limit", "0.5", generations=6)
    assert result.status is RunStatus.STOPPED
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"stopped by --time-limit 0.5: what finished is kept; go on with `python run.py resume {tmp_path / 'a.db'}` "
        "(another 0.5 s; --time-limit SECONDS to change it)")
    search(tmp_path, StandIn(), "--time-limit", "600", command="resume")
    assert "go on with" not in capsys.readouterr().out  # finished: nothing to go on with


def test_an_evaluation_budget_ends_each_task_at_exactly_that_many_evaluations(tmp_path):
    ev = StandIn()
    result = search(tmp_path, ev, "--budget-evals", "7", generations=5)
    assert {e.halt for e in result.ends.values()} == {Halt.BUDGET} and result.status is RunStatus.FINISHED
    for task in TASKS:
        assert sum(n for (t, _), n in ev.asked.items() if t == task) == 7
        assert summary_entry(result, task)["evaluations"] == 7


def test_aa_sentinels_time_the_starting_kernel_apart_from_the_candidates(tmp_path, builtin):
    ev = StandIn()
    search(tmp_path, ev, "--aa-every", "4")
    submitted = sum(ev.asked.values())
    assert 1 <= len(ev.aa) <= submitted // 4
    assert all(source == builtin[task].start_source for task, source in ev.aa)
    sentinels = rows(tmp_path, "sentinels")
    assert len(sentinels) == len(ev.aa)
    assert all(json.loads(s[4])["flags"] == [Flag.AA_SENTINEL] for s in sentinels)
    # the candidates' evaluations hold none of them
    assert len(rows(tmp_path, "evaluations")) == len(rows(tmp_path, "candidates")) == submitted
    assert rows(tmp_path, "sessions")[0][9] == len(ev.aa)  # aa_n


class Tee:
    """The pipe to `tee` that the same Ctrl-C kills: each write fails with BrokenPipeError once `gone`."""

    def __init__(self) -> None:
        self.gone, self.lines = False, []

    def write(self, text: str) -> int:
        if self.gone:
            raise BrokenPipeError(32, "Broken pipe")
        self.lines.append(text)
        return len(text)

    def flush(self) -> None:
        if self.gone:
            raise BrokenPipeError(32, "Broken pipe")


def test_a_run_piped_through_tee_and_stopped_by_ctrl_c_still_exports_and_ends_interrupted(tmp_path, capsys,
                                                                                            monkeypatch):
    """Its next line raised BrokenPipeError in the middle of the stop: nothing after ^C, nothing
    exported, the archive left `running`. The rest now goes to standard error."""
    import _thread

    tee = Tee()
    monkeypatch.setattr("sys.stdout", tee)

    def ctrl_c() -> None:
        time.sleep(0.5)
        tee.gone = True
        _thread.interrupt_main()
    threading.Thread(target=ctrl_c, daemon=True).start()
    result = search(tmp_path, StandIn(delay=0.05), generations=50)
    assert result.status is RunStatus.INTERRUPTED
    with closing(sqlite3.connect(tmp_path / "a.db")) as conn:
        assert conn.execute("select status from runs").fetchall() == [("interrupted",)]
    assert sorted(p.name for p in (tmp_path / "best").iterdir()) == sorted([*(f"{t}.py" for t in TASKS),
                                                                           "summary.csv", "summary.json"])
    err = capsys.readouterr().err.splitlines()
    closed = err.index("(standard output is closed: the rest goes to standard error)")
    assert err[closed + 1].startswith("stopping: the evaluations in flight finish")
    assert err[-1] == f"interrupted: what finished is kept; go on with `python run.py resume {tmp_path / 'a.db'}`"
