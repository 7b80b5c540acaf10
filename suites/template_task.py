"""A triton-evolve task: `scale_add(x, y, alpha) = alpha * x + y` on float32 vectors.

Written by `python run.py new-task scale_add`; edit each piece below for your own kernel.
Check it with `python run.py validate --suite scale_add.py`, search with
`python run.py --suite scale_add.py`. The format is described in suites/user.py.
"""
import torch

# The function your kernel module defines; candidates must define it with the same arguments.
ENTRY = "scale_add"


def reference(x, y, alpha):
    """What the kernel must compute, in plain torch. It also runs on float64 copies of the
    inputs: that is the correctness oracle."""
    return alpha * x + y


def make_inputs(shape, dtype, gen):
    """The inputs for one shape, in the order ENTRY takes them: CPU tensors (moved to the device
    by the evaluator) and Python scalars. Draw every random number from `gen`. Always a tuple,
    even of one input: `return (x,)`."""
    n = shape["N"]
    x = torch.randn(n, generator=gen, dtype=torch.float32).to(dtype)
    y = torch.randn(n, generator=gen, dtype=torch.float32).to(dtype)
    return x, y, 0.5


# Shapes are dicts of upper-case sizes. Tuning shapes are timed and shown to the search;
# held-out shapes are drawn afresh at each evaluation between the smallest and largest sizes
# given here, and decide what gets exported. An integer under a lower-case key is refused
# (held-out draws would never vary it) unless declared: NON_SIZE_KEYS = ("causal",). GPU-sized:
SHAPES = {
    "tuning": [{"N": 1 << 20}, {"N": 1 << 24}],
    "heldout": [{"N": 1000003}, {"N": 65537}],
}
# Optional: small shapes for the Triton interpreter on CPU (GPU sizes would take minutes there).
CPU_SHAPES = {
    "tuning": [{"N": 1024}, {"N": 4096}],
    "heldout": [{"N": 1000}, {"N": 3001}],
}
DTYPES = ["float32"]  # torch dtype names; every case runs in each
# Optional: per output dtype, (atol, rtol); |out - ref| <= atol + rtol * |ref| passes. Or
# whole-tensor metrics, for quantization: TOLERANCE = {"cosine": 0.9999, "rel_l1": 1e-3}
# (cosine >=; rel_l1, rmse, rel_rmse, max_abs <=), for every output or per dtype.
TOLERANCE = {"float32": (1e-5, 1e-5)}
# Optional: INPLACE = (0,) when ENTRY updates input 0 in place (the reference too; it may return
# nothing): the updated inputs are then the outputs compared.
# Optional: TORCH_OPS = "allowed" when the kernel does torch work around its Triton kernels
# (quantize in torch, matmul in Triton): that work is timed with the kernels. By default the
# Triton kernels must do the work.


def cost(shape, dtype):
    """Optional: (bytes moved, flops) of one call, for the roofline floor of the timings."""
    n = shape["N"]
    size = torch.empty(0, dtype=getattr(torch, dtype)).element_size()
    return 3 * n * size, 2 * n


# The starting kernel: the source of a module that defines ENTRY (here inline; or put it in its
# own file and write START_FILE = "scale_add_kernel.py", relative to this file).
START = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _scale_add_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, alpha * x + y, mask=mask)


def scale_add(x, y, alpha):
    out = torch.empty_like(x)
    n = x.numel()
    _scale_add_kernel[(triton.cdiv(n, 128),)](x, y, out, n, alpha, BLOCK=128)
    return out
'''
