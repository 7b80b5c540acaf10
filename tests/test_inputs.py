"""What every side of an evaluation computes alike (fitness.common.inputs): inputs from a seed, work counts, poison."""
import dataclasses
import math

import pytest
import torch

from fitness.common.inputs import draw_inputs, flat_items, poison_value, work_elements
from suites.registry import load_suite


@pytest.fixture(scope="module")
def tasks():
    return load_suite("builtin")


def _case(task, seed: int = 5, dtype: str | None = None) -> dict:
    return {"split": "tuning", "shape": dict(task.shape_set(True).tuning[0]), "dtype": dtype or task.dtypes[0],
            "seed": seed}


def _same(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(
        torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y for x, y in zip(a, b))


def _tensors(args: tuple) -> list[torch.Tensor]:
    return [a for a in args if isinstance(a, torch.Tensor)]


@pytest.mark.parametrize("name", ["softmax", "matmul", "embedding", "cross_entropy"])
def test_the_same_task_case_and_seed_draw_the_same_inputs_whatever_the_global_generator_did(tasks, name):
    task = tasks[name]
    case = _case(task)
    torch.manual_seed(1)
    first = draw_inputs(task, case, 7)
    torch.manual_seed(2)
    torch.rand(1000)  # the global generator moved on: the draw must not read it
    draw_inputs(task, case, 8)  # nor depend on a draw made between
    again = draw_inputs(task, case, 7)
    assert _tensors(first) and _same(first, again)


@pytest.mark.parametrize("name", ["softmax", "matmul", "layernorm"])
def test_different_seeds_draw_different_inputs(tasks, name):
    task = tasks[name]
    a, b = draw_inputs(task, _case(task), 7), draw_inputs(task, _case(task), 8)
    floats = [(x, y) for x, y in zip(_tensors(a), _tensors(b)) if x.is_floating_point()]
    assert floats and all(not torch.equal(x, y) for x, y in floats)


def test_the_seed_argument_decides_the_draw_not_the_case_s_own_seed(tasks):
    task = tasks["softmax"]
    assert _same(draw_inputs(task, _case(task, seed=1), 42), draw_inputs(task, _case(task, seed=2), 42))
    assert not _same(draw_inputs(task, _case(task, seed=3), 1), draw_inputs(task, _case(task, seed=3), 2))


def test_the_case_s_dtype_is_the_dtype_the_inputs_are_drawn_in(tasks):
    task = tasks["matmul"]
    for dtype in ("float16", "bfloat16"):
        a, b = draw_inputs(task, _case(task, dtype=dtype), 3)[:2]
        assert a.dtype == b.dtype == getattr(torch, dtype)
        assert a.shape == (task.shape_set(True).tuning[0]["M"], task.shape_set(True).tuning[0]["K"])


def test_a_dtype_that_is_not_torch_s_reaches_the_input_maker_as_none(tasks):
    seen = []

    def make(shape, dtype, gen):
        seen.append(dtype)
        return (torch.rand(shape["N"], generator=gen),)

    task = dataclasses.replace(tasks["softmax"], make_inputs=make)
    draw_inputs(task, {"shape": {"N": 4}, "dtype": "given"}, 1)
    draw_inputs(task, {"shape": {"N": 4}, "dtype": "float16"}, 1)
    assert seen == [None, torch.float16]


def test_a_task_that_cannot_draw_on_the_device_draws_on_the_host_there_alike(tasks):
    task = dataclasses.replace(tasks["softmax"], device_inputs=False)
    case = _case(task)
    elsewhere = draw_inputs(task, case, 9, "meta")  # never tried on the device: no generator is made there
    assert all(t.device.type == "cpu" for t in _tensors(elsewhere))
    assert _same(elsewhere, draw_inputs(task, case, 9))


def test_a_device_draw_that_fails_is_an_error_for_a_function_task(tasks):
    task = tasks["softmax"]
    assert task.device_inputs and task.script is None
    with pytest.raises(RuntimeError):
        draw_inputs(task, _case(task), 9, "meta")  # no generator on the meta device


def test_a_script_task_whose_device_draw_fails_draws_on_the_host_the_same_values(tasks):
    task = dataclasses.replace(tasks["softmax"], script=object())  # a suite's input maker: its own code
    case = _case(task)
    fallback = draw_inputs(task, case, 9, "meta")
    assert all(t.device.type == "cpu" for t in _tensors(fallback))
    assert _same(fallback, draw_inputs(task, case, 9))


def test_work_counts_the_elements_read_when_an_op_writes_fewer():
    x = torch.zeros(64, 256)
    assert work_elements((x,), x.logsumexp(1)) == 64 * 256
    assert work_elements((x, 1, "dim"), [x.sum(1)]) == 64 * 256  # numbers and strings are no elements


def test_work_counts_the_elements_written_when_an_op_writes_more():
    row, col = torch.zeros(1, 300), torch.zeros(200, 1)
    assert work_elements((row, col), row + col) == 200 * 300
    assert work_elements((2.0,), [torch.zeros(3), (torch.zeros(4), torch.zeros(5))]) == 12


def test_work_counts_tensors_nested_in_lists_and_tuples_on_both_sides():
    args = ([torch.zeros(2, 3), (torch.zeros(4), None)], torch.zeros(5))
    assert work_elements(args, None) == 6 + 4 + 5
    assert work_elements([], [[torch.zeros(7)], torch.zeros(0)]) == 7
    assert work_elements((), ()) == 0


def test_flat_items_gives_every_leaf_of_nested_lists_and_tuples_in_order():
    d = {"k": [1, 2]}
    assert list(flat_items([1, (2, [3, (4,)]), [], "ab", d])) == [1, 2, 3, 4, "ab", d]
    assert list(flat_items(5)) == [5]
    assert list(flat_items(([], ()))) == []


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.complex64,
                                   torch.float8_e4m3fn])
def test_poisoned_floating_memory_holds_nan(dtype):
    value = poison_value(dtype)
    assert isinstance(value, float) and math.isnan(value)
    filled = torch.full((2,), value, dtype=dtype)
    assert filled.to(torch.complex128 if dtype.is_complex else torch.float64).isnan().all()


def test_poisoned_flags_are_true():
    assert poison_value(torch.bool) is True
    assert torch.full((3,), poison_value(torch.bool)).all()


@pytest.mark.parametrize("dtype, value", [(torch.int8, 127), (torch.uint8, 255), (torch.int16, 32767),
                                          (torch.int32, 2**31 - 1), (torch.int64, 2**63 - 1)])
def test_poisoned_integers_hold_their_dtype_s_largest_value(dtype, value):
    assert poison_value(dtype) == value and type(poison_value(dtype)) is int
    assert int(torch.full((1,), poison_value(dtype), dtype=dtype)[0]) == value  # exact in the dtype itself
