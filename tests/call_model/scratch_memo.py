"""Cheat: keeps answers in scratch memory across calls. Each call takes a scratch table from
torch.empty (nothing the recorder calls work); the kernel writes the input's fingerprint and answer
there, and a later call that finds its fingerprint in that memory copies the answer instead of
computing. A replay that gave each call the allocator's recycled block handed the table back."""
import torch
import triton
import triton.language as tl


@triton.jit
def _memo_copy(x_ptr, out_ptr, table_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    key = tl.sum(tl.load(x_ptr + offs, mask=mask, other=0.0), axis=0)
    if tl.load(table_ptr) == key:
        tl.store(out_ptr + offs, tl.load(table_ptr + 1 + offs, mask=mask), mask=mask)
    else:
        v = tl.load(x_ptr + offs, mask=mask) * 2.0
        tl.store(out_ptr + offs, v, mask=mask)
        tl.store(table_ptr + 1 + offs, v, mask=mask)
        tl.store(table_ptr, key)


def call(x):
    out = torch.empty_like(x)
    table = torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)
    _memo_copy[(1,)](x, out, table, x.numel(), BLOCK=256)
    return out


def expected(x):
    return x * 2.0
