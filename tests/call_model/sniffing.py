"""Cheat: looks at its inputs before choosing what to launch. Inputs that look like a variant draw
(large values) get the honest kernel; ordinary ones a kernel that skips every other element (a
stand-in for any unsafe fast path), so the call timed on ordinary draws is not the call checked on
the variants."""
import torch
import triton
import triton.language as tl


@triton.jit
def _copy(x_ptr, out_ptr, n, STEP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = (offs < n) & (offs % STEP == 0)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


def call(x):
    out = torch.zeros_like(x)
    step = 1 if float(x.abs().max()) > 8.0 else 2
    _copy[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), STEP=step, BLOCK=64)
    return out


def expected(x):
    return x.clone()
