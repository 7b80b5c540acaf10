"""Cheat: counts its calls and launches a different program from the third call of a shape on
(the call it guesses is timed: the evaluator timed the last seed's trace)."""
import torch
import triton
import triton.language as tl

_CALLS = {}


@triton.jit
def _copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


def call(x):
    k = _CALLS[x.shape] = _CALLS.get(x.shape, 0) + 1
    out = torch.empty_like(x)
    block = 64 if k < 3 else 128
    _copy[(triton.cdiv(x.numel(), block),)](x, out, x.numel(), BLOCK=block)
    return out


def expected(x):
    return x.clone()
