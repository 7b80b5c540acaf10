"""Where a script task's timed inputs are drawn (fitness.candidate.harness.draw_inputs), and where the
engine compares the timed outputs (fitness.common.compare.compare_tree_on)."""
import pytest
import torch

from fitness.common.compare import compare_tree, compare_tree_on
from fitness.common.inputs import draw_inputs
from fitness.engine.script_eval import perf_case
from suites.registry import load_suite
from tests.suite_fixtures import SCALE_ADD, SCALE_ADD_TEST, perf_file, write_tritonbench

# an input maker that works on the host only: numpy on a tensor it drew
HOST_ONLY = "(torch.from_numpy(torch.rand(2 ** i).numpy()), torch.rand(2 ** i))"


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    root = tmp_path_factory.mktemp("suites")
    write_tritonbench(root, {"scale_add": (SCALE_ADD, SCALE_ADD_TEST, perf_file("scale_add")),
                             "host_only": (SCALE_ADD, SCALE_ADD_TEST, perf_file("host_only", inputs=HOST_ONLY))})
    return load_suite("tritonbench", str(root / "tritonbench"))


def test_a_script_task_draws_its_correctness_inputs_on_the_host(tasks):
    case = perf_case("tuning", 2, 0)
    x, y = draw_inputs(tasks["scale_add"], case, 7)
    assert x.device.type == "cpu" and x.shape == (256,)
    again = draw_inputs(tasks["scale_add"], case, 7)
    assert torch.equal(x, again[0]) and torch.equal(y, again[1])


@pytest.mark.gpu
def test_a_script_task_s_timed_inputs_are_drawn_on_the_gpu_alike_every_time(tasks):
    case = perf_case("timing", 3, 0)
    x, y = draw_inputs(tasks["scale_add"], case, 11, "cuda")
    assert x.device.type == "cuda" and y.device.type == "cuda" and x.shape == (512,)
    draw_inputs(tasks["scale_add"], perf_case("timing", 1, 0), 12, "cuda")  # another draw between
    host = draw_inputs(tasks["scale_add"], case, 11)  # the host draw of the same seed: kept apart
    assert host[0].device.type == "cpu"
    again = draw_inputs(tasks["scale_add"], case, 11, "cuda")
    assert torch.equal(x, again[0]) and torch.equal(y, again[1])
    assert not torch.equal(x, draw_inputs(tasks["scale_add"], case, 13, "cuda")[0])


@pytest.mark.gpu
def test_an_input_maker_that_works_on_the_host_only_is_drawn_there_in_every_process_alike(tasks):
    case = perf_case("timing", 1, 0)
    x, y = draw_inputs(tasks["host_only"], case, 5, "cuda")
    assert x.device.type == "cpu" and y.device.type == "cpu"
    hx, hy = draw_inputs(tasks["host_only"], case, 5)
    assert torch.equal(x, hx) and torch.equal(y, hy)


@pytest.mark.gpu
def test_the_timed_outputs_compared_on_the_gpu_give_the_host_s_verdict():
    ref = {"out": torch.rand(1 << 20, dtype=torch.float16), "n": 3}
    bad = {"out": ref["out"].clone(), "n": 3}
    bad["out"][12345] += 1
    tol = {"float16": (1e-3, 1e-3)}
    assert compare_tree_on("cuda", ref, ref, tol) == "" == compare_tree(ref, ref, tol)
    on_gpu, on_host = compare_tree_on("cuda", bad, ref, tol), compare_tree(bad, ref, tol)
    assert on_gpu == on_host and "1 of 1048576 elements" in on_gpu and "(12345,)" in on_gpu
