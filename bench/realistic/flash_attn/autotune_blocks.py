"""Strategy: FlashAttention-2 style forward with the block sizes, warps and pipeline depth
autotuned (16 configs on SEQLEN, DIM, causal); causal CTAs stop at the diagonal and only the
diagonal block is masked; exp2 with the scale folded into Q; batch and head strides honoured."""
import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s)
             for m in (64, 128) for n in (32, 64) for w in (4, 8) for s in (2, 3)],
    key=["SEQLEN", "DIM", "IS_CAUSAL"],
)
@triton.jit
def _fwd_kernel(Q, K, V, sm_scale, L, Out, sqb, sqh, sqs, sqd, skb, skh, sks, skd, svb, svh, svs, svd,
                sob, soh, sos, sod, HEAD, SEQLEN, DIM: tl.constexpr, IS_CAUSAL: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b, h = (bh // HEAD).to(tl.int64), (bh % HEAD).to(tl.int64)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, DIM)
    q = tl.load(Q + b * sqb + h * sqh + offs_m[:, None] * sqs + offs_d[None, :] * sqd,
                mask=offs_m[:, None] < SEQLEN, other=0.0)
    q = (q * (sm_scale * 1.44269504)).to(tl.float16)
    m_i = tl.zeros([BLOCK_M], tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, DIM], tl.float32)
    hi = tl.minimum((start_m + 1) * BLOCK_M, SEQLEN) if IS_CAUSAL else SEQLEN
    for start_n in range(0, hi, BLOCK_N):
        kn = start_n + offs_n
        k = tl.load(K + b * skb + h * skh + kn[None, :] * sks + offs_d[:, None] * skd, mask=kn[None, :] < SEQLEN,
                    other=0.0)
        v = tl.load(V + b * svb + h * svh + kn[:, None] * svs + offs_d[None, :] * svd, mask=kn[:, None] < SEQLEN,
                    other=0.0)
        qk = tl.dot(q, k)
        keep = kn[None, :] < SEQLEN
        if IS_CAUSAL:
            keep = keep & (offs_m[:, None] >= kn[None, :])
        qk = tl.where(keep, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(qk - m_new[:, None])
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), v)
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_new
    acc = acc / l_i[:, None]
    tl.store(L + bh * SEQLEN + offs_m, m_i + tl.math.log2(l_i), mask=offs_m < SEQLEN)
    tl.store(Out + b * sob + h * soh + offs_m[:, None] * sos + offs_d[None, :] * sod, acc.to(Out.dtype.element_ty),
             mask=offs_m[:, None] < SEQLEN)


def flash_attn_triton(q, k, v, causal=True, sm_scale=1):
    Lq, Lk, Lv = q.shape[-1], k.shape[-1], v.shape[-1]
    assert Lq == Lk and Lk == Lv
    assert Lk in {16, 32, 64, 128}
    o = torch.empty_like(q)
    B, H, S = q.shape[0], q.shape[1], q.shape[2]
    L = torch.empty((B * H, S), device=q.device, dtype=torch.float32)
    grid = lambda META: (triton.cdiv(S, META["BLOCK_M"]), B * H, 1)
    _fwd_kernel[grid](q, k, v, sm_scale, L, o, *q.stride(), *k.stride(), *v.stride(), *o.stride(),
                      H, S, DIM=Lk, IS_CAUSAL=causal)
    return o
