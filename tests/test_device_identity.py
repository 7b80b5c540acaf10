"""Issue 40, one archive and two GPUs: every evaluation names its device; a resume on another
device model refuses in one line naming both and the flag, or with --retime sets the other
device's evaluations aside and evaluates the kernels the run keeps again here, so no timing of one
device is compared with another's. The stand-in for a second GPU: the device name changed in the
archive (this machine has none; a CPU run's device is "cpu")."""
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from archives.archive import Archive
from archives.records import Draft
from evolve.device_identity import RETIME_FLAG, check_devices, device_model, machine_devices, retime_elsewhere
from evolve.task_search import known_invalid
from fitness.common.flags import Flag
from fitness.engine.verdict import Verdict
from tests.conftest import CHEAP

ROOT = Path(__file__).resolve().parent.parent
RUN = [sys.executable, str(ROOT / "run.py")]
H100 = "NVIDIA H100 80GB HBM3"


def test_device_model_names_the_model_not_the_mode():
    assert device_model("cpu (Triton interpreter)") == "cpu"
    assert device_model(H100) == H100
    assert device_model("") == ""


class _Unit:
    def __init__(self, device):
        self.device = device


class _Evaluator:
    """A stand-in: what its units report, and whether it has a GPU."""

    def __init__(self, devices, gpu=False):
        self.devices, self.gpu = devices, gpu

    def units(self, evaluations=0):
        return [_Unit(d) for d in self.devices]


def test_machine_devices_from_units_or_cpu():
    assert machine_devices(_Evaluator(["?"])) == frozenset({"cpu"})  # a local pool before its first child
    assert machine_devices(_Evaluator(["cpu (Triton interpreter)"])) == frozenset({"cpu"})
    assert machine_devices(_Evaluator([H100, "NVIDIA H200"], gpu=True)) == frozenset({H100, "NVIDIA H200"})


def _archive(tmp_path, devices):
    a = Archive(tmp_path / "a.db")
    run = a.new_run("builtin", {})
    ids = []
    for i, device in enumerate(devices):
        c = a.add_candidate(Draft(run, "softmax", 0, 0, f"x = {i}", f"h{i}", (), "start" if i == 0 else "knobs"))
        a.add_evaluation(c.id, Verdict("softmax", stage="timed", correct=True, heldout_correct=True,
                                       speedup=1.0 + i, device=device))
        ids.append(c.id)
    return a, run, ids


def test_resume_on_another_device_is_refused_then_retimed_with_nothing_deleted(tmp_path):
    a, run, ids = _archive(tmp_path, [H100, H100, "", "cpu (Triton interpreter)"])
    check = check_devices(a, run, frozenset({"cpu"}))
    assert check.moved and check.foreign == {H100: 2}
    line = check.refusal(a.path, run)
    assert "\n" not in line and H100 in line and "this machine is cpu" in line and RETIME_FLAG in line
    assert not check_devices(a, run, frozenset({H100, "cpu"})).moved
    said = retime_elsewhere(a, run, check)
    assert "2 evaluation(s) set aside" in said
    left = {c.id: c.device for c in a.candidates(run, "softmax")}
    # the H100's two are unevaluated now (kept kernels are evaluated again); the rest stay
    assert left == {ids[0]: "", ids[1]: "", ids[2]: "", ids[3]: "cpu (Triton interpreter)"}
    assert [c.evaluated for c in a.candidates(run, "softmax")] == [False, False, True, True]
    retired = a.db.execute("select candidate_id, device, speedup, retired_for from retired_evaluations "
                           "order by candidate_id").fetchall()
    assert retired == [(ids[0], H100, 1.0, "cpu"), (ids[1], H100, 2.0, "cpu")]
    assert not check_devices(a, run, frozenset({"cpu"})).moved
    a.close()


