"""Per-row symmetric int8 quantization: returns the int8 values and the per-row scales."""
import torch

from suites.builtin.common import randn, start_source
from suites.task import ShapeSet, Task


def reference(x):
    scale = x.abs().amax(dim=-1) / 127
    # explicit .to(int8): the float64 oracle run must still return int8 values
    q = torch.round(x / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


def make_inputs(shape, dtype, gen):
    m, n = shape["M"], shape["N"]
    # rows of very different magnitude, so a kernel cannot get away with one global scale
    row_scale = torch.exp(randn(gen, m, 1))
    return ((randn(gen, m, n) * row_scale).to(dtype),)


def cost(shape, dtype):
    m, n = shape["M"], shape["N"]
    # float32 read, int8 written, one float32 scale per row written
    return m * n * 4 + m * n + m * 4, 3 * m * n


TASK = Task(
    name="int8_quant",
    suite="builtin",
    category="quantization",
    entry="int8_quant",
    reference=reference,
    make_inputs=make_inputs,
    shapes=ShapeSet(
        tuning=({"M": 4096, "N": 2048}, {"M": 16384, "N": 512}, {"M": 512, "N": 16384}),
        heldout=({"M": 3001, "N": 1999}, {"M": 10000, "N": 768}, {"M": 100, "N": 100003}),
    ),
    interpreter_shapes=ShapeSet(
        tuning=({"M": 64, "N": 256}, {"M": 16, "N": 1024}),
        heldout=({"M": 37, "N": 333}, {"M": 5, "N": 1500}),
    ),
    dtypes=("float32",),
    # int8 exact: compare.INTEGER_TIE_SHARE covers values on a .5 boundary rounded either way
    # (an atol of 1 accepted truncation instead of rounding, wrong on half the elements)
    tolerance={"int8": (0, 0), "float32": (1e-8, 1e-6)},
    variants=("scaled", "offset", "extreme"),
    rounding_ties=True,  # round half to even of a float quotient: float32 and float64 differ at .5
    cost=cost,
    start_source=start_source("int8_quant"),
    instruction=(
        "int8_quant(x) -> (q, scale): x float32 (M, N); scale = max(|x[i, :]|) / 127, float32 "
        "(M,); q = clamp(round(x / scale[:, None]), -127, 127), int8 (M, N). Rows are never all "
        "zero."
    ),
    difficulty=2,
)
