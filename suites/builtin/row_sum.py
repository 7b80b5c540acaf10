"""Sum over the last dimension of a 2-D tensor."""
from suites.builtin.common import randn, start_source
from suites.task import ShapeSet, Task


def reference(x):
    return x.sum(dim=-1)


def make_inputs(shape, dtype, gen):
    # scaled by 1/sqrt(N) so every row sum is O(1) and one tolerance fits all row lengths
    x = randn(gen, shape["M"], shape["N"], scale=shape["N"] ** -0.5)
    return (x.to(dtype),)


def cost(shape, dtype):
    m, n = shape["M"], shape["N"]
    return (m * n + m) * 4, m * n


TASK = Task(
    name="row_sum",
    suite="builtin",
    category="reduction",
    entry="row_sum",
    reference=reference,
    make_inputs=make_inputs,
    shapes=ShapeSet(
        tuning=({"M": 4096, "N": 4096}, {"M": 256, "N": 65536}, {"M": 65536, "N": 256}),
        heldout=({"M": 3001, "N": 1999}, {"M": 17, "N": 100003}, {"M": 100000, "N": 77}),
    ),
    interpreter_shapes=ShapeSet(
        tuning=({"M": 64, "N": 256}, {"M": 8, "N": 4096}),
        heldout=({"M": 37, "N": 333}, {"M": 5, "N": 2500}),
    ),
    dtypes=("float32",),
    tolerance={"float32": (1e-5, 1e-5)},
    variants=("scaled", "offset"),
    cost=cost,
    start_source=start_source("row_sum"),
    instruction="row_sum(x) -> y: x float32 (M, N); y float32 (M,) with y[i] = sum_j x[i, j].",
    difficulty=1,
)
