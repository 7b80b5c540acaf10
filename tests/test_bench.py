"""The GPU benchmarks run on CPU too, as smoke tests (bench/evaluator_bench.py once crashed on
the GPU with a TypeError nobody had run into: its phases were never summed anywhere else)."""
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CHEAP

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_evaluator_bench_runs_and_names_what_bounds_the_rate():
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "evaluator_bench.py"), "--tasks", CHEAP,
                          "--workers", "1", "--rounds", "1"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "bound: the 1 correctness slots" in out.stdout
    assert "worker.first_case" in out.stdout and "throughput:" in out.stdout


def test_evaluator_bench_names_an_unknown_task_in_one_line():
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "evaluator_bench.py"), "--tasks", "softmax,softmx"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert out.stderr.strip() == "error: unknown task(s): softmx (did you mean 'softmax'?)"


@pytest.mark.slow
def test_aa_alone_runs_its_passes_logs_them_and_refuses_an_unknown_pass(tmp_path):
    bench = [sys.executable, str(ROOT / "bench" / "aa_alone.py"), "--suite", "builtin", "--tasks", CHEAP,
             "--workers", "1", "--log", str(tmp_path / "trials.jsonl")]
    out = subprocess.run(bench + ["--passes", "engine,full"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "[loaded] 1 starting kernels at once" in out.stdout and "[pass 2 full]" in out.stdout
    assert (tmp_path / "trials.jsonl").exists()  # empty without a GPU: nothing is timed
    bad = subprocess.run(bench + ["--passes", "engine,half"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert bad.returncode != 0 and "--passes takes engine and full" in bad.stderr
