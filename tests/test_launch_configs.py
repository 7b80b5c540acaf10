"""fitness/engine/launch_configs.py: a timed trace's kernels named with the config they were built with.
The kernels are really compiled, for an H100 (sm_90), by Triton's own compiler: that needs no
GPU, only Triton's bundled ptxas."""
import json
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from fitness.candidate.recorder import Recorder
from fitness.clean.compiled import describe_compiled
from fitness.engine.launch_configs import KernelConfig, describe, timed_configs, trace_configs
from tests.test_timing_schedule import CASE, StandIn, stand_in_evaluator, timed_verdict


@triton.jit
def scale_kernel(x, out, n, factor, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(out + i, tl.load(x + i) * factor)
    else:
        tl.store(out + i, tl.load(x + i, mask=i < n) * factor, mask=i < n)


ROOT = Path(__file__).resolve().parent.parent
SIGNATURE = {"x": "*fp32", "out": "*fp32", "n": "i32", "factor": "fp32", "BLOCK": "constexpr", "EVEN": "constexpr"}


def _compiled(block: int, warps: int, stages: int) -> tuple:
    src = ASTSource(scale_kernel, SIGNATURE, {"BLOCK": block, "EVEN": False})
    options = {"num_warps": warps, "num_stages": stages}
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options), block


@pytest.fixture(scope="module")
def builds():
    """Two builds of one kernel, as an autotuner over two configs would leave them."""
    return {"small": _compiled(256, 4, 2), "large": _compiled(1024, 8, 3)}


