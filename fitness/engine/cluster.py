"""Evaluation on a Dask distributed cluster: one evaluation unit per GPU, the engine in one process.

A unit is a Dask worker process that owns one GPU (the `GPU` resource, 1 per worker) and runs a
whole `fitness.engine.evaluator.Evaluator` for it: its correctness pool, its clean replay children and its
measuring turn, so each GPU times one candidate at a time, exactly as in a local run. The engine
stays the archive's only writer; it submits (evaluation config, task name, source) and gets a
`Verdict` back. Candidate code never runs in the unit's own process (the unit forks sandboxed
children as the local evaluator does), so the trust boundary is the local one.

Faults are Dask's: a unit that dies mid-evaluation has its evaluations run again on another
(the scheduler reschedules them); one candidate whose evaluation kills `attempts` units is failed
with that reason (`distributed.scheduler.allowed-failures`, set on the clusters started here).
Speedups are always a candidate over a baseline timed in the same unit, so verdicts from
different GPU models never share a ratio; each verdict names its unit and device.
"""
from __future__ import annotations

import asyncio
import logging
import math
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from fitness.common.flags import Flag
from fitness.engine.evaluator import EvalConfig, Evaluator, slots_per_unit
from fitness.engine.pool import CancelCheck
from fitness.engine.verdict import UnitStats, Verdict
from suites.task import Task

if TYPE_CHECKING:
    from dask_jobqueue import SLURMCluster
    from distributed import Client, SpecCluster

RESOURCE = "GPU"  # what a unit offers one of; every evaluation asks for a share of it
CONNECT_TIMEOUT_S = 120.0  # a cluster with no unit after this long is an error, not a wait


def share(slots: int) -> float:
    """The resource one evaluation asks for: `slots` of them fit in one unit (rounded down, since
    25 x (1/25) can sum past 1.0 in floating point and leave one slot idle)."""
    return math.floor(1e6 / slots) / 1e6


@dataclass(frozen=True)
class ClusterConfig:
    where: str = "local"  # "local" (no Dask), "gpus" (this node, a unit per GPU), "slurm", or tcp://HOST:PORT
    attempts: int = 3  # units a candidate's evaluation may kill before it is failed
    jobs: int = 1  # slurm: jobs submitted, one GPU each
    partition: str | None = None  # slurm: passed through as --partition
    account: str | None = None  # slurm: --account
    walltime: str = "04:00:00"  # slurm: each job's time limit
    job_memory: str = "64GB"  # slurm: each job's host memory
    job_cores: int = 16  # slurm: each job's CPU cores (its correctness workers use them)
    gpus: tuple[str, ...] = field(default_factory=tuple)  # gpus: which CUDA devices (default: all visible)


# -- the unit's side (runs in a Dask worker process) ------------------------------------------
_units: dict[EvalConfig, Evaluator] = {}
_lock = threading.Lock()


def _unit_name() -> str:
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES")
    return f"{socket.gethostname()}:{'gpu' + gpus if gpus else 'all'}:{os.getpid()}"


def _evaluator(config: EvalConfig) -> Evaluator:
    with _lock:
        if config not in _units:
            _units[config] = Evaluator(config)
        return _units[config]


@lru_cache(maxsize=8)
def _suite(suite: str, path: str | None) -> dict[str, Task]:
    from suites.registry import load_suite

    return load_suite(suite, path)


def probe(config: EvalConfig) -> UnitStats:
    """Starts the unit's evaluator (pools, zygotes) and says what it is."""
    return _evaluator(config).unit_stats(_unit_name())


def evaluate_here(config: EvalConfig, suite: str, name: str, source: str, timed: bool,
                  aa: bool) -> tuple[Verdict, UnitStats]:
    """One evaluation in this unit; the task is loaded here by name (suite data by path)."""
    ev = _evaluator(config)
    tasks = _suite(suite, config.suite_path)
    if name not in tasks:
        raise LookupError(f"unit {_unit_name()} has no task {name!r} in suite {suite!r} "
                          f"(its suite data: {config.suite_path or os.environ.get('TRITON_EVOLVE_DATA')})")
    v = ev.evaluate(tasks[name], source, timed, aa=aa)
    assert v is not None, "an evaluation is None only when cancelled, and this one has no cancel"
    v.unit = _unit_name()
    return v, ev.unit_stats(_unit_name())


