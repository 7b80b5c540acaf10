# entry: attention
"""Flash-attention style forward pass (no causal mask), online softmax in fp32."""
import math

import torch
import triton
import triton.language as tl


@triton.jit
def _attn_fwd(Q, K, V, O, sm_scale, stride_qh, stride_qm, stride_kh, stride_kn, stride_vh, stride_vn,
              stride_oh, stride_om, N_CTX, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    off_h = tl.program_id(1)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + off_h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :], mask=offs_m[:, None] < N_CTX)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for start_n in range(0, N_CTX, BLOCK_N):
        kv_mask = (start_n + offs_n)[:, None] < N_CTX
        k = tl.load(K + off_h * stride_kh + (start_n + offs_n)[:, None] * stride_kn + offs_d[None, :], mask=kv_mask)
        qk = tl.dot(q, tl.trans(k)) * sm_scale
        qk = tl.where((start_n + offs_n)[None, :] < N_CTX, qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp(qk - m_ij[:, None])
        alpha = tl.exp(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + off_h * stride_vh + (start_n + offs_n)[:, None] * stride_vn + offs_d[None, :], mask=kv_mask)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_ij
    acc = acc / l_i[:, None]
    tl.store(O + off_h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :], acc.to(O.dtype.element_ty),
             mask=offs_m[:, None] < N_CTX)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sm_scale: float | None = None) -> torch.Tensor:
    """q, k, v: (heads, seq, head_dim)."""
    H, N, D = q.shape
    sm_scale = sm_scale or 1.0 / math.sqrt(D)
    o = torch.empty_like(q)
    BLOCK_M, BLOCK_N = 64, 64
    grid = (triton.cdiv(N, BLOCK_M), H)
    _attn_fwd[grid](q, k, v, o, sm_scale, q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0),
                    v.stride(1), o.stride(0), o.stride(1), N, HEAD_DIM=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
    return o
