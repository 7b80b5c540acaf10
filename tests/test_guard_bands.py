"""fitness/clean/guard_bands.py: a suite reference run again with poison around its inputs, so that one
that reads or writes outside them is named (here on torch calls, and through validate on Triton
kernels under the interpreter in real reference children)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fitness.clean.guard_bands import GUARD_MIN_BYTES, READS, UNREPRODUCIBLE, WRITES, check_case, guard, guard_args
from suites.script import seed_all
from suites.task import to_device
from tests.suite_fixtures import SCALE_ADD, SCALE_ADD_TEST, perf_file, write_tritonbench

ROOT = Path(__file__).resolve().parent.parent
TOL = {"float32": (1e-3, 1e-3)}


def band_bytes(g):
    return torch.cat([g.buffer[:g.start], g.buffer[g.end:]])


@pytest.mark.parametrize("t", [
    torch.arange(100.0)[3:50:2],  # a strided view with an offset into a larger storage
    torch.arange(24, dtype=torch.int32).reshape(4, 6).t(),  # transposed
    torch.tensor([True, False, True]),
    torch.randn(5, 7).to(torch.float16),
    torch.tensor(0.5),  # 0-dim, as attn_fwd_causal's q_scale
], ids=["strided", "transposed-int", "bool", "fp16", "0-dim"])
def test_a_guarded_view_keeps_shape_strides_dtype_and_values_with_poison_around_it(t):
    g = guard(t, "cpu", "input 0")
    assert g.view.shape == t.shape and g.view.stride() == t.stride() and g.view.dtype == t.dtype
    assert torch.equal(g.view, t)
    assert g.view.data_ptr() % 64 == t.data_ptr() % 64  # Triton specializes on pointer alignment
    assert g.start >= GUARD_MIN_BYTES and len(g.buffer) - g.end >= GUARD_MIN_BYTES
    assert g.changed() == ""
    band = band_bytes(g).view(-1, t.element_size())
    expected = {torch.float32: float("nan"), torch.float16: float("nan"), torch.int32: 2**31 - 1, torch.bool: True}
    poison = torch.tensor([expected[t.dtype]], dtype=t.dtype).view(torch.uint8)
    assert bool((band == poison).all())


def test_bands_a_write_reached_are_named_with_their_side_and_input():
    args, guards = guard_args((torch.arange(8.0), [torch.zeros(3, dtype=torch.int64)], 5), "cpu")
    assert args[2] == 5 and isinstance(args[1], list) and [g.name for g in guards] == ["input 0", "input 1[0]"]
    guards[0].buffer[guards[0].end + 5] = 7  # NaN is 00 00 c0 7f: byte 5 was 0
    guards[1].buffer[guards[1].start - 1] = 0
    guards[1].buffer[guards[1].end] = 0
    assert guards[0].changed() == f"4 of the {GUARD_MIN_BYTES} bytes after it changed around input 0 (float32[8])"
    assert guards[1].changed().startswith("8 of the ") and "bytes before it and 8 of the" in guards[1].changed()
    assert guards[1].changed().endswith("bytes after it changed around input 1[0] (int64[3])")


def past_end(x):
    """Reads four elements past `x` (its storage holds them: the plain call sees defined values)."""
    return torch.as_strided(x, (x.numel() + 4,), (1,)).sum().reshape(1) * 1.0


def zero_past_end(x):
    torch.as_strided(x, (x.numel() + 4,), (1,))[x.numel():] = 0
    return x * 2


def counting(calls=[0]):  # noqa: B006 - the count survives between calls on purpose
    def fn(x):
        calls[0] += 1
        return x + calls[0]
    return fn


@pytest.mark.parametrize("fn,what", [(past_end, READS), (zero_past_end, WRITES), (lambda x: x * 2, None),
                                     (lambda x: x + torch.rand(1), None), (counting(), UNREPRODUCIBLE)],
                         ids=["reads", "writes", "stable", "random-draws", "changing"])
def test_the_guarded_call_names_a_read_a_write_or_a_reference_that_is_not_reproducible(fn, what):
    """A wrapper that draws random numbers is stable: every call starts from the case's seed."""
    host = (torch.arange(16.0)[:8],)  # a view: the plain copy carries the rest of the storage
    seed_all(7)  # as the reference child before its usual call
    usual = fn(*to_device(host, "cpu")).clone()
    finding = check_case(host, usual, fn, TOL, "cpu", seed=7)
    assert (finding.what if finding else None) == what
    if what == READS:
        assert "with NaN or extreme values around its inputs, output: (float32): 1 of 1 elements" in finding.detail
        assert "got nan, expected" in finding.detail
    if what == WRITES:
        assert finding.detail.endswith("bytes after it changed around input 0 (float32[8])")


