"""Honest: a buffer kept at module level (a workspace made once, at import), written by the kernel
and returned."""
import torch
import triton
import triton.language as tl

N = 256
_WORKSPACE = torch.empty(N)


@triton.jit
def _double(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


def call(x):
    _double[(triton.cdiv(N, 64),)](x, _WORKSPACE, N, BLOCK=64)
    return _WORKSPACE


def expected(x):
    return x * 2.0
