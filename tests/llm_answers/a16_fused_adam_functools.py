# entry: adam_step
"""One Adam step on flat parameters, fused into a single kernel."""
import functools

import torch
import triton
import triton.language as tl


@triton.jit
def _adam(p_ptr, g_ptr, m_ptr, v_ptr, out_p, out_m, out_v, n, lr, beta1, beta2, eps, bc1, bc2,
          BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    p = tl.load(p_ptr + offs, mask=mask)
    g = tl.load(g_ptr + offs, mask=mask)
    m = beta1 * tl.load(m_ptr + offs, mask=mask) + (1 - beta1) * g
    v = beta2 * tl.load(v_ptr + offs, mask=mask) + (1 - beta2) * g * g
    p = p - lr * (m / bc1) / (tl.sqrt(v / bc2) + eps)
    tl.store(out_p + offs, p, mask=mask)
    tl.store(out_m + offs, m, mask=mask)
    tl.store(out_v + offs, v, mask=mask)


@functools.lru_cache(maxsize=None)
def _block_for(n: int) -> int:
    return 1024 if n >= 1 << 20 else 256


def adam_step(param, grad, exp_avg, exp_avg_sq, lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999,
              eps: float = 1e-8, step: int = 1):
    n = param.numel()
    outs = [torch.empty_like(param) for _ in range(3)]
    block = _block_for(n)
    _adam[(triton.cdiv(n, block),)](param, grad, exp_avg, exp_avg_sq, *outs, n, lr, beta1, beta2, eps,
                                    1 - beta1 ** step, 1 - beta2 ** step, BLOCK=block)
    return tuple(outs)
