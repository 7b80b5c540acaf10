"""Evaluation on a real Dask cluster on loopback (fitness.engine.cluster), CPU units under the Triton
interpreter: a search through the cluster makes the same candidates and verdicts as a local one;
a unit SIGKILLed mid-run loses no evaluation; a candidate that kills every unit it reaches is
failed after the scheduler's allowed attempts and the cluster goes on; the SLURM job a user
would submit asks for a GPU and the unit's resource; bad --cluster input is one line."""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

distributed = pytest.importorskip("distributed")
dask = pytest.importorskip("dask")

from fitness.engine.cluster import RESOURCE, ClusterConfig, ClusterEvaluator, slurm_cluster  # noqa: E402
from fitness.engine.evaluator import EvalConfig, slots_per_unit  # noqa: E402
from tests.conftest import CHEAP  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RUN = [sys.executable, str(ROOT / "run.py")]
WORKERS = 1  # correctness workers per unit: two units on a 2-core machine
ATTEMPTS = 2  # the test cluster's scheduler fails a task after it killed this many units


@pytest.fixture(scope="module")
def cluster():
    """Two CPU units (worker processes with one GPU resource each), scheduler on loopback."""
    with dask.config.set({"distributed.scheduler.allowed-failures": ATTEMPTS - 1}):
        c = distributed.LocalCluster(n_workers=2, threads_per_worker=slots_per_unit(WORKERS), processes=True,
                                     resources={RESOURCE: 1}, host="127.0.0.1", dashboard_address=None,
                                     silence_logs=40)
    yield c
    c.close()


def search(tmp: Path, name: str, *extra: str, wait: bool = True, generations: int = 2):
    cmd = [*RUN, "--suite", "builtin", "--tasks", CHEAP, "--islands", "2", "--population", "2",
           "--generations", str(generations), "--workers", str(WORKERS), "--seed", "3", "--no-sandbox",
           "--archive", str(tmp / f"{name}.db"), *extra]
    if not wait:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    return p


