"""Layer normalization over the last dimension of a 2-D tensor, with affine weight and bias."""
import torch

from suites.builtin.common import randn, rows_cost, start_source
from suites.task import ShapeSet, Task


def reference(x, weight, bias, eps):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def make_inputs(shape, dtype, gen):
    m, n = shape["M"], shape["N"]
    # a non-zero mean so that dropping the centering or using E[x^2]-E[x]^2 carelessly shows
    x = randn(gen, m, n, scale=2.0, shift=1.0)
    weight = randn(gen, n, scale=0.5, shift=1.0)
    bias = randn(gen, n, scale=0.5)
    return x.to(dtype), weight.to(dtype), bias.to(dtype), 1e-5


TASK = Task(
    name="layernorm",
    suite="builtin",
    category="normalization",
    entry="layernorm",
    reference=reference,
    make_inputs=make_inputs,
    shapes=ShapeSet(
        tuning=({"M": 4096, "N": 2048}, {"M": 8192, "N": 1024}, {"M": 512, "N": 16384}),
        heldout=({"M": 3001, "N": 1999}, {"M": 8000, "N": 768}, {"M": 100, "N": 12289}),
    ),
    interpreter_shapes=ShapeSet(
        tuning=({"M": 64, "N": 256}, {"M": 16, "N": 1024}),
        heldout=({"M": 37, "N": 333}, {"M": 5, "N": 1500}),
    ),
    dtypes=("float32",),
    tolerance={"float32": (1e-5, 1e-5)},
    # input variants (suites.task.VARIANTS): x: an offset mean breaks a one-pass E[x^2]-E[x]^2
    variants=("scaled", "offset", "extreme"),
    varied=(0,),
    cost=rows_cost(reads=1, writes=1, flops_per_elem=8, vec_reads=2),
    start_source=start_source("layernorm"),
    instruction=(
        "layernorm(x, weight, bias, eps) -> y: x float32 (M, N), weight and bias float32 (N,), "
        "eps a Python float; y = (x - mean) / sqrt(var + eps) * weight + bias per row "
        "(biased variance), float32 (M, N)."
    ),
    difficulty=2,
)
