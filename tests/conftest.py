import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

HAS_GPU = torch.cuda.is_available()


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


@pytest.fixture(scope="session")
def cpu_search_archive(tmp_path_factory):
    """One real search on CPU (Triton interpreter), shared by the report tests: two tasks, two
    islands, two generations. About a minute on two cores."""
    import subprocess

    tmp = tmp_path_factory.mktemp("cpu_search")
    cmd = [sys.executable, str(ROOT / "run.py"), "--suite", "builtin", "--tasks", "softmax,row_sum", "--islands", "2",
           "--generations", "2", "--population", "4", "--archive", str(tmp / "x.db"), "--export", str(tmp / "best")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=tmp)
    assert p.returncode == 0, p.stderr[-2000:]
    return tmp / "x.db"
