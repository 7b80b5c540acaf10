"""The data-backed suites on small copies of their layouts: loading, bad data, and the evaluator
judging script tasks under the Triton interpreter (reference, wrong candidates, weak tests)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from suites.registry import SuiteError, load_suite
from tests.suite_fixtures import (
    KB_CANDIDATE,
    SCALE_ADD,
    SCALE_ADD_TEST,
    SEP,
    perf_file,
    write_kernelbench,
    write_rocm,
    write_tritonbench,
)

ROOT = Path(__file__).resolve().parent.parent
WRONG = SCALE_ADD.replace("2 * x + y", "3 * x + y")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("suites")
    write_tritonbench(root), write_rocm(root), write_kernelbench(root)
    return root


@pytest.fixture(scope="module")
def tb_eval(data):
    from fitness.engine.evaluator import EvalConfig, Evaluator

    ev = Evaluator(EvalConfig(workers=1, timeout_s=60, mem_limit_gb=8, suite_path=str(data / "tritonbench")))
    yield ev
    ev.close()


def test_tritonbench_loads_tasks_from_the_layout(data):
    tasks = load_suite("tritonbench", str(data))  # the folder holding tritonbench/ works too
    assert sorted(tasks) == ["broken_perf", "scale_add", "weak_scale_add"]
    t = tasks["scale_add"]
    assert t.entry == "scale_add" and t.difficulty == 2 and t.instruction == "Write scale_add."
    assert SEP not in t.start_source and "def scale_add" in t.start_source
    assert t.script.perf_count == 4
    # benchmark inputs are drawn one at a time, and their cost comes from the perf file's formulas
    assert [a.shape[0] for a in t.script.perf_args(2, 0)] == [256, 256]
    assert t.cost({"perf": 3}, None) == pytest.approx((3 * 512 * 4, 2 * 512))
    # sizes known without drawing: what decides which inputs are small enough to time
    assert t.script.perf_bytes() == [2 * 2 ** i * 4 for i in range(6, 10)]


def test_a_perf_file_without_a_layout_is_drawn_once_per_seed_for_all_its_shapes(tmp_path):
    host_only = "(torch.from_numpy(torch.rand(2 ** i).numpy()), torch.rand(2 ** i))"  # no meta tensors: no layout
    perf = perf_file("np_inputs", inputs=host_only)
    d = write_tritonbench(tmp_path, {"np_inputs": (SCALE_ADD, SCALE_ADD_TEST, perf)})
    runner = load_suite("tritonbench", str(d))["np_inputs"].script
    draws = []  # the real draws (meta ones have wanted=set())
    real = runner._draw
    runner._draw = lambda seed, wanted: (wanted is None and draws.append(seed), real(seed, wanted))[1]
    first = [runner.perf_args(i, 7) for i in range(4)]
    assert runner.layout()[0][1] is None  # no layout: it came from the first draw, of the seed asked for
    assert draws == [7] and [a[0].shape[0] for a in first] == [64, 128, 256, 512]
    assert all((x == y).all() for x, y in zip(runner.perf_args(1, 7), first[1]))  # the kept draw, as drawn
    for seed in (8, 9, 7, 10):  # three draws kept: the timing's three seeds of an epoch
        runner.perf_args(0, seed)
    assert draws == [7, 8, 9, 10]
    runner.perf_args(0, 7)  # the least recently used (8) made room for 10, so 7 was kept
    before = set(runner._whole._items)
    runner._whole.max_bytes = runner._whole.size(runner._whole.get((7, torch.get_default_device()))) - 1
    runner.perf_args(0, 11), runner.perf_args(0, 11), runner.perf_args(1, 11)  # over the budget: not kept
    assert draws == [7, 8, 9, 10, 11, 11]
    assert len(before) == 3 and set(runner._whole._items) == before  # and the kept draws stay


def test_a_layout_drawn_whole_over_the_budget_is_the_first_inputs_draw_too(tmp_path):
    """The layout's whole draw is handed to the input asked for next, once: a draw, not two."""
    perf = perf_file("np_inputs", inputs="(torch.from_numpy(torch.rand(2 ** i).numpy()), torch.rand(2 ** i))")
    d = write_tritonbench(tmp_path, {"np_inputs": (SCALE_ADD, SCALE_ADD_TEST, perf)})
    runner = load_suite("tritonbench", str(d))["np_inputs"].script
    runner._whole.max_bytes = 1
    draws, real = [], runner._draw
    runner._draw = lambda seed, wanted: (wanted is None and draws.append(seed), real(seed, wanted))[1]
    first = runner.perf_args(2, 7)
    assert draws == [7] and first[0].shape[0] == 256 and not runner._whole
    runner.perf_args(3, 7)  # the hand-off was used once: over the budget, nothing is kept for later
    assert draws == [7, 7]
    assert not (runner.perf_args(0, 9)[0] == runner.perf_args(0, 10)[0]).all()  # seeds still decide the values


