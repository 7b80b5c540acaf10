"""A child's calls of a script task's cases (fitness.process.child_script), in a real child process under
the Triton interpreter: the first call counts unless it autotuned."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.suite_fixtures import SCALE_ADD, SCALE_ADD_TEST, perf_file, write_tritonbench

ROOT = Path(__file__).resolve().parent.parent

def _edited(source: str, *edits: tuple[str, str]) -> str:
    for old, new in edits:
        assert old in source, old
        source = source.replace(old, new)
    return source


# scale_add accumulating into a zeroed output, autotuned with a benchmark that launches the kernel
# again on the call's own buffers: its first call's result is wrong, every later call's right
TUNED_ACCUMULATE = _edited(
    SCALE_ADD,
    ("@triton.jit", "def _bench(kernel_call, quantiles=None):\n    for _ in range(3):\n        kernel_call()\n"
                    "    return [1.0, 1.0, 1.0]\n\n\n@triton.autotune(configs=[triton.Config({'BLOCK': 32}), "
                    "triton.Config({'BLOCK': 64})], key=['n'], do_bench=_bench)\n@triton.jit"),
    ("tl.store(out_ptr + offs, 2 * x + y, mask=mask)", "tl.atomic_add(out_ptr + offs, 2 * x + y, mask=mask)"),
    ("torch.empty_like(x)", "torch.zeros_like(x)"),
    ("scale_add_kernel[(triton.cdiv(n, 64),)](x, y, out, n, BLOCK=64)",
     "scale_add_kernel[lambda meta: (triton.cdiv(n, meta['BLOCK']),)](x, y, out, n)"))


# in a child forked the way the zygote forks them: the hook installed, one Child serving
SCRIPT = '''
import json, sys
import torch
import torch._dynamo  # as the zygote: on import it re-wraps torch functions (manual_seed, ...)
from fitness.candidate.harness import LaunchHook, Snapshot
hook = LaunchHook()
hook.install()
from fitness.process.child import Child
from fitness.common.compare import compare_tree
from fitness.engine.script_eval import perf_case, test_case
child = Child(hook, Snapshot(hook))
spec = {"suite": "tritonbench", "name": "scale_add", "path": sys.argv[1]}
task = child.task(spec)
ref = child.load(task.script.reference_source, "reference")
cand = child.load(open(sys.argv[2]).read())
out = {}
for case in (test_case("tuning", 0), test_case("tuning", 1), perf_case("timing", 1, 0), perf_case("timing", 1, 1)):
    child.phase_ms = {}
    before = hook.launches(cand.__name__)
    got = child.run_script_case(task, cand, task.entry, case, False)
    want = child.run_script_case(task, ref, task.entry, case, True)
    out[f"{case['kind']} {case['seed']}"] = {
        "launches": hook.launches(cand.__name__) - before, "redone": "tuned_call" in child.phase_ms,
        "problem": compare_tree(got["tree"], want["tree"], task.tolerance),
        "traced": "trace" in got}
print(json.dumps(out))
'''


def _calls(tmp_path: Path, candidate: str) -> dict:
    data = write_tritonbench(tmp_path, {"scale_add": (SCALE_ADD, SCALE_ADD_TEST, perf_file("scale_add"))})
    source = tmp_path / "candidate.py"
    source.write_text(candidate)
    env = {**os.environ, "TRITON_INTERPRET": "1", "TE_DEVICE": "cpu", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(data), str(source)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_first_call_that_only_compiled_is_the_case_s_call_and_is_not_made_twice(tmp_path):
    calls = _calls(tmp_path, SCALE_ADD)
    # the suite's test calls scale_add twice for each of its two sizes; a benchmark input once
    assert [c["launches"] for c in calls.values()] == [4, 4, 1, 1]
    assert not any(c["redone"] or c["problem"] for c in calls.values()), calls
    assert calls["perf 0"]["traced"] and calls["perf 1"]["traced"]


@pytest.mark.slow
def test_a_first_call_that_autotuned_on_its_own_buffers_is_made_again_and_only_the_later_result_counts(tmp_path):
    calls = _calls(tmp_path, TUNED_ACCUMULATE)
    assert not any(c["problem"] for c in calls.values()), calls
    # the first call of the test and of the benchmark input tuned, so each was made again
    assert [c["redone"] for c in calls.values()] == [True, False, True, False]
    assert calls["perf 0"]["traced"]
