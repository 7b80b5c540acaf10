"""--config FILE, `resume ARCHIVE` and --extend: the settings' layers (command line over file over
the stored run over defaults), a file checked key by key, and a resume that continues from the
archive alone, refusing every change it cannot make in one message with the archive untouched."""
import json
import sqlite3
import subprocess
import sys
from contextlib import closing

import pytest

import run
from evolve.cli_options import parse, search_specs
from evolve.config_file import PER_COMMAND, read_file, resume_conflicts
from tests.conftest import CHEAP, ROOT

RUN = [sys.executable, str(ROOT / "run.py")]
TINY = f'suite = "builtin"\ntasks = ["{CHEAP}"]\nislands = 1\npopulation = 2\nworkers = 1\n'


def configs(*argv):
    return run.search_configs(parse(["search", *argv]))


def test_a_file_sets_options_and_the_command_line_overrides_it(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text(TINY + 'migration-interval = 2\ntimeout = 30\n[search]\nseed = 7\n')
    c = configs("--config", str(f), "--islands", "3", "--archive", str(tmp_path / "a.db"))
    assert (c.search.islands, c.search.population, c.search.seed, c.search.migration_interval) == (3, 2, 7, 2)
    assert c.run.tasks == CHEAP and c.evaluation.timeout_s == 30.0 and c.evaluation.workers == 1
    assert c.run.options["islands"] == 3 and c.run.archive == tmp_path / "a.db"
    # a flag given at its default still overrides the file: `given` tells it from a default
    assert configs("--config", str(f), "--islands", "4", "--archive", str(tmp_path / "a.db")).search.islands == 4


def test_every_problem_of_a_file_is_named_in_one_message(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text('islnds = 3\npopulation = "big"\ndevice = "tpu"\nfresh = 1\n[llm]\nmodel = 3\nknob_rate = 1\n')
    problems: list[str] = []
    values = read_file(str(f), search_specs(), problems)
    assert values == {"knob_rate": 1.0}  # an integer where a number goes is fine
    assert [p.split(": ", 1)[1] for p in problems] == [
        "unknown key 'islnds' (did you mean 'islands'?)", "population must be an integer, not 'big'",
        "device must be one of auto, cpu, cuda, not 'tpu'", "fresh must be true or false, not 1",
        "model must be a string, not 3"]
    with pytest.raises(run.UsageError, match="islnds.*population.*tpu"):
        configs("--config", str(f), "--archive", str(tmp_path / "a.db"))
    f.write_text("islands = [")
    with pytest.raises(run.UsageError, match="not valid TOML"):
        configs("--config", str(f), "--archive", str(tmp_path / "a.db"))


def test_a_resume_keeps_what_it_must_and_grows_only_when_asked():
    old = {"seed": 0, "islands": 2, "generations": 3, "tasks": "softmax,matmul", "category": None}
    same = {**old, "tasks": "matmul, softmax"}
    assert resume_conflicts(old, same, extend=False) == []
    grown = {**old, "generations": 5, "tasks": "softmax,matmul,add"}
    assert [c.split(" (")[0] for c in resume_conflicts(old, grown, extend=False)] == ["--generations 3",
                                                                                     "--tasks softmax,matmul"]
    assert resume_conflicts(old, grown, extend=True) == []
    shrunk = {**old, "seed": 1, "generations": 2, "tasks": "softmax", "category": "norm"}
    assert len(resume_conflicts(old, shrunk, extend=True)) == 4
    assert resume_conflicts({}, shrunk, extend=False) == []  # an older archive kept none of these


def query(db, *sql):
    # closed at once: a read-only connection left open across another process's session of the
    # archive reads it through a stale shared-memory index
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        return [conn.execute(q).fetchall() for q in sql]


def rows(db):
    return query(db, *(f"select * from {t} order by 1" for t in ("runs", "candidates", "evaluations")))


@pytest.fixture(scope="module")
def started(tmp_path_factory):
    """A run of generation 0 only (each island's starting kernel), made from a config file."""
    tmp = tmp_path_factory.mktemp("cfg")
    (tmp / "c.toml").write_text(TINY + "generations = 0\n")
    p = subprocess.run([*RUN, "--config", str(tmp / "c.toml"), "--archive", str(tmp / "a.db")],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return tmp


@pytest.mark.slow
def test_the_resolved_settings_are_stored_complete(started):
    stored = json.loads(rows(started / "a.db")[0][0][2])
    assert set(search_specs()) - set(PER_COMMAND) <= set(stored)
    assert (stored["islands"], stored["population"], stored["generations"], stored["tasks"]) == (1, 2, 0, CHEAP)


@pytest.mark.slow
def test_changes_a_resume_cannot_make_are_refused_together(started):
    db = started / "a.db"
    before = db.read_bytes(), rows(db)
    p = subprocess.run([*RUN, "resume", str(db), "--seed", "4", "--islands", "3", "--generations", "2",
                        "--tasks", "softmax,matmul"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    for part in ("--seed 0 (this command: 4)", "--islands 1 (this command: 3)", "--generations 0",
                 f"--tasks {CHEAP}", "add --extend"):
        assert part in p.stderr, p.stderr
    p = subprocess.run([*RUN, "--archive", str(db), "--population", "4"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2 and "--population 2 (this command: 4)" in p.stderr, p.stderr
    p = subprocess.run([*RUN, "resume", str(started / "none.db")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "holds no run to resume" in p.stderr and not (started / "none.db").exists()
    assert (db.read_bytes(), rows(db)) == before


@pytest.mark.slow
def test_resume_from_the_archive_alone_and_extend(started):
    db = started / "a.db"
    p = subprocess.run([*RUN, "resume", str(db)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "1 island(s) x 2, 0 generation(s)" in p.stdout and "resuming run 1" in p.stdout
    assert (started / "a-best" / "summary.json").exists()  # the export is named after the archive
    p = subprocess.run([*RUN, "--archive", str(db), "--extend", "--generations", "1"], capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0 and "1 island(s) x 2, 1 generation(s)" in p.stdout, p.stderr[-2000:]
    runs, gens, config = query(db, "select count(*) from runs", "select max(generation) from populations",
                               "select config from runs")
    assert runs == [(1,)] and gens == [(1,)]
    assert json.loads(config[0][0])["generations"] == 1  # kept: the next bare resume goes on from there