# -- the engine's side -------------------------------------------------------------------------
class ClusterError(Exception):
    """A cluster that cannot be started or reached; the message is meant for the user."""


class ClusterEvaluator:
    """The engine's evaluator over a Dask cluster: the calls the search makes of `Evaluator`
    (evaluate, retime, close, the busy totals), each evaluation run in some unit.

    `unit_fn` and `probe_fn` run in the units; a stand-in pair (bench/cluster_scale.py) measures
    the engine's side alone."""

    def __init__(self, config: EvalConfig, cluster: ClusterConfig, client: Client | None = None,
                 unit_fn: Callable[..., tuple[Verdict, UnitStats]] = evaluate_here,
                 probe_fn: Callable[[EvalConfig], UnitStats] = probe):
        self.config, self.cluster = config, cluster
        self.slots = slots_per_unit(config.workers)
        self._share = share(self.slots)
        self._unit_fn = unit_fn
        self._owned: SpecCluster | None = None
        self.client = client if client is not None else self._connect()
        self._stats: dict[str, UnitStats] = {}  # each unit's totals, as its last reply left them
        self._base: dict[str, UnitStats] = {}  # ... and as the probe found them (a cluster may be older)
        self._done: dict[str, int] = {}  # verdicts received from each unit in this command
        self._lock = threading.Lock()
        try:
            units = self._probe(probe_fn)
        except BaseException:
            self.close()
            raise
        self.attempts = self._attempts()
        self.gpu = any(u.gpu for u in units)
        if self.gpu and not all(u.gpu for u in units):
            self.close()
            raise ClusterError("some of the cluster's units see a GPU and some do not: untimed and timed "
                               "verdicts would mix (start workers only on GPU nodes)")
        self.expected_units = max(len(units), cluster.jobs if cluster.where == "slurm" else 0)

    def _connect(self) -> Client:
        from distributed import Client

        self._owned = start_cluster(self.cluster, self.slots)
        try:
            return Client(self._owned if self._owned is not None else self.cluster.where,
                          timeout=f"{CONNECT_TIMEOUT_S}s")
        except OSError as e:
            if self._owned is not None:
                self._owned.close()
            raise ClusterError(f"cannot reach the Dask scheduler at {self.cluster.where}: {e}") from None

    def _attempts(self) -> int:
        """Units one evaluation may kill before the scheduler fails it (its allowed-failures + 1;
        a cluster started elsewhere has its own setting)."""
        try:
            return 1 + int(self.client.run_on_scheduler(_allowed_failures))
        except Exception:  # a scheduler that refuses run_on_scheduler: Dask's default
            return self.cluster.attempts

    def _probe(self, probe_fn: Callable[[EvalConfig], UnitStats]) -> list[UnitStats]:
        """Every unit now in the cluster started (its pools forked) and asked what it runs on."""
        wait = None if self.cluster.where == "slurm" else CONNECT_TIMEOUT_S  # queued jobs start when they start
        try:
            self.client.wait_for_workers(1, timeout=wait)
        except TimeoutError:
            raise ClusterError(f"no Dask worker joined {self.cluster.where} in {CONNECT_TIMEOUT_S:.0f} s "
                               f"(start them with triton-evolve-worker)") from None
        workers = self.client.scheduler_info(n_workers=-1)["workers"]
        units = [a for a, w in workers.items() if w.get("resources", {}).get(RESOURCE, 0) >= 1]
        if not units:
            raise ClusterError(f"no worker of {self.cluster.where} offers the {RESOURCE} resource "
                               f"(start workers with --resources {RESOURCE}=1, or triton-evolve-worker)")
        futures = [self.client.submit(probe_fn, self.config, workers=[a], allow_other_workers=False,
                                      resources={RESOURCE: self._share}, pure=False) for a in units]
        stats = self.client.gather(futures)
        for s in stats:
            self._stats[s.unit] = self._base[s.unit] = s
        return stats

    @property
    def parallelism(self) -> int:
        """Evaluations the engine keeps in flight: every slot of every unit expected."""
        return self.slots * max(1, self.expected_units)

    def evaluate(self, task: Task, source: str | bytes, timed: bool = True, cancel: CancelCheck | None = None,
                 aa: bool = False) -> Verdict | None:
        """The verdict from whichever unit ran it; None when `cancel()` was true before it was
        sent. A stop lets evaluations already sent finish, as a local run does."""
        from distributed import KilledWorker

        if cancel and cancel():
            return None
        source = source.decode() if isinstance(source, bytes) else source
        future = self.client.submit(self._unit_fn, self.config, task.suite, task.name, source, timed, aa,
                                    resources={RESOURCE: self._share}, pure=False)
        try:
            verdict, stats = future.result()
        except KilledWorker:
            return killed_verdict(task.name, self.attempts)
        finally:
            future.release()
        with self._lock:
            self._stats[stats.unit] = stats
            self._done[stats.unit] = self._done.get(stats.unit, 0) + 1
        return verdict

    def retime(self, task: Task, source: str) -> Verdict:
        return self.evaluate(task, source) or Verdict(task=task.name)

    def units(self, evaluations: int = 0) -> list[UnitStats]:
        """Each unit's work in this command (its totals less what the probe found); the
        evaluations are those each unit returned here (the argument serves the local evaluator)."""
        with self._lock:
            out = []
            for name, s in sorted(self._stats.items()):
                b = self._base.get(name) or replace(s, correctness_busy_s=0.0, measuring_s=0.0)
                out.append(replace(s, evaluations=self._done.get(name, 0),
                                   correctness_busy_s=round(s.correctness_busy_s - b.correctness_busy_s, 3),
                                   measuring_s=round(s.measuring_s - b.measuring_s, 3)))
            return out

    @property
    def workers(self) -> int:
        return sum(s.workers for s in self.units()) or self.config.workers

    @property
    def correctness_busy_s(self) -> float:
        return sum(s.correctness_busy_s for s in self.units())

    @property
    def measuring_s(self) -> float:
        return sum(s.measuring_s for s in self.units())

    @property
    def gpus(self) -> int:
        return sum(s.gpu for s in self.units())

    def close(self) -> None:
        self.client.close()
        if self._owned is not None:
            self._owned.close()

    def __enter__(self) -> ClusterEvaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def killed_verdict(task: str, attempts: int) -> Verdict:
    return Verdict(task=task, stage="parse", flags=[Flag.KILLED_UNITS],
                   reason=f"its evaluation killed {attempts} evaluation units (Dask workers), one after "
                          f"another: failed after {attempts} attempts")


