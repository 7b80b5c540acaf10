import fcntl
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

HAS_GPU = torch.cuda.is_available()
# the cheapest builtin tasks under the Triton interpreter (about 4 s an evaluation on two cores,
# softmax 12 s): tests of a command's behaviour run their searches on these
CHEAP, CHEAP_TOO = "int8_dequant", "transpose_copy"


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def evaluator():
    """One evaluator for the session: workers are expensive to start (they import torch)."""
    from fitness.engine.evaluator import EvalConfig, Evaluator

    ev = Evaluator(EvalConfig(workers=2, timeout_s=float(os.environ.get("TE_TEST_TIMEOUT", "40")), trials=5,
                              mem_limit_gb=8))
    yield ev
    ev.close()


@pytest.fixture(scope="session")
def builtin():
    from suites.registry import load_suite

    return load_suite("builtin")


def made_once(tmp_path_factory, name: str, make: Callable[[Path], None]) -> Path:
    """A folder made once per test run. Under pytest-xdist each worker is a session of its own:
    the first to take the lock makes the folder and the others wait for it and reuse it (a CPU
    search takes minutes)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the folder the workers' temporary folders share
    folder = base / name
    with open(base / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / ".made").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            (folder / ".made").touch()
    return folder


@pytest.fixture(scope="session")
def cpu_search_archive(tmp_path_factory):
    """One real search on CPU (Triton interpreter), shared by the report tests: two tasks, two
    islands of two, two generations (22 evaluations). A few minutes on two cores."""
    import subprocess

    def search(tmp: Path) -> None:
        cmd = [sys.executable, str(ROOT / "run.py"), "--suite", "builtin", "--tasks", f"{CHEAP},{CHEAP_TOO}",
               "--islands", "2", "--generations", "2", "--population", "2", "--archive", str(tmp / "x.db"), "--export",
               str(tmp / "best")]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=tmp)
        assert p.returncode == 0, p.stderr[-2000:]
    return made_once(tmp_path_factory, "cpu_search", search) / "x.db"
