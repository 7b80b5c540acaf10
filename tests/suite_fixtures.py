"""Small suites in the layouts of ../shared/suites, written for the tests (CI has no suite data)."""
from __future__ import annotations

import json
from pathlib import Path

SEP = "#" * 146

SCALE_ADD = '''import torch
import triton
import triton.language as tl


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, 2 * x + y, mask=mask)


def scale_add(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    scale_add_kernel[(triton.cdiv(n, 64),)](x, y, out, n, BLOCK=64)
    return out
'''

SCALE_ADD_TEST = '''
import torch

def test_scale_add():
    results = {}
    for i, n in enumerate((100, 1000)):
        x = torch.randn(n, device='cuda')
        y = torch.randn(n, device='cuda')
        results[f"test_case_{i}"] = [scale_add(x, y), {"n": n, "sum": float(scale_add(x, y).sum())}]
    return results

result_gold = test_scale_add()
'''

# a weak test: only the output's shape is returned, so a wrong kernel could pass it alone
WEAK_TEST = '''
import torch

def test_scale_add():
    x = torch.randn(300, device='cuda')
    return {"shape": tuple(scale_add(x, x).shape)}

result_gold = test_scale_add()
'''

PERF_UTILS = '''class Performance_Metrics:
    def __init__(self, op_name, dtype=None, is_backward=False, **kwargs):
        self.op_name = op_name
        self.input_tensors = []
'''

PERF_TEMPLATE = '''import sys
import os
sys.path.append(os.path.abspath(os.path.join(os.path.dirname(__file__), '..')))
from TritonBench_v1.{name} import {entry}
from performance_utils import Performance_Metrics
import torch


class performance_metrics(Performance_Metrics):
    def __init__(self, dtype=None, is_backward=False, **kwargs):
        super().__init__('{name}', dtype=dtype, is_backward=is_backward, **kwargs)

    def get_input_tensors(self):
        self.input_tensors = []
        for i in range({sizes}):
            self.input_tensors.append({inputs})

    def to_cuda(self, input_tensor):
        return tuple(t.cuda() for t in input_tensor)

    def call_op(self, input_tensor):
        return {entry}(*input_tensor)

    def get_gbps(self, input_tensor, runtime):
        return 3 * input_tensor[0].numel() * 4 / (runtime / 1000) / 1e9

    def get_tflops(self, input_tensor, runtime):
        return 2 * input_tensor[0].numel() / (runtime / 1000) / 1e12
'''


def perf_file(name: str, entry: str = "scale_add", inputs: str = "(torch.rand(2 ** i), torch.rand(2 ** i))",
              sizes: str = "6, 10") -> str:
    """A perf file calling `entry` on `inputs` (an expression of `i`) for i in range(`sizes`)."""
    return PERF_TEMPLATE.format(name=name, entry=entry, inputs=inputs, sizes=sizes)


def write_tritonbench(root: Path, tasks: dict[str, tuple[str, str, str]] | None = None) -> Path:
    """tritonbench/ with `tasks` ({name: (kernel, test, perf file)}); by default three: a good one, a
    weak-test one, and one whose perf file breaks."""
    if tasks is None:
        tasks = {"scale_add": (SCALE_ADD, SCALE_ADD_TEST, perf_file("scale_add")),
                 "weak_scale_add": (SCALE_ADD, WEAK_TEST, perf_file("weak_scale_add")),
                 "broken_perf": (SCALE_ADD, WEAK_TEST,
                                 perf_file("broken_perf") + "\nraise ImportError('no such helper')\n")}
    d = root / "tritonbench"
    (d / "kernels").mkdir(parents=True)
    (d / "perf").mkdir()
    (d / "perf" / "performance_utils.py").write_text(PERF_UTILS)
    records = []
    for name, (kernel, test, perf) in tasks.items():
        (d / "kernels" / f"{name}.py").write_text(kernel + "\n" + SEP + "\n" + test)
        (d / "perf" / f"{name}_perf.py").write_text(perf)
        records.append({"instruction": f"Write {name}.", "input": "", "output": kernel, "file": f"{name}.py",
                        "difficulty": "2"})
    (d / "instructions.json").write_text(json.dumps(records))
    return d


ROCM_KERNEL = '''import torch
import triton
import triton.language as tl


@triton.jit
def double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask), mask=mask)
'''

ROCM_TEST = '''
import pytest
import torch
from geak_eval.perf.ROCm.performance_utils_pytest import PytestBenchmarker

result_gold = {}


@pytest.mark.parametrize("n", [10, 300])
@pytest.mark.parametrize("dtype", [torch.float32])
def test_double(n, dtype, request):
    x = torch.randn(n, device='cuda', dtype=dtype)
    out = torch.empty_like(x)
    double_kernel[(triton.cdiv(n, 128),)](x, out, n, BLOCK=128)
    result_gold[request.node.name] = out.cpu()


def test_skipped(request):
    pytest.skip("not on this machine")


def test_performance(request):
    PytestBenchmarker()  # AMD's harness: never run by triton-evolve
'''


def write_rocm(root: Path) -> Path:
    d = root / "rocm"
    (d / "kernels").mkdir(parents=True)
    (d / "kernels" / "test_double.py").write_text(ROCM_KERNEL + "\n" + "#" * 148 + "\n" + ROCM_TEST)
    (d / "instructions.json").write_text(json.dumps([{"file": "test_double.py", "target_kernel_name": "double_kernel",
                                                      "instruction": "Double x.", "label": ""}]))
    return d


KB_TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return torch.relu(x * self.scale)


batch, features = 8, 32


def get_inputs():
    return [torch.randn(batch, features)]


def get_init_inputs():
    return [features]
'''


def write_kernelbench(root: Path) -> Path:
    d = root / "kernelbench"
    for level in (1, 2, 3):
        (d / f"level{level}").mkdir(parents=True)
        (d / f"level{level}" / f"{level}_Scaled_ReLU.py").write_text(KB_TASK)
    return d


KB_CANDIDATE = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scaled_relu_kernel(x_ptr, s_ptr, out_ptr, n, f, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    s = tl.load(s_ptr + offs % f, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x * s, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        scaled_relu_kernel[(triton.cdiv(n, 128),)](x, self.scale, out, n, x.shape[-1], BLOCK=128)
        return out
'''