def test_bad_files_cost_their_own_task_only(tmp_path):
    d = write_tritonbench(tmp_path)
    (d / "kernels" / "scale_add.py").write_text(SCALE_ADD)  # no separator
    (d / "instructions.json").write_text("{not json")
    tasks = load_suite("tritonbench", str(d))
    assert sorted(tasks) == ["broken_perf", "weak_scale_add"]
    assert any("scale_add.py: no separator line" in p for p in tasks.problems)
    assert any("instructions.json" in p for p in tasks.problems)
    assert tasks["weak_scale_add"].difficulty is None
    with pytest.raises(SuiteError, match="no tritonbench data"):
        load_suite("tritonbench", str(tmp_path / "nowhere"))


def test_a_perf_file_that_fails_to_import_is_named(data):
    task = load_suite("tritonbench", str(data))["broken_perf"]
    with pytest.raises(RuntimeError, match=r"broken_perf_perf\.py failed to import"):
        _ = task.script.perf_count


@pytest.mark.slow
def test_reference_passes_and_a_wrong_kernel_fails_inside_the_result_tree(data, tb_eval):
    tasks = load_suite("tritonbench", str(data))
    v = tb_eval.evaluate(tasks["scale_add"], tasks["scale_add"].start_source)
    assert v.passed, v.reason
    assert not tb_eval.script_refs.get(tasks["scale_add"]).weak
    v = tb_eval.evaluate(tasks["scale_add"], WRONG)
    assert not v.passed and "result['test_case_0'][0]" in v.reason


@pytest.mark.slow
def test_weak_test_is_backed_by_the_benchmark_inputs(data, tb_eval):
    task = load_suite("tritonbench", str(data))["weak_scale_add"]
    assert tb_eval.evaluate(task, task.start_source).passed
    assert tb_eval.script_refs.get(task).weak
    v = tb_eval.evaluate(task, WRONG)  # same shape, wrong values: only the benchmark inputs catch it
    assert not v.passed and "{'perf': 0}" in v.reason


