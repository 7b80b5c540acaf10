"""Honest: the row to scale is an index read on the host (`.item()`), as a wrapper reads a length
or an offset. The recorded program carries the value read when it was recorded."""
import torch
import triton
import triton.language as tl


@triton.jit
def _row(x_ptr, out_ptr, row, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + row * n + offs, mask=mask) * 3.0, mask=mask)


def call(x, idx):
    out = torch.empty(x.shape[1])
    row = int(idx.item())
    _row[(1,)](x, out, row, x.shape[1], BLOCK=64)
    return out


def expected(x, idx):
    return x[int(idx.item())] * 3.0