def test_a_task_known_invalid_in_an_earlier_session_stays_invalid(tmp_path):
    a = Archive(tmp_path / "a.db")
    run = a.new_run("builtin", {})
    start = a.add_candidate(Draft(run, "t", -1, 0, "s", "h0", (), "start"))
    trace = "the reference fails here: Traceback (most recent call last):\n  File ref.py, line 3\nRuntimeError: boom"
    a.add_evaluation(start.id, Verdict("t", stage="none", reason=trace, flags=["invalid-here"], device="cpu"))
    assert known_invalid(a.candidates(run, "t")) == "the reference fails here: RuntimeError: boom"
    b = a.add_candidate(Draft(run, "u", -1, 0, "s", "h1", (), "start"))
    a.add_evaluation(b.id, Verdict("u", stage="correct", reason="timing: the replay faulted",
                                   flags=[Flag.TIMING_FAILED], device=H100))
    assert known_invalid(a.candidates(run, "u")).startswith("its starting kernel cannot be timed here")
    child = a.add_candidate(Draft(run, "u", 0, 1, "c", "h2", (b.id,), "knobs"))
    a.add_evaluation(child.id, Verdict("u", stage="correct", reason="timing: the replay faulted",
                                       flags=[Flag.TIMING_FAILED], device=H100))
    assert known_invalid([a.candidate(child.id)]) == ""  # a child that cannot be timed is its own failure
    a.close()


def _cmd(tmp, *extra):
    return [*RUN, "--suite", "builtin", "--tasks", CHEAP, "--islands", "2", "--population", "2",
            "--workers", "2", "--device", "cpu", "--archive", str(tmp / "a.db"), "--export", str(tmp / "best"),
            *extra]


def _db(tmp):
    return sqlite3.connect(f"file:{tmp / 'a.db'}?mode=ro", uri=True)


@pytest.mark.slow
def test_cli_resume_on_another_gpu_refuses_in_one_line_or_retimes_what_it_keeps(tmp_path):
    p = subprocess.run(_cmd(tmp_path, "--generations", "1"), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    conn = sqlite3.connect(tmp_path / "a.db")
    conn.execute("update evaluations set device = ? where device != ''", [H100])  # as if timed on an H100
    conn.commit()
    before = conn.execute("select count(*) from evaluations where device = ?", [H100]).fetchone()[0]
    conn.close()
    assert before >= 1 + 2 * 1 + 2 * 2  # gen 0: the start and a mutant an island; gen 1: two an island
    old = (tmp_path / "a.db").read_bytes()
    p = subprocess.run(_cmd(tmp_path, "--generations", "2", "--extend"), capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    error = p.stderr.strip().splitlines()[-1]
    assert H100 in error and "this machine is cpu" in error and RETIME_FLAG in error, p.stderr
    assert (tmp_path / "a.db").read_bytes() == old, "a refused resume wrote to the archive"

    p = subprocess.run(_cmd(tmp_path, "--generations", "2", "--extend", RETIME_FLAG), capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    assert f"{before} evaluation(s) set aside" in p.stdout and "re-timed on cpu" in p.stdout, p.stdout
    conn = _db(tmp_path)
    # no H100 evaluation is left beside this machine's: every comparison the resume made was cpu-to-cpu
    assert conn.execute("select count(*) from evaluations where device = ?", [H100]).fetchone()[0] == 0
    assert conn.execute("select count(*) from retired_evaluations where device = ?", [H100]).fetchone()[0] == before
    kept = {m for (members,) in conn.execute("select members from populations where generation = 1")
            for m in json.loads(members)}
    start = conn.execute("select id from candidates where operator = 'start'").fetchone()[0]
    evaluated_here = {r[0] for r in conn.execute("select candidate_id from evaluations where device like 'cpu%'")}
    assert kept | {start} <= evaluated_here, "a kept kernel was not evaluated again on this device"
    survivors = {m for (members,) in conn.execute("select members from populations where generation = 2")
                 for m in json.loads(members)}
    assert survivors <= evaluated_here
    # the retired evaluations' candidates that the run did not keep stay unevaluated, never repeated
    assert conn.execute("select count(*) from (select candidate_id from evaluations group by candidate_id "
                        "having count(*) > 1)").fetchone()[0] == 0
    summary = json.loads((tmp_path / "best" / "summary.json").read_text())
    assert summary["tasks"][0]["status"] == "exported" and summary["tasks"][0]["device"].startswith("cpu")


@pytest.mark.gpu
def test_this_gpu_is_named_as_its_verdicts_name_it(evaluator, builtin):
    """On the GPU: the device a resume compares against (read before any evaluation, in a child
    process) is the one the evaluator's verdicts name."""
    here = machine_devices(evaluator)
    assert here and "cpu" not in here
    v = evaluator.evaluate(builtin["softmax"], builtin["softmax"].start_source)
    assert device_model(v.device) in here, (v.device, here)
