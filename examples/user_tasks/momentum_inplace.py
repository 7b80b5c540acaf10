"""An in-place update, as optimizer steps are written: SGD with momentum updates the parameter
and the momentum buffer where they are and returns nothing. INPLACE = (0, 2) says inputs 0 and 2
are updated: after the call they are the outputs compared with the reference's own copies."""
import torch

ENTRY = "sgd_momentum_"
INPLACE = (0, 2)


def reference(param, grad, buf, lr, momentum):
    buf.mul_(momentum).add_(grad)
    param.add_(buf, alpha=-lr)


def make_inputs(shape, dtype, gen):
    n = shape["N"]
    param, grad, buf = (torch.randn(n, generator=gen, dtype=torch.float32).to(dtype) for _ in range(3))
    return param, grad, buf, 0.01, 0.9


SHAPES = {"tuning": [{"N": 1 << 20}, {"N": 1 << 24}], "heldout": [{"N": 1000003}, {"N": 65537}]}
CPU_SHAPES = {"tuning": [{"N": 1024}, {"N": 4096}], "heldout": [{"N": 1000}, {"N": 3001}]}
DTYPES = ["float32"]


def cost(shape, dtype):
    return 5 * shape["N"] * 4, 4 * shape["N"]  # read param, grad, buf; write param, buf


START = '''
import triton
import triton.language as tl


@triton.jit
def _sgd_momentum(p_ptr, g_ptr, b_ptr, n, lr, momentum, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    b = tl.load(b_ptr + offs, mask=mask) * momentum + tl.load(g_ptr + offs, mask=mask)
    tl.store(b_ptr + offs, b, mask=mask)
    tl.store(p_ptr + offs, tl.load(p_ptr + offs, mask=mask) - lr * b, mask=mask)


def sgd_momentum_(param, grad, buf, lr, momentum):
    n = param.numel()
    _sgd_momentum[(triton.cdiv(n, 256),)](param, grad, buf, n, lr, momentum, BLOCK=256)
'''
