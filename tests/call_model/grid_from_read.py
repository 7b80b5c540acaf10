"""Honest in shape: the grid is a count read on the host (`.item()`), one program per row of it.
The replay carries the read into the grid; a read beyond any grid a GPU takes fails the replay."""
import torch
import triton
import triton.language as tl


@triton.jit
def _fill(out_ptr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    tl.store(out_ptr + row * BLOCK + tl.arange(0, BLOCK), row.to(tl.float32) + tl.zeros((BLOCK,), tl.float32))


def call(rows):
    n = int(rows.item())
    out = torch.empty(8 * 16)
    _fill[(n,)](out, BLOCK=16)
    return out
