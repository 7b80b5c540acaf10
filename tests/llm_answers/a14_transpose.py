# entry: transpose
"""2D transpose through tiles, so both the read and the write are coalesced."""
import torch
import triton
import triton.language as tl

__all__ = ["transpose"]


@triton.jit
def transpose_kernel(src, dst, M, N, s_m, s_n, d_n, d_m, TILE: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * TILE + tl.arange(0, TILE)
    rn = pid_n * TILE + tl.arange(0, TILE)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tile = tl.load(src + rm[:, None] * s_m + rn[None, :] * s_n, mask=mask)
    tl.store(dst + rn[None, :] * d_n + rm[:, None] * d_m, tile, mask=mask)


def transpose(input: torch.Tensor) -> torch.Tensor:
    M, N = input.shape
    out = torch.empty((N, M), dtype=input.dtype, device=input.device)
    TILE = 32
    transpose_kernel[(triton.cdiv(M, TILE), triton.cdiv(N, TILE))](
        input, out, M, N, input.stride(0), input.stride(1), out.stride(0), out.stride(1), TILE=TILE)
    return out
