"""Per-row cross-entropy loss from logits and integer class targets (no reduction)."""
import torch

from suites.builtin.common import randn, start_source
from suites.task import ShapeSet, Task


def reference(logits, targets):
    return torch.nn.functional.cross_entropy(logits, targets, reduction="none")


def make_inputs(shape, dtype, gen):
    m, v = shape["M"], shape["V"]
    logits = randn(gen, m, v, scale=2.0)
    targets = torch.randint(0, v, (m,), generator=gen, dtype=torch.int64)
    return logits.to(dtype), targets


def cost(shape, dtype):
    m, v = shape["M"], shape["V"]
    # logits read once, targets (int64) read, one loss per row written
    return m * v * 4 + m * 8 + m * 4, 4 * m * v


TASK = Task(
    name="cross_entropy",
    suite="builtin",
    category="loss",
    entry="cross_entropy",
    reference=reference,
    make_inputs=make_inputs,
    shapes=ShapeSet(
        tuning=({"M": 512, "V": 32768}, {"M": 2048, "V": 8192}, {"M": 128, "V": 131072}),
        heldout=({"M": 256, "V": 50257}, {"M": 400, "V": 32000}, {"M": 63, "V": 128256}),
    ),
    interpreter_shapes=ShapeSet(
        tuning=({"M": 32, "V": 1024}, {"M": 8, "V": 4096}),
        heldout=({"M": 13, "V": 2053}, {"M": 40, "V": 500}),
    ),
    dtypes=("float32",),
    tolerance={"float32": (1e-5, 1e-5)},
    # input variants (suites.task.VARIANTS): the logits: a loss without the max overflows
    variants=("scaled", "extreme"),
    varied=(0,),
    cost=cost,
    start_source=start_source("cross_entropy"),
    instruction=(
        "cross_entropy(logits, targets) -> loss: logits float32 (M, V), targets int64 (M,) in "
        "[0, V); loss[i] = logsumexp(logits[i]) - logits[i, targets[i]], float32 (M,), no "
        "reduction."
    ),
    difficulty=2,
)
