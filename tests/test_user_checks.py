"""The load-time run of a user task's own code (suites.user_checks.check_runs), called on a Task directly."""
import importlib.util
import textwrap
from pathlib import Path

import pytest
import torch

from suites.registry import SuiteError
from suites.task import ShapeSet, Task
from suites.user_checks import check_runs

TOL = {"float32": (1e-5, 1e-5), "float16": (1e-3, 1e-3)}


def _task(reference, make_inputs, tuning=({"N": 8},), heldout=(), **kw) -> Task:
    return Task(name="t", suite="s", category="user", entry="t", reference=reference, make_inputs=make_inputs,
                shapes=ShapeSet(tuple(tuning), tuple(heldout)), dtypes=kw.pop("dtypes", ("float32",)),
                tolerance=kw.pop("tolerance", TOL), cost=lambda s, d: (0, 0), start_source="", **kw)


def _rand(shape, dtype, gen):
    return (torch.rand(shape["N"], generator=gen).to(dtype),)


def _module(tmp_path: Path, code: str) -> tuple:
    """The task file's functions, loaded from `tmp_path`/task.py as the user's module: (module, path)."""
    path = (tmp_path / "task.py").resolve()
    path.write_text(textwrap.dedent(code))
    spec = importlib.util.spec_from_file_location(f"user_checks_task_{abs(hash(str(path)))}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, path


def _error(task: Task, path: Path = Path("/tmp/task.py")) -> str:
    with pytest.raises(SuiteError) as e:
        check_runs(task, path)
    message = str(e.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    return message


# -- what runs, on what -------------------------------------------------------------------------------
def test_the_code_runs_on_the_shape_with_the_fewest_elements_counting_upper_case_sizes_only():
    seen = []

    def make(shape, dtype, gen):
        seen.append(dict(shape))
        shape.pop("pad")  # the task's own shape is not changed by what make_inputs does to its copy
        return (torch.rand(shape["M"] * shape["N"], generator=gen),)

    few = {"M": 2, "N": 16, "pad": 100}  # 32 elements (3200 if the layout flag were a size)
    task = _task(lambda x: x * 2, make, tuning=({"M": 4, "N": 16, "pad": 1}, {"M": 8, "N": 64, "pad": 1}),
                 heldout=(few,))
    check_runs(task, Path("/tmp/task.py"))
    assert seen == [few] and task.shapes.heldout[0] == few


def test_the_interpreter_s_shapes_are_the_ones_run_when_the_task_has_them():
    seen = []

    def make(shape, dtype, gen):
        seen.append(shape["N"])
        return _rand(shape, dtype, gen)

    task = _task(lambda x: x + 1, make, tuning=({"N": 1 << 24},), interpreter_shapes=ShapeSet(({"N": 64},), ()))
    check_runs(task, Path("/tmp/task.py"))
    assert seen == [64]


def test_the_inputs_are_drawn_in_the_first_dtype_from_a_generator_seeded_with_zero():
    seen = []

    def make(shape, dtype, gen):
        seen.append((dtype, torch.rand(1, generator=gen).item()))
        return _rand(shape, dtype, gen)

    check_runs(_task(lambda x: x * 2, make, dtypes=("float16", "float32")), Path("/tmp/task.py"))
    assert seen == [(torch.float16, torch.rand(1, generator=torch.Generator().manual_seed(0)).item())]


def test_the_reference_runs_in_the_task_s_dtype_and_again_on_float64_copies_of_the_float_inputs():
    seen = []

    def make(shape, dtype, gen):
        return torch.rand(shape["N"], generator=gen).to(dtype), torch.arange(shape["N"]), 0.5

    def reference(x, i, alpha):
        seen.append((x.dtype, i.dtype, type(alpha)))
        return x[i] * alpha

    check_runs(_task(reference, make), Path("/tmp/task.py"))
    assert seen == [(torch.float32, torch.int64, float), (torch.float64, torch.int64, float)]


def test_a_make_inputs_that_returns_a_list_is_taken_as_the_tuple_of_arguments():
    check_runs(_task(lambda x, y: x + y, lambda s, d, g: [torch.ones(4), torch.ones(4)]), Path("/tmp/task.py"))


# -- each way the code can be wrong, in one line --------------------------------------------------------
def test_a_reference_that_fails_only_on_float64_is_named_as_failing_on_the_oracle_s_copies(tmp_path):
    mod, path = _module(tmp_path, """
        import torch

        def reference(x):
            if x.dtype == torch.float64:
                raise TypeError("no doubles here")
            return x * 2
    """)
    message = _error(_task(mod.reference, _rand), path)
    assert message == (f"{path}: reference raised on the smallest shape {{'N': 8}} (float32) on float64 copies of "
                       "the inputs (the correctness oracle): TypeError: no doubles here (line 6)")


def test_a_long_error_from_the_user_s_code_is_one_line_of_at_most_300_characters_with_its_line(tmp_path):
    mod, path = _module(tmp_path, """
        import torch


        def make_inputs(shape, dtype, gen):
            raise ValueError("first\\n   second\\tthird  " + "x" * 400)
    """)
    message = _error(_task(lambda x: x, mod.make_inputs), path)
    text = message.split("ValueError: ", 1)[1].removesuffix(" (line 6)")
    assert message.endswith(" (line 6)") and text.startswith("first second third xxx") and len(text) == 300


def test_an_error_raised_outside_the_task_file_names_no_line(tmp_path):
    _, path = _module(tmp_path, "X = 1\n")
    message = _error(_task(lambda x: x.view(3, 5), _rand), path)  # raised in torch, from no line of the file
    assert "reference raised on the smallest shape" in message and "RuntimeError: " in message
    assert "(line" not in message


def test_an_in_place_input_may_change_and_the_oracle_s_run_still_gets_the_inputs_as_drawn():
    seen = []

    def reference(x, y):
        seen.append(float(x[0]))
        x.mul_(2).add_(y)
        return x

    task = _task(reference, lambda s, d, g: (torch.ones(4), torch.ones(4)), inplace=(0,))
    check_runs(task, Path("/tmp/task.py"))
    assert seen == [1.0, 1.0]


def test_changing_an_input_not_declared_in_place_is_refused_even_beside_one_that_is():
    def reference(x, y):
        x.add_(1)
        y.add_(1)
        return x

    task = _task(reference, lambda s, d, g: (torch.ones(4), torch.ones(4)), inplace=(0,))
    assert "reference changes input 1 in place: declare INPLACE = (1,)" in _error(task)


def test_an_input_holding_nan_that_the_reference_leaves_alone_is_not_changed():
    def make(shape, dtype, gen):
        x = torch.ones(4)
        x[1] = float("nan")
        return (x,)

    check_runs(_task(lambda x: x.nan_to_num(), make), Path("/tmp/task.py"))
    with pytest.raises(SuiteError, match="reference changes input 0 in place"):
        check_runs(_task(lambda x: x.nan_to_num_(), make), Path("/tmp/task.py"))  # the NaN replaced: a change


def test_a_float8_input_is_compared_like_any_other():
    def make(shape, dtype, gen):
        return torch.ones(4).to(torch.float8_e4m3fn), torch.ones(4)

    check_runs(_task(lambda w, x: w.float() * x, make), Path("/tmp/task.py"))  # loads: no error of the check itself
    with pytest.raises(SuiteError, match="reference changes input 0 in place"):
        check_runs(_task(lambda w, x: w.zero_().float() + x, make), Path("/tmp/task.py"))


def test_an_in_place_position_that_holds_a_number_is_refused():
    task = _task(lambda x, alpha: x * alpha, lambda s, d, g: (torch.ones(4), 0.5), inplace=(1,))
    assert _error(task).endswith("INPLACE names input 1, but make_inputs gives 2 argument(s) and input 1 is not a "
                                 "tensor among them")


def test_a_reference_that_returns_an_empty_tuple_is_refused():
    assert "reference must return a tensor or a tuple of tensors, not tuple" in _error(_task(lambda x: (), _rand))


def test_each_output_needs_a_tolerance_for_its_dtype_and_the_first_one_without_is_named():
    task = _task(lambda x: (x * 2, x.argsort(), x.long()), _rand)
    assert _error(task).endswith('reference output 1 is int64, which has no tolerance: add TOLERANCE = '
                                 '{"int64": (atol, rtol)}')
    check_runs(_task(lambda x: (x * 2, x.argsort()), _rand, tolerance={**TOL, "int64": (0.0, 0.0)}),
               Path("/tmp/task.py"))
