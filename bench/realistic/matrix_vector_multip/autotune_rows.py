"""Strategy: GEMV is bandwidth-bound: each CTA owns BLOCK_N rows and streams the matrix in
BLOCK_M-wide, 16-byte-vectorized chunks, reducing per chunk into a [BLOCK_N] fp32 accumulator
(no [BLOCK_N, BLOCK_M] register tile); 24 configs autotuned on (N, M)."""
import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({"BLOCK_N": n, "BLOCK_M": m}, num_warps=w, num_stages=s)
             for n, m in ((1, 1024), (2, 512), (4, 256), (4, 512), (8, 128), (8, 256)) for w in (4, 8) for s in (2, 4)],
    key=["N", "M"],
)
@triton.jit
def mv_kernel(A, B, C, N, M, stride_an, stride_am, stride_bm, stride_cn,
              BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_M)
    n_mask = rows < N
    a_base = A + rows.to(tl.int64)[:, None] * stride_an
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for m in range(0, M, BLOCK_M):
        c = m + cols
        a = tl.load(a_base + c[None, :] * stride_am, mask=n_mask[:, None] & (c[None, :] < M), other=0.0)
        b = tl.load(B + c * stride_bm, mask=c < M, other=0.0)
        acc += tl.sum(a.to(tl.float32) * b.to(tl.float32)[None, :], axis=1)
    tl.store(C + rows * stride_cn, acc.to(C.dtype.element_ty), mask=n_mask)


def mv(inp, vec):
    assert inp.shape[1] == vec.shape[0], "incompatible dimensions"
    N, M = inp.shape
    out = torch.empty((N,), device=inp.device, dtype=inp.dtype)
    grid = lambda META: (triton.cdiv(N, META["BLOCK_N"]),)
    mv_kernel[grid](inp, vec, out, N, M, inp.stride(0), inp.stride(1), vec.stride(0), out.stride(0))
    return out
