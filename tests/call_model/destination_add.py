"""Honest: destination passing, as TritonBench wrappers and serving code write it: the caller
hands the output tensor, the wrapper writes it and returns it."""
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def call(x, y, out):
    n = x.numel()
    _add[(triton.cdiv(n, 64),)](x, y, out, n, BLOCK=64)
    return out


def expected(x, y, out):
    return x + y
