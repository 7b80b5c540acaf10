"""A wrapper as users have them: softmax over rows, the entry's first parameter named `input`
(as torch.nn.functional spells it), its kernel in its own file (softmax_input_kernel.py)."""
import torch

ENTRY = "softmax"


def reference(input):
    return torch.softmax(input, dim=-1)


def make_inputs(shape, dtype, gen):
    x = torch.randn(shape["ROWS"], shape["COLS"], generator=gen, dtype=torch.float32) * 3
    return (x.to(dtype),)  # a tuple, even for one input


SHAPES = {"tuning": [{"ROWS": 4096, "COLS": 1024}, {"ROWS": 1024, "COLS": 4096}],
          "heldout": [{"ROWS": 3000, "COLS": 1000}, {"ROWS": 777, "COLS": 2500}]}
CPU_SHAPES = {"tuning": [{"ROWS": 16, "COLS": 128}], "heldout": [{"ROWS": 9, "COLS": 100}, {"ROWS": 33, "COLS": 64}]}
DTYPES = ["float32"]
START_FILE = "softmax_input_kernel.py"


def cost(shape, dtype):
    n = shape["ROWS"] * shape["COLS"]
    return 2 * n * 4, 4 * n
