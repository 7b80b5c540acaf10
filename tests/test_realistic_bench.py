"""The realistic corpus (bench/realistic/, issue 40) and its bench: the corpus has the shape the issue
asks for (2-4 candidates per TritonBench task, autotune lists of 8-32 configs, persistent kernels,
several launches per call), and bench/realistic_bench.py runs on CPU as a smoke test (its numbers
are only meaningful on a GPU). Needs the TritonBench data (TRITON_EVOLVE_DATA): skipped without it."""
import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.realistic.corpus import load_corpus  # noqa: E402


def _suite() -> dict:
    from suites.registry import SuiteError, load_suite

    try:
        return load_suite("tritonbench")
    except SuiteError as e:
        pytest.skip(f"no TritonBench data: {e}")


def _config_counts(path: Path) -> list[int]:
    """The length of every autotuner's config list, read off the imported module (the lists are
    often comprehensions, so the text alone does not say; @jit wants a real file)."""
    from triton.runtime.autotuner import Autotuner

    spec = importlib.util.spec_from_file_location(f"_realistic_{path.parent.name}_{path.stem}", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return [len(f.configs) for f in vars(mod).values() if isinstance(f, Autotuner)]


def test_the_corpus_has_the_shape_issue_40_asks_for():
    corpus = load_corpus()
    suite = _suite()
    by_task: dict[str, list] = {}
    for c in corpus:
        by_task.setdefault(c.task, []).append(c)
    assert len(by_task) >= 12 and set(by_task) <= set(suite), sorted(set(by_task) - set(suite))
    for task, cands in by_task.items():
        assert 2 <= len(cands) <= 4, task
        for c in cands:
            assert c.strategy, f"{c.path}: no strategy docstring"
            counts = _config_counts(c.path)
            assert counts and max(counts) >= 8 and max(counts) <= 32, f"{c.path}: autotune lists {counts}"
            assert f"def {suite[task].entry}(" in c.source, f"{c.path}: no entry function {suite[task].entry}"
    kinds = [c.name for c in corpus]
    assert sum("persistent" in k for k in kinds) >= 6
    several = [c for c in corpus if sum(isinstance(d, ast.FunctionDef) and any(
        "jit" in ast.unparse(x) for x in d.decorator_list) for d in ast.walk(ast.parse(c.source))) >= 2]
    assert len(several) >= 6, "too few candidates launch several kernels per call"


def test_load_corpus_names_an_unknown_task():
    with pytest.raises(ValueError, match="no candidates .* for task\\(s\\): softmx"):
        load_corpus(["softmax_triton1", "softmx"])


@pytest.mark.slow
def test_realistic_bench_runs_and_names_what_bounds_the_rate():
    _suite()
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "realistic_bench.py"), "--tasks", "vector_addition",
                          "--workers", "1", "--rounds", "1", "--time-limit", "300"],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "[cold] 2 candidates" in out.stdout and "FAILED" not in out.stdout, out.stdout[-2000:]
    assert "bound: the 1 correctness slots" in out.stdout
    assert "measuring turn busy" in out.stdout and "compiling ~" in out.stdout and "autotuning" in out.stdout
    assert "throughput:" in out.stdout and "issue 40's 60/min" in out.stdout


def test_realistic_bench_names_an_unknown_task_in_one_line():
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "realistic_bench.py"), "--tasks", "softmx"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert out.stderr.strip().startswith("error: no candidates in") and "softmx" in out.stderr


@pytest.mark.gpu
def test_every_candidate_of_the_corpus_passes_on_the_gpu():
    """Seven tasks' references need CUDA (their inputs are made on the device), so only a GPU checks
    their candidates: the whole corpus, once, must pass."""
    _suite()
    n = len(load_corpus())
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "realistic_bench.py"), "--rounds", "0",
                          "--time-limit", "400"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"[cold] {n} candidates" in out.stdout and f"({n} passed" in out.stdout, out.stdout[-3000:]
