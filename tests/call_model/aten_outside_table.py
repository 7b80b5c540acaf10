"""Honest: a wrapper whose glue uses aten ops the closed table never had (logsumexp,
count_nonzero) and in-place forms on a temporary it made (round_, nan_to_num_)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 4.0, mask=mask)


def call(x):
    y = torch.empty_like(x)
    _scale[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), BLOCK=64)
    y.round_()
    y.nan_to_num_()
    lse = torch.logsumexp(y, dim=-1)
    nz = torch.count_nonzero(y, dim=-1)
    return y, lse, nz


def expected(x):
    y = torch.round(x * 4.0)
    return y, torch.logsumexp(y, dim=-1), torch.count_nonzero(y, dim=-1)
