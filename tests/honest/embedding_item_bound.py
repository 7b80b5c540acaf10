"""Honest (issue 48), task builtin/embedding: the wrapper reads the largest id with `.item()` and
the kernel checks every id against it, as serving code bound-checks a batch before a gather. The
read differs on every draw: the replay reads it on its own inputs and the launch takes that value
(a stale bound would zero rows)."""
import torch
import triton
import triton.language as tl

TASK = "embedding"


@triton.jit
def _gather(ids_ptr, w_ptr, y_ptr, D, hi, swv, BLOCK: tl.constexpr):
    t = tl.program_id(0)
    idx = tl.load(ids_ptr + t)
    cols = tl.arange(0, BLOCK)
    for start in range(0, D, BLOCK):
        mask = start + cols < D
        row = tl.load(w_ptr + tl.minimum(idx, hi) * swv + start + cols, mask=mask)
        tl.store(y_ptr + t * D + start + cols, tl.where(idx <= hi, row, 0.0), mask=mask)


def embedding(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    T, D = ids.shape[0], weight.shape[1]
    weight = weight.contiguous()
    hi = int(ids.max().item())
    if hi >= weight.shape[0]:
        raise IndexError(f"id {hi} outside a table of {weight.shape[0]} rows")
    y = torch.empty((T, D), device=weight.device, dtype=weight.dtype)
    _gather[(T,)](ids.contiguous(), weight, y, D, hi, weight.stride(0), BLOCK=128)
    return y
