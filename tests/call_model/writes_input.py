"""Not honest for a task that does not update its inputs: the kernel writes its result and, beside
it, clears its input (an input the caller still owns)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _take(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)
    tl.store(x_ptr + offs, tl.zeros((BLOCK,), tl.float32), mask=mask)


def call(x):
    out = torch.empty_like(x)
    _take[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK=64)
    return out


def expected(x):
    return x * 2.0