def _trace(*builds) -> dict:
    """What the candidate's process records when its call launches these (kernel, BLOCK) in turn."""
    x, out = torch.ones(2048), torch.empty(2048)
    rec = Recorder((x,))
    for kernel, block in builds:
        rec.launch_compiled(kernel, (2048 // block, 1, 1), (x, out, 2048, 2.0, block, False))
    return rec.trace([out])


def test_a_traces_kernel_is_named_with_its_constexprs_and_launch_numbers_as_compiled(builds):
    (config,) = trace_configs(_trace(builds["large"], builds["large"]))
    assert config == KernelConfig("scale_kernel", (("BLOCK", 1024), ("EVEN", False)), num_warps=8, num_stages=3)
    assert config.build() == "scale_kernel(BLOCK=1024, EVEN=False, num_warps=8, num_stages=3)"


def test_shapes_an_autotuner_built_differently_are_each_named_with_the_shapes_it_ran_on(builds):
    traces = [("{'perf': 0}", _trace(builds["small"])), ("{'perf': 1}", _trace(builds["large"])),
              ("{'perf': 2}", _trace(builds["large"]))]
    configs = timed_configs(traces)
    assert [(c.constexprs[0], c.num_warps, c.shapes) for c in configs] == [
        (("BLOCK", 256), 4, ("{'perf': 0}",)), (("BLOCK", 1024), 8, ("{'perf': 1}", "{'perf': 2}"))]
    words = describe(configs, shapes=3)
    assert "scale_kernel(BLOCK=256, EVEN=False, num_warps=4, num_stages=2) on {'perf': 0}" in words
    assert "num_stages=3) on {'perf': 1}, {'perf': 2}" in words


def test_one_build_on_every_timed_shape_is_named_once_without_its_shapes(builds):
    configs = timed_configs([("a", _trace(builds["small"])), ("b", _trace(builds["small"]))])
    assert describe(configs, shapes=2) == ("timed kernels, as compiled (an autotuner's pick included): "
                                           "scale_kernel(BLOCK=256, EVEN=False, num_warps=4, num_stages=2)")


def test_an_interpreted_trace_names_no_build():
    """Under the interpreter nothing is compiled, and nothing is timed."""
    rec = Recorder(())
    rec.events.append({"kind": "launch", "kernel": "mod:scale_kernel", "grid": [1, 1, 1], "args": []})
    assert trace_configs(rec.trace([])) == [] and describe([], shapes=1) == ""


def test_what_a_candidates_process_wrote_into_a_description_is_shown_only_where_it_is_plain(builds):
    """The trace comes from the candidate's process: names that are not identifiers, values that
    are not short plain ones and launch numbers that are not integers are left out, not echoed."""
    desc = describe_compiled(builds["small"][0])
    meta = json.loads(desc["metadata"])
    meta.update(num_warps="\x1b[2J", num_stages=True)
    desc.update(name="x; rm -rf /", metadata=json.dumps(meta),
                constants={"[4]": "A" * 500, '"EVEN\\n"': 1, "[5]": False, "{not json": 1, '["x"]': 2, "[99]": 3})
    trace = {"kernels": {"k": desc}, "events": [{"kind": "launch", "kernel": "k"}]}
    assert trace_configs(trace) == [KernelConfig("?", (("EVEN", False),), None, None)]
    desc.update(metadata="{", constexpr_args=5, arg_names=[None, 3])
    assert trace_configs(trace) == [KernelConfig("?", (), None, None)]  # unreadable: nothing named, no error


def test_a_timed_verdict_says_which_build_the_timing_ran(builtin, builds):
    """Through the measuring turn (stand-in timing children, as in test_timing_schedule): the
    verdict of a timed candidate names the config of the kernel its timed trace launched."""
    task = builtin["softmax"]
    with stand_in_evaluator(task, trials=5) as ev:
        v = timed_verdict(ev, task, {"k": (CASE, _trace(builds["large"]))}, StandIn(task))
    assert v.stage == "timed", v.reason
    assert [c.build() for c in v.configs] == ["scale_kernel(BLOCK=1024, EVEN=False, num_warps=8, num_stages=3)"]
    assert v.timing.endswith("(an autotuner's pick included): " + v.configs[0].build())
    assert json.loads(json.dumps(v.to_dict()))["configs"][0]["constexprs"] == [["BLOCK", 1024], ["EVEN", False]]


def _autotuned_bias_gelu() -> str:
    """builtin bias_gelu's starting kernel, autotuned over two configs."""
    start = (ROOT / "suites" / "builtin" / "start" / "bias_gelu.py").read_text()
    jit, block = "@triton.jit\ndef _bias_gelu_kernel", ", BLOCK=128"
    assert jit in start and block in start
    tune = ('@triton.autotune(configs=[triton.Config({"BLOCK": 256}, num_warps=2, num_stages=2),\n'
            '                          triton.Config({"BLOCK": 1024}, num_warps=8, num_stages=3)], key=["n_cols"])\n')
    return start.replace(jit, tune + jit).replace(block, "")


@pytest.mark.gpu
def test_an_autotuned_candidates_verdict_names_the_config_its_timing_ran(evaluator, builtin):
    """On the GPU, end to end: the autotuner picks in the candidate's process, and the verdict
    names, per timed shape, which of its two configs was timed."""
    v = evaluator.evaluate(builtin["bias_gelu"], _autotuned_bias_gelu())
    assert v.stage == "timed", v.reason
    picks = {("BLOCK", 256): (2, 2), ("BLOCK", 1024): (8, 3)}
    assert v.configs and all(c.kernel == "_bias_gelu_kernel" and picks[c.constexprs[0]] == (c.num_warps, c.num_stages)
                             for c in v.configs)
    assert sum(len(c.shapes) for c in v.configs) == len(v.times) and "timed kernels, as compiled" in v.timing


def test_a_stored_verdicts_builds_read_back_and_an_unreadable_one_is_left_out():
    built = KernelConfig("k", (("BLOCK", 64),), 4, 3, (("num_ctas", 2),), ("{'n': 1}",))
    stored = json.loads(json.dumps({"configs": [asdict(built), {"kernel": "x"}, 7, {"kernel": "y", "constexprs": 5}]}))
    assert KernelConfig.all_from_verdict(stored) == [built]
    assert KernelConfig.all_from_verdict({}) == []  # a verdict from before builds were recorded
