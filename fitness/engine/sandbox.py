"""How worker processes are confined: bubblewrap where it works, and a plain process otherwise.

The sandbox gives the worker a read-only view of the filesystem, a private /tmp and /dev/shm (one
per pool: the candidates' zygote and the clean one see different ones), no network and its own
IPC namespace; it dies with the engine. Each child then takes its own /dev/shm, IPC namespace
and private folder again (fitness.process.isolation), so candidates share none of it with each other.
Two Triton caches: the one candidates' processes may write (each child then confines its writes
to a private layer, fitness.process.isolation), and the clean cache that only clean processes (the
baseline, the timing replays: no candidate's host code) write and every process reads:
launchers and the suites' kernels built once (fitness.candidate.cachelayer).
Candidates' sandboxes get the clean cache read-only, so even a child that could not take its own
namespaces cannot plant a file there for a clean process to load.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from fitness.engine.gpu_memory import CANDIDATE_SHARE
from suites.data import project_cache

# the project folder, on every worker's path (fitness/engine/ is two folders down): the suites and
# run.py import from there wherever the command was started
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    root = project_cache()
    root.mkdir(parents=True, exist_ok=True)
    return root


@dataclass(frozen=True)
class Sandbox:
    prefix: tuple[str, ...]
    description: str  # goes into every verdict
    clean_cache: str = ""  # the clean Triton cache: writable only where `clean`

    def wrap(self, argv: list[str], clean: bool = False) -> list[str]:
        if not self.prefix:
            return list(argv)
        return [*self.prefix, "--bind" if clean else "--ro-bind", self.clean_cache, self.clean_cache, *argv]

    @property
    def isolated(self) -> bool:
        return bool(self.prefix)


def triton_cache_dir(override: str | None = None) -> Path:
    path = Path(override) if override else cache_dir() / "triton"
    path.mkdir(parents=True, exist_ok=True)
    return path


def clean_cache_dir(override: str | None = None) -> Path:
    """Beside the Triton cache, not inside it: a bind of that one must not reach this one."""
    base = triton_cache_dir(override)
    path = base.with_name(base.name + "-clean")
    path.mkdir(parents=True, exist_ok=True)
    return path


@functools.lru_cache(maxsize=None)
def detect(disabled: bool = False, triton_cache: str | None = None, data: tuple[str, ...] = ()) -> Sandbox:
    """`triton_cache`: the one writable folder inside the sandbox (default: the user cache);
    `data`: folders the workers read (a suite's data), put back read-only if under /tmp."""
    if disabled:
        return Sandbox((), "none (disabled by --no-sandbox)")
    bwrap = shutil.which("bwrap")
    if not bwrap:
        return Sandbox((), "none (bubblewrap is not installed: apt-get install bubblewrap)")
    cache = triton_cache_dir(triton_cache)
    # the private /tmp hides whatever lives there: put back (read-only) the code and the Python
    # the worker needs, e.g. a checkout or a virtual environment under /tmp
    keep = []
    for p in sorted(_needed_paths() | {os.path.realpath(d) for d in data}):
        if p.startswith("/tmp/") and os.path.exists(p):
            keep += ["--ro-bind", p, p]
    prefix = (bwrap, "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", "--tmpfs", "/dev/shm",
              "--proc", "/proc", "--tmpfs", "/tmp", *keep, "--bind", str(cache), str(cache),
              "--unshare-net", "--unshare-ipc", "--die-with-parent")
    try:
        probe = subprocess.run([*prefix, "true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return Sandbox((), f"none (bubblewrap failed to start: {e})")
    if probe.returncode != 0:
        err = (probe.stderr.strip().splitlines() or ["exit code %d" % probe.returncode])[-1]
        return Sandbox((), f"none (bubblewrap is installed but cannot run here: {err})")
    return Sandbox(prefix, "bubblewrap (read-only filesystem, private /tmp and /dev/shm, no network)",
                   str(clean_cache_dir(str(cache))))


def _needed_paths() -> set[str]:
    root = str(PROJECT_ROOT)
    paths = {root, sys.prefix, sys.exec_prefix, sys.base_prefix, os.path.realpath(sys.executable)}
    paths.update(p for p in sys.path if p)
    paths.update(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
    return {os.path.realpath(p) if os.path.exists(p) else p for p in paths} | paths


MAX_CONNECTIONS = "CUDA_DEVICE_MAX_CONNECTIONS"


def worker_env(interpret: bool, mem_limit_bytes: int, triton_cache: str | None = None, clean: bool = False) -> dict:
    """The zygote's environment. `clean`: its children never import a candidate (the baseline,
    the timing replays) and write the shared Triton cache; the others read it through their own
    private layer (fitness.candidate.cachelayer)."""
    env = dict(os.environ)
    clean_dir = str(clean_cache_dir(triton_cache))
    env["TE_SHARED_TRITON_CACHE"] = clean_dir
    # a candidate's process: its allocator's cap (fitness.engine.gpu_memory); clean children keep the default
    env["TE_GPU_MEM_FRACTION"] = "0.8" if clean else str(CANDIDATE_SHARE)
    if clean:
        env["TE_CLEAN"] = "1"
        env["TRITON_CACHE_DIR"] = clean_dir
        env.pop("TRITON_CACHE_MANAGER", None)
    else:
        env.pop("TE_CLEAN", None)
        env["TRITON_CACHE_DIR"] = str(triton_cache_dir(triton_cache))
        env["TRITON_CACHE_MANAGER"] = "fitness.candidate.cachelayer:ReadThroughCache"
    env["PYTHONUNBUFFERED"] = "1"
    env["TE_MEM_LIMIT_BYTES"] = str(mem_limit_bytes)
    env["TE_DEVICE"] = "cpu" if interpret else "cuda"
    # torch.cuda.is_available() without starting CUDA: the zygote forks, and a process that
    # started CUDA cannot fork a child that uses it
    env["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    # one hardware work queue per context (the default is 8): the evaluator starts two CUDA
    # contexts per candidate, and the driver starts them one at a time, each slower the more
    # contexts live (H100, bench/cuda_start.py, 4 at once beside 24 idle contexts: 1.07 s each
    # with 8 queues, 0.18 s with 1). Every child, baseline included, runs one stream, so both
    # sides of a timing are alike; a user who sets it keeps theirs.
    env.setdefault(MAX_CONNECTIONS, "1")
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    root = str(PROJECT_ROOT)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env
