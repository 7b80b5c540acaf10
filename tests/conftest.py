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
    from fitness.evaluator import EvalConfig, Evaluator

    ev = Evaluator(EvalConfig(workers=2, timeout_s=float(os.environ.get("TE_TEST_TIMEOUT", "40")), trials=5,
                              mem_limit_gb=8))
    yield ev
    ev.close()


@pytest.fixture(scope="session")
def builtin():
    from suites.registry import load_suite

    return load_suite("builtin")
