"""Dense matrix multiply C = A @ B in half precision with float32 accumulation."""
from suites.builtin.common import itemsize, randn, start_source
from suites.task import ShapeSet, Task


def reference(a, b):
    return a @ b


def make_inputs(shape, dtype, gen):
    m, n, k = shape["M"], shape["N"], shape["K"]
    # each factor scaled by K**-0.25 so the K-term dot products (the outputs) are O(1)
    s = k ** -0.25
    a = randn(gen, m, k, scale=s)
    if shape.get("b_transposed"):
        # B is the transpose of a contiguous (N, K) tensor: strides (1, K), not (N, 1)
        b = randn(gen, n, k, scale=s).to(dtype).t()
    else:
        b = randn(gen, k, n, scale=s).to(dtype)
    return a.to(dtype), b


def cost(shape, dtype):
    m, n, k = shape["M"], shape["N"], shape["K"]
    return (m * k + k * n + m * n) * itemsize(dtype), 2 * m * n * k


TASK = Task(
    name="matmul",
    suite="builtin",
    category="matmul",
    entry="matmul",
    reference=reference,
    make_inputs=make_inputs,
    shapes=ShapeSet(
        tuning=(
            {"M": 4096, "N": 4096, "K": 4096},
            {"M": 8192, "N": 4096, "K": 1024},
            {"M": 2048, "N": 2048, "K": 8192},
        ),
        heldout=(
            {"M": 1000, "N": 1001, "K": 999},
            {"M": 3001, "N": 2047, "K": 4097},
            {"M": 2048, "N": 3000, "K": 1536, "b_transposed": True},
        ),
    ),
    interpreter_shapes=ShapeSet(
        tuning=({"M": 64, "N": 64, "K": 64}, {"M": 96, "N": 64, "K": 128}),
        heldout=({"M": 50, "N": 70, "K": 90}, {"M": 64, "N": 48, "K": 80, "b_transposed": True}),
    ),
    dtypes=("float16", "bfloat16"),
    # output rounding alone is <= 2**-11 (fp16) / 2**-9 (bf16) relative; the fp16 atol catches
    # float16 accumulation (out_dtype=float16), which drifts by ~sqrt(K) ulps. bfloat16 also
    # admits truncation (<= 2**-7 relative), which the Triton interpreter does instead of
    # rounding when it casts float32 to bfloat16.
    tolerance={"float16": (1e-3, 2e-3), "bfloat16": (1e-2, 2e-2)},
    # input variants (suites.task.VARIANTS): A only: float16 outputs stay in range
    variants=("scaled",),
    varied=(0,),
    cost=cost,
    start_source=start_source("matmul"),
    instruction=(
        "matmul(a, b) -> c: a (M, K) and b (K, N) both float16 or both bfloat16, b possibly "
        "non-contiguous (use its strides); c = a @ b in the input dtype, shape (M, N), "
        "accumulated in float32."
    ),
    difficulty=3,
)