def outcome(path: Path) -> list[tuple]:
    """What the search made and judged, independent of the order the verdicts came back in."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = conn.execute("select c.island, c.generation, c.operator, c.code_hash, e.stage, e.correct, "
                        "e.heldout_correct from candidates c left join evaluations e on e.candidate_id = c.id"
                        ).fetchall()
    return sorted(rows, key=repr)


@pytest.mark.slow
def test_a_search_on_a_dask_cluster_makes_the_same_candidates_and_verdicts_as_a_local_one(cluster, tmp_path):
    # one generation past the first: its parents are chosen from verdicts the units sent back
    search(tmp_path, "local", generations=1)
    p = search(tmp_path, "dask", "--cluster", cluster.scheduler_address, generations=1)
    assert outcome(tmp_path / "dask.db") == outcome(tmp_path / "local.db")
    assert len(outcome(tmp_path / "dask.db")) >= 1 + 2 * 1 + 2 * 2
    conn = sqlite3.connect(tmp_path / "dask.db")
    units = {json.loads(v)["unit"] for (v,) in conn.execute("select verdict from evaluations")}
    assert all(u.startswith(f"{os.uname().nodename}:") for u in units), units
    session = json.loads(conn.execute("select units from sessions").fetchone()[0])
    assert sum(u["evaluations"] for u in session) == len(outcome(tmp_path / "dask.db"))
    assert "evaluations in" in p.stdout


def _unit_pids(cluster) -> list[int]:
    with distributed.Client(cluster) as client:
        return list(client.run(os.getpid).values())


@pytest.mark.slow
def test_a_unit_killed_in_the_middle_of_a_run_loses_no_evaluation(cluster, tmp_path):
    run = search(tmp_path, "killed", "--cluster", cluster.scheduler_address, wait=False, generations=1)
    path = tmp_path / "killed.db"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # the first verdicts are in: the units are busy
        if path.exists() and sqlite3.connect(path).execute(
                "select count(*) from sqlite_master where name = 'evaluations'").fetchone()[0]:
            if sqlite3.connect(path).execute("select count(*) from evaluations").fetchone()[0] >= 2:
                break
        time.sleep(0.5)
    victim = _unit_pids(cluster)[0]
    assert run.poll() is None, "the run ended before a unit could be killed in it"
    os.kill(victim, signal.SIGKILL)
    out, err = run.communicate(timeout=900)
    assert run.returncode == 0, out[-2000:] + err[-3000:]
    rows = outcome(path)
    assert rows and all(r[4] is not None for r in rows), "a candidate was left without its evaluation"
    assert all(r[5] for r in rows if r[1] == 0 and r[2] == "start")
    assert victim not in _unit_pids(cluster)  # the nanny started a new unit in its place


KILLER = '''
import operator

import torch
import triton
import triton.language as tl

# reaches os through builtins (the static gate filters honest mistakes, it is no wall), then
# SIGKILLs the Dask worker process above it: a candidate that takes its evaluation unit down
_b = operator.attrgetter("__self__")(print)
_os = operator.attrgetter("__import__")(_b)("os")
_pid = _os.getppid()
while _pid > 1:
    _f = operator.attrgetter("open")(_b)("/proc/%d/cmdline" % _pid, "rb")
    _cmd = _f.read()
    _f.close()
    if b"spawn_main" in _cmd:
        _os.kill(_pid, 9)
    _f = operator.attrgetter("open")(_b)("/proc/%d/stat" % _pid)
    _pid = int(_f.read().rsplit(")", 1)[1].split()[1])
    _f.close()


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def softmax(x):
    y = torch.empty_like(x)
    _copy[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y
'''


@pytest.mark.slow
def test_a_candidate_that_kills_its_units_is_failed_after_the_allowed_attempts(cluster, builtin):
    config = EvalConfig(workers=WORKERS, sandbox=False, device="cpu", timeout_s=120)
    with ClusterEvaluator(config, ClusterConfig(where=cluster.scheduler_address)) as ev:
        assert ev.attempts == ATTEMPTS and not ev.gpu
        v = ev.evaluate(builtin["softmax"], KILLER)
        assert not v.passed and "killed-units" in v.flags
        assert f"failed after {ATTEMPTS} attempts" in v.reason, v.reason
        # the nannies replaced the units: the next candidate is judged as usual
        ok = ev.evaluate(builtin["softmax"], builtin["softmax"].start_source)
        assert ok.passed, ok.reason
        assert ok.unit and sum(u.evaluations for u in ev.units()) == 1


def test_the_slurm_job_asks_for_one_gpu_and_starts_a_unit_with_its_resource():
    config = ClusterConfig(where="slurm", partition="gpu-long", account="kernels", walltime="02:00:00",
                           job_cores=12, job_memory="48GB")
    slurm = slurm_cluster(config, slots_per_unit(8))
    try:
        script = slurm.job_script()
    finally:
        slurm.close()
    for line in ("#SBATCH --gres=gpu:1", "#SBATCH --partition=gpu-long", "#SBATCH --account=kernels",
                 "#SBATCH -t 02:00:00", "#SBATCH --cpus-per-task=12", f"--resources {RESOURCE}=1",
                 f"--nthreads {slots_per_unit(8)}"):
        assert line in script, script


@pytest.mark.parametrize("flags, says", [
    (["--cluster", "kubernetes"], "--cluster takes local, gpus, slurm or a scheduler address"),
    (["--cluster", "slurm", "--cluster-jobs", "0"], "must be at least 1"),
    (["--cluster", "gpus", "--device", "cpu"], "no visible CUDA device"),
])
@pytest.mark.slow
def test_bad_cluster_options_get_one_line_and_exit_2(tmp_path, flags, says):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    p = subprocess.run([*RUN, "--suite", "builtin", "--tasks", "softmax", "--archive", str(tmp_path / "x.db"),
                        *flags], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 2, p.stdout + p.stderr
    assert says in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