@pytest.mark.slow
def test_validate_records_invalid_here_and_weak_tests(data, tmp_path):
    record = tmp_path / "record.json"
    out = subprocess.run([sys.executable, "run.py", "validate", "--suite", "tritonbench", "--suite-path",
                          str(data / "tritonbench"), "--workers", "1", "--validation", str(record)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    tasks = json.loads(record.read_text())["tasks"]
    assert tasks["scale_add"]["status"] == "valid" and not tasks["scale_add"]["weak_test"]
    assert tasks["weak_scale_add"]["status"] == "valid" and tasks["weak_scale_add"]["weak_test"]
    assert tasks["broken_perf"]["status"] == "invalid-here"
    assert "broken_perf_perf.py failed to import" in tasks["broken_perf"]["reason"]
    assert "2 of 3 tasks valid here; 1 invalid-here" in out.stdout
    listed = subprocess.run([sys.executable, "run.py", "list", "--suite", "tritonbench", "--suite-path",
                             str(data / "tritonbench"), "--validation", str(record)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120).stdout
    assert "by difficulty: 2: 3" in listed
    assert [ln.split()[-1] for ln in listed.splitlines() if ln.startswith(("broken_perf", "weak_scale_add"))] == \
        ["invalid-here", "weak-test"]


@pytest.mark.slow
def test_rocm_pytest_style_tests_run_without_pytest(data):
    from fitness.engine.evaluator import EvalConfig, Evaluator

    task = load_suite("rocm", str(data))["double"]
    assert task.entry == "double_kernel"
    with Evaluator(EvalConfig(workers=1, timeout_s=60, mem_limit_gb=8, suite_path=str(data / "rocm"))) as ev:
        v = ev.evaluate(task, task.start_source)
        assert v.passed, v.reason
        wrong = task.start_source.replace("2 * tl.load", "3 * tl.load")
        v = ev.evaluate(task, wrong)
        assert not v.passed and "test_double[10-float32]" in v.reason


@pytest.mark.slow
def test_kernelbench_modelnew_against_model(data):
    from fitness.engine.evaluator import EvalConfig, Evaluator

    tasks = load_suite("kernelbench", str(data))
    assert sorted(tasks) == ["L1_1_Scaled_ReLU", "L2_2_Scaled_ReLU", "L3_3_Scaled_ReLU"]
    task = tasks["L1_1_Scaled_ReLU"]
    assert task.entry == "ModelNew" and task.difficulty == 1 and not task.start_source
    with Evaluator(EvalConfig(workers=1, timeout_s=60, mem_limit_gb=8, suite_path=str(data / "kernelbench"))) as ev:
        assert ev.evaluate(task, KB_CANDIDATE).passed
        v = ev.evaluate(task, KB_CANDIDATE.replace("tl.maximum(x * s, 0.0)", "x * s"))
        assert not v.passed and "outside tolerance" in v.reason
        (ref,) = list(ev.validate_iter([task], timed=False))
        assert ref.passed and "reference runs here" in ref.reason


REAL = [p for p in (os.environ.get("TRITON_EVOLVE_DATA"), str(ROOT.parent / "shared" / "suites")) if p]
REAL = next((Path(p) for p in REAL if (Path(p) / "tritonbench" / "instructions.json").exists()), None)


@pytest.mark.skipif(REAL is None, reason="the public suites' data is not on this machine")
def test_real_suites_have_their_published_sizes():
    from collections import Counter

    tb = load_suite("tritonbench", str(REAL / "tritonbench"))
    assert len(tb) == 184 and not tb.problems
    assert Counter(t.difficulty for t in tb.values()) == {1: 3, 2: 27, 3: 65, 4: 84, 5: 5}
    assert len(load_suite("rocm", str(REAL / "rocm"))) == 31
    kb = load_suite("kernelbench", str(REAL / "kernelbench"))
    assert Counter(t.difficulty for t in kb.values()) == {1: 100, 2: 100, 3: 50}


def test_a_partial_folder_is_one_line_and_exit_2(tmp_path):
    d = write_tritonbench(tmp_path)
    import shutil

    shutil.rmtree(d / "perf")
    out = subprocess.run([sys.executable, "run.py", "list", "--suite", "tritonbench", "--suite-path", str(d)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "no task could be loaded" in out.stderr and "perf" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


OOM_TEST = '''
import torch

def test_scale_add():
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")

result_gold = test_scale_add()
'''


@pytest.mark.slow
def test_validate_retries_alone_what_sharing_the_gpu_can_cause(data, tmp_path):
    """A reference that ran out of GPU memory among several workers is run again, alone, before it
    is called invalid-here (this one fails again: it always raises)."""
    import shutil

    suite = tmp_path / "tritonbench"
    shutil.copytree(data / "tritonbench", suite)
    (suite / "kernels" / "oom_scale_add.py").write_text(SCALE_ADD + "\n" + SEP + "\n" + OOM_TEST)
    perf = (suite / "perf" / "scale_add_perf.py").read_text()
    (suite / "perf" / "oom_scale_add_perf.py").write_text(perf.replace("TritonBench_v1.scale_add",
                                                                       "TritonBench_v1.oom_scale_add"))
    record = tmp_path / "record.json"
    out = subprocess.run([sys.executable, "run.py", "validate", "--suite", "tritonbench", "--suite-path", str(suite),
                          "--tasks", "oom_scale_add,scale_add", "--workers", "2", "--no-time",
                          "--validation", str(record)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "retrying 1 task(s) alone, with the GPU to themselves: oom_scale_add" in out.stdout
    assert out.stdout.count("oom_scale_add ") == 2  # its line from each pass
    tasks = json.loads(record.read_text())["tasks"]
    assert tasks["oom_scale_add"]["status"] == "invalid-here" and "out of memory" in tasks["oom_scale_add"]["reason"]
    assert tasks["scale_add"]["status"] == "valid"