# -- whole tasks, through validate, in real reference children under the Triton interpreter ----

# attn_fwd_causal's defect, small: one scale per block read from a tensor that holds one. The
# benchmark's scale is a view into a larger tensor, so that the plain run reads defined values
# here (on the GPU it read whatever sat next to a 4-byte tensor).
BLOCK_SCALE = '''import torch
import triton
import triton.language as tl


@triton.jit
def block_scale_kernel(x_ptr, scale_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    s = tl.load(scale_ptr + pid)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * s, mask=mask)


def block_scale(x, scale):
    out = torch.empty_like(x)
    n = x.numel()
    block_scale_kernel[(triton.cdiv(n, 16),)](x, scale, out, n, BLOCK=16)
    return out
'''

BLOCK_SCALE_TEST = '''
import torch

result_gold = {"out": block_scale(torch.randn(40, device='cuda'), torch.full((8,), 2.0, device='cuda')[0])}
'''

# a store without a mask: the block's tail lands past the tensor (inside its storage, here)
DOUBLE_INPLACE = '''import torch
import triton
import triton.language as tl


@triton.jit
def double_inplace_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(x_ptr + offs, x * 2)


def double_inplace(x):
    double_inplace_kernel[(triton.cdiv(x.numel(), 128),)](x, x.numel(), BLOCK=128)
    return x
'''

DOUBLE_INPLACE_TEST = '''
import torch

result_gold = {"x": double_inplace(torch.randn(512, device='cuda')[:100])}
'''

TASKS = {  # name: (kernel, test, entry, one benchmark input)
    "scale_add": (SCALE_ADD, SCALE_ADD_TEST, "scale_add", "(torch.rand(2 ** i), torch.rand(2 ** i))"),
    "block_scale": (BLOCK_SCALE, BLOCK_SCALE_TEST, "block_scale",
                    "(torch.rand(2 ** i), torch.full((64,), 0.5)[0])"),
    "double_inplace": (DOUBLE_INPLACE, DOUBLE_INPLACE_TEST, "double_inplace",
                       "(torch.rand(2 ** (i + 1))[:2 ** i + 8],)"),
}


def write_suite(root: Path) -> Path:
    return write_tritonbench(root, {name: (kernel, test, perf_file(name, entry, inputs, "6, 8"))
                                    for name, (kernel, test, entry, inputs) in TASKS.items()})


@pytest.mark.slow
def test_validate_records_a_reference_that_reads_or_writes_outside_its_inputs_as_invalid_here(tmp_path):
    suite, record = write_suite(tmp_path), tmp_path / "record.json"
    out = subprocess.run([sys.executable, "run.py", "validate", "--suite", "tritonbench", "--suite-path", str(suite),
                          "--device", "cpu", "--workers", "1", "--validation", str(record)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    tasks = json.loads(record.read_text())["tasks"]
    assert tasks["scale_add"]["status"] == "valid" and "unstable_perf" not in tasks["scale_add"]
    read = tasks["block_scale"]
    assert read["status"] == "invalid-here"
    assert read["reason"].startswith("the suite's reference reads memory outside its inputs on the benchmark "
                                     "inputs (perf 0): with NaN or extreme values around its inputs, output: "
                                     "(float32): 48 of 64 elements outside tolerance")
    assert "got nan" in read["reason"] and list(read["unstable_perf"]) == ["0"]
    wrote = tasks["double_inplace"]
    assert wrote["status"] == "invalid-here"
    assert wrote["reason"] == ("the suite's reference writes outside its inputs on the benchmark inputs (perf 0): "
                               f"224 of the {GUARD_MIN_BYTES} bytes after it changed around input 0 (float32[72])")
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("block_scale "))
    assert "perf 0 left out (reads memory outside its inputs); with NaN or extreme values around" in line
    assert "1 of 3 tasks valid here; 2 invalid-here" in out.stdout
    assert "reference reads memory outside its inputs" in out.stdout
    assert "reference writes outside its inputs" in out.stdout
