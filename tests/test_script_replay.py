"""A script task's benchmark call replayed under the interpreter (issue 48): `validate` on CPU shows
what the GPU's timing would refuse. The suite's own destination-passing wrapper (the caller hands
the output tensor) replays and passes; a candidate whose answer came from outside its recorded
call is stale on the replay's draw and fails."""
from __future__ import annotations

import pytest

from suites.tritonbench import load as load_tritonbench
from tests.suite_fixtures import perf_file, write_tritonbench

DEST_ADD = '''import torch
import triton
import triton.language as tl


@triton.jit
def dest_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def dest_add(x, y, out):
    n = x.numel()
    dest_add_kernel[(triton.cdiv(n, 64),)](x, y, out, n, BLOCK=64)
    return out
'''

DEST_TEST = '''
import torch

def test_dest_add():
    x = torch.randn(300, device='cuda')
    y = torch.randn(300, device='cuda')
    return {"out": dest_add(x, y, torch.empty(300, device='cuda'))}

result_gold = test_dest_add()
'''

# right on every draw it computes for itself (numpy, outside the recorder), and launches a kernel
# that does nothing: its recorded call copies an answer from memory that appeared from outside it
NUMPY_ANSWER = DEST_ADD.replace('''    dest_add_kernel[(triton.cdiv(n, 64),)](x, y, out, n, BLOCK=64)
    return out''', '''    dest_add_kernel[(triton.cdiv(n, 64),)](x, y, out, 0, BLOCK=64)
    out.copy_(torch.from_numpy(2 * x.cpu().numpy() + y.cpu().numpy()).to(out.device))
    return out''')


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    perf = perf_file("dest_add", entry="dest_add", sizes="5, 7",
                     inputs="(torch.rand(2 ** i), torch.rand(2 ** i), torch.empty(2 ** i))")
    return write_tritonbench(tmp_path_factory.mktemp("dest"), {"dest_add": (DEST_ADD, DEST_TEST, perf)})


@pytest.fixture(scope="module")
def dest_task(data):
    return load_tritonbench(str(data))["dest_add"]


@pytest.fixture(scope="module")
def evaluator(data):
    from fitness.engine.evaluator import EvalConfig, Evaluator

    ev = Evaluator(EvalConfig(workers=1, timeout_s=60, mem_limit_gb=8, suite_path=str(data)))
    yield ev
    ev.close()


@pytest.mark.slow
def test_a_suite_wrapper_writing_its_callers_output_tensor_is_replayed_on_cpu_and_passes(evaluator, dest_task):
    verdict = evaluator.evaluate(dest_task, dest_task.start_source)
    assert verdict.passed, verdict.reason
    if evaluator.gpu:  # the timing replays the benchmark calls, destination and all
        assert verdict.speedup is not None, verdict.timing
        return
    assert "its benchmark call replayed alone on another draw, against the suite's kernel there" in verdict.reason


@pytest.mark.slow
def test_an_answer_from_outside_the_recorded_call_is_stale_on_the_replays_draw(evaluator, dest_task):
    verdict = evaluator.evaluate(dest_task, NUMPY_ANSWER)
    if evaluator.gpu:  # its copy to the GPU is torch work the reference does not do (H100); else the
        # timing's checked trial runs the replay on its own draws
        assert not verdict.passed, verdict.reason
        assert verdict.reason.startswith("timing:") or "torch computed" in verdict.reason, verdict.reason
        return
    assert not verdict.passed and verdict.stage == "call", verdict.reason
    assert "replayed alone on fresh inputs" in verdict.reason and "gave a wrong result" in verdict.reason, \
        verdict.reason
    assert "not-replayable" not in verdict.flags