def _allowed_failures(dask_scheduler: Any = None) -> int:
    return dask_scheduler.allowed_failures


# -- clusters started here ---------------------------------------------------------------------
def _quiet(attempts: int | None = None) -> None:
    """Dask's settings for clusters started or joined here: INFO lines about workers coming and
    going stay off the terminal; a scheduler started here fails a task after it killed
    `attempts` workers."""
    import dask

    settings: dict[str, object] = {"logging.distributed": "warning"}
    if attempts is not None:
        settings["distributed.scheduler.allowed-failures"] = max(0, attempts - 1)
    dask.config.set(settings)
    for name in ["distributed", *logging.root.manager.loggerDict]:  # Dask sets some child loggers' own levels
        if name.startswith("distributed"):
            logging.getLogger(name).setLevel(logging.WARNING)


def visible_gpus() -> list[str]:
    """The CUDA devices this process may use, as CUDA_VISIBLE_DEVICES names them."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip() and not g.strip().startswith("-")]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def unit_options(slots: int, gpu: str | None, host: str | None = None) -> dict:
    """A Nanny's options for one unit: pinned to `gpu` (None: no GPU, the interpreter), one
    `GPU` resource, `slots` threads, and no Dask memory limit (the evaluator bounds its children
    and caches itself; Dask's would kill a unit holding a large reference cache)."""
    # the worker process reads its log level from the environment when it imports Dask
    options = {"nthreads": slots, "resources": {RESOURCE: 1}, "memory_limit": 0, "silence_logs": logging.WARNING,
               "env": {"CUDA_VISIBLE_DEVICES": gpu if gpu is not None else "", "DASK_LOGGING__DISTRIBUTED": "warning"}}
    if host:
        options["host"] = host
    return options


def start_cluster(cluster: ClusterConfig, slots: int) -> SpecCluster | None:
    """The cluster to start for `cluster.where` (None: connect to the given address)."""
    _quiet(cluster.attempts if cluster.where in ("gpus", "slurm") else None)
    if cluster.where == "gpus":
        return gpu_cluster(list(cluster.gpus) or visible_gpus(), slots)
    if cluster.where == "slurm":
        slurm = slurm_cluster(cluster, slots)
        slurm.scale(jobs=cluster.jobs)
        return slurm
    return None


def gpu_cluster(gpus: list, slots: int) -> SpecCluster:
    from distributed import Nanny, Scheduler, SpecCluster

    if not gpus:
        raise ClusterError("--cluster gpus: this machine has no visible CUDA device")
    workers = {f"gpu{g}": {"cls": Nanny, "options": unit_options(slots, str(g), "127.0.0.1")} for g in gpus}
    return SpecCluster(workers=workers, scheduler={"cls": Scheduler, "options": {
        "host": "127.0.0.1", "dashboard_address": None}}, silence_logs=logging.WARNING)


def slurm_cluster(cluster: ClusterConfig, slots: int) -> SLURMCluster:
    """dask-jobqueue's SLURM cluster: one job per GPU, each a unit (SLURM sets its
    CUDA_VISIBLE_DEVICES), started with the unit's resource and threads."""
    try:
        from dask_jobqueue import SLURMCluster
    except ImportError:
        raise ClusterError("--cluster slurm needs dask-jobqueue: pip install -e '.[cluster]'") from None
    extra = [f"--{k}={v}" for k, v in (("partition", cluster.partition), ("account", cluster.account)) if v]
    # cores: the worker's threads (its evaluation slots); job_cpu: the CPUs booked for the job
    return SLURMCluster(cores=slots, job_cpu=cluster.job_cores, processes=1, memory=cluster.job_memory,
                        walltime=cluster.walltime, job_extra_directives=["--gres=gpu:1", *extra],
                        worker_extra_args=["--resources", f"{RESOURCE}=1"])


# -- triton-evolve-worker: units for a scheduler started elsewhere ------------------------------
def worker_main(argv: list[str] | None = None) -> int:
    """`triton-evolve-worker tcp://HOST:8786`: one unit per visible GPU of this machine (or
    `--cpu-units N` interpreter units on a machine without one), until stopped."""
    import argparse

    p = argparse.ArgumentParser(prog="triton-evolve-worker", description=worker_main.__doc__)
    p.add_argument("scheduler", help="the Dask scheduler's address, e.g. tcp://10.0.0.1:8786")
    p.add_argument("--workers", type=int, default=8, help="the searches' --workers (correctness workers per "
                   "unit); sets the unit's evaluation slots (default 8)")
    p.add_argument("--gpus", default=None, help="comma-separated CUDA devices (default: every visible one)")
    p.add_argument("--cpu-units", type=int, default=0, metavar="N",
                   help="no GPU: N units that run kernels under the Triton interpreter (correctness only)")
    p.add_argument("--host", default=None, help="the address the units listen on (default: Dask's choice)")
    args = p.parse_args(argv)
    gpus = args.gpus.split(",") if args.gpus else ([] if args.cpu_units else visible_gpus())
    if not gpus and args.cpu_units < 1:
        p.error("no visible CUDA device: name --gpus, or ask for --cpu-units N")
    slots = slots_per_unit(args.workers)
    pins: list[str | None] = [str(g) for g in gpus] or [None] * args.cpu_units
    _quiet()
    try:
        asyncio.run(_serve(args.scheduler, [unit_options(slots, g, args.host) for g in pins]))
    except KeyboardInterrupt:
        pass
    return 0


async def _serve(scheduler: str, options: list[dict]) -> None:
    from distributed import Nanny

    nannies = [Nanny(scheduler, **o) for o in options]
    await asyncio.gather(*nannies)
    print(f"triton-evolve-worker: {len(nannies)} unit(s) joined {scheduler}", flush=True)
    await asyncio.gather(*(n.finished() for n in nannies))
