"""Materialized transpose of a 2-D tensor: a contiguous (N, M) copy of x.t()."""
from suites.builtin.common import randn, rows_cost, start_source
from suites.task import ShapeSet, Task


def reference(x):
    return x.t().contiguous()


def make_inputs(shape, dtype, gen):
    m, n = shape["M"], shape["N"]
    if shape.get("stride"):
        # every stride-th column of a wider tensor: strides (stride*N, stride), not dense
        step = shape["stride"]
        x = randn(gen, m, n * step).to(dtype)[:, ::step]
    elif shape.get("transposed"):
        # x is itself a transposed view: strides (1, M)
        x = randn(gen, n, m).to(dtype).t()
    else:
        x = randn(gen, m, n).to(dtype)
    return (x,)


TASK = Task(
    name="transpose_copy",
    suite="builtin",
    category="memory",
    entry="transpose_copy",
    reference=reference,
    make_inputs=make_inputs,
    shapes=ShapeSet(
        tuning=({"M": 2048, "N": 4096}, {"M": 1024, "N": 8192}, {"M": 16384, "N": 512}),
        heldout=(
            {"M": 3001, "N": 1999},
            {"M": 2000, "N": 3000, "stride": 3},
            {"M": 200, "N": 30001, "transposed": True},
        ),
    ),
    interpreter_shapes=ShapeSet(
        tuning=({"M": 128, "N": 256}, {"M": 512, "N": 64}),
        heldout=({"M": 77, "N": 133, "stride": 3}, {"M": 100, "N": 61, "transposed": True}),
    ),
    dtypes=("float32",),
    tolerance={"float32": (0.0, 0.0)},  # a copy must be exact
    variants=("scaled", "offset", "extreme"),
    cost=rows_cost(reads=1, writes=1, flops_per_elem=0),
    start_source=start_source("transpose_copy"),
    instruction=(
        "transpose_copy(x) -> y: x float32 (M, N) with arbitrary strides (use x.stride()); "
        "y = x.t() materialized as a new contiguous float32 (N, M) tensor."
    ),
    difficulty=2,
)
