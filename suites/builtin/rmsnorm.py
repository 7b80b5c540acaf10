"""RMS normalization over the last dimension of a 2-D tensor, with a weight."""
import torch

from suites.builtin.common import randn, rows_cost, start_source
from suites.task import ShapeSet, Task


def reference(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def make_inputs(shape, dtype, gen):
    m, n = shape["M"], shape["N"]
    x = randn(gen, m, n, scale=2.0, shift=0.5)
    weight = randn(gen, n, scale=0.5, shift=1.0)
    return x.to(dtype), weight.to(dtype), 1e-6


TASK = Task(
    name="rmsnorm",
    suite="builtin",
    category="normalization",
    entry="rmsnorm",
    reference=reference,
    make_inputs=make_inputs,
    shapes=ShapeSet(
        tuning=({"M": 4096, "N": 2048}, {"M": 8192, "N": 1024}, {"M": 512, "N": 16384}),
        heldout=({"M": 2500, "N": 2560}, {"M": 6000, "N": 1000}, {"M": 333, "N": 12289}),
    ),
    interpreter_shapes=ShapeSet(
        tuning=({"M": 64, "N": 256}, {"M": 16, "N": 1024}),
        heldout=({"M": 37, "N": 333}, {"M": 5, "N": 1500}),
    ),
    dtypes=("float32",),
    tolerance={"float32": (1e-5, 1e-5)},
    variants=("scaled", "offset", "extreme"),
    varied=(0,),
    cost=rows_cost(reads=1, writes=1, flops_per_elem=4, vec_reads=1),
    start_source=start_source("rmsnorm"),
    instruction=(
        "rmsnorm(x, weight, eps) -> y: x float32 (M, N), weight float32 (N,), eps a Python float; "
        "y = x * rsqrt(mean(x**2 over the row) + eps) * weight, float32 (M, N)."
    ),
    difficulty=2,
)
