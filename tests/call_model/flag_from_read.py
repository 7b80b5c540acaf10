"""A cheat's shape (issue 48, input sniffing): a flag derived on the host from a value read with
`.item()` switches the kernel's safe path. The flag is no read itself, so the replay cannot carry
it: the recorded program goes on with the recorded flag, and the replay notes the stale read."""
import torch
import triton
import triton.language as tl


@triton.jit
def _softmax(x_ptr, y_ptr, n, safe, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + offs, mask=offs < n, other=float("-inf"))
    e = tl.exp(x - tl.max(x, axis=0) * safe)
    tl.store(y_ptr + row * n + offs, e / tl.sum(e, axis=0), mask=offs < n)


def call(x):
    y = torch.empty_like(x)
    safe = 1 if x.abs().amax().item() > 20.0 else 0
    _softmax[(x.shape[0],)](x, y, x.shape[1], safe, BLOCK=128)
    return y
