# entry: bmm
"""Batched matmul; block sizes in a NamedTuple."""
from typing import NamedTuple

import torch
import triton
import triton.language as tl


class Blocks(NamedTuple):
    m: int = 32
    n: int = 32
    k: int = 32


@triton.jit
def bmm_kernel(a, b, c, M, N, K, sab, sam, sak, sbb, sbk, sbn, scb, scm, scn,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    batch = tl.program_id(2)
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        x = tl.load(a + batch * sab + rm[:, None] * sam + (k + rk)[None, :] * sak,
                    mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        y = tl.load(b + batch * sbb + (k + rk)[:, None] * sbk + rn[None, :] * sbn,
                    mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(x, y)
    tl.store(c + batch * scb + rm[:, None] * scm + rn[None, :] * scn, acc.to(c.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def bmm(input: torch.Tensor, mat2: torch.Tensor, blocks: Blocks = Blocks()) -> torch.Tensor:
    B, M, K = input.shape
    N = mat2.shape[2]
    out = torch.empty((B, M, N), device=input.device, dtype=input.dtype)
    grid = (triton.cdiv(M, blocks.m), triton.cdiv(N, blocks.n), B)
    bmm_kernel[grid](input, mat2, out, M, N, K, *input.stride(), *mat2.stride(), *out.stride(),
                     BM=blocks.m, BN=blocks.n, BK=blocks.k)
    return out
