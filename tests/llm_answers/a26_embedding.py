# entry: embedding
"""Embedding lookup: gather rows of the weight table by index."""
import torch
import triton
import triton.language as tl


@triton.jit
def embedding_kernel(idx_ptr, weight_ptr, out_ptr, D, BLOCK_D: tl.constexpr):
    i = tl.program_id(0)
    row = tl.load(idx_ptr + i)
    cols = tl.arange(0, BLOCK_D)
    vals = tl.load(weight_ptr + row * D + cols, mask=cols < D)
    tl.store(out_ptr + i * D + cols, vals, mask=cols < D)


def embedding(input: torch.Tensor, weight: torch.Tensor, padding_idx=None) -> torch.Tensor:
    """input: int64 indices of any shape; weight: (num_embeddings, D)."""
    flat = input.reshape(-1)
    D = weight.shape[1]
    out = torch.empty((flat.numel(), D), dtype=weight.dtype, device=weight.device)
    embedding_kernel[(flat.numel(),)](flat, weight, out, D, BLOCK_D=triton.next_power_of_2(D))
    return out.reshape(*input.shape, D)
