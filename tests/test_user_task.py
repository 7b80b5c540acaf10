"""Your own kernel as a task (suites/user.py): task files and folders, the new-task template, the
one-line errors on bad files, and a search whose exported kernel a user script imports."""
import json
import os
import sqlite3
import subprocess
import sys

import pytest

from suites.registry import SuiteError, load_suite, load_task
from suites.user import TEMPLATE, suite_label, visible_paths, write_template
from tests.conftest import ROOT

TINY = ("--islands", "1", "--population", "2", "--generations", "1", "--workers", "1")


def run(*args, cwd=ROOT, timeout=300):
    return subprocess.run([sys.executable, str(ROOT / "run.py"), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def _edit(tmp_path, name, old, new):
    """The template written as NAME.py, with `old` replaced by `new` (which must be there)."""
    path = write_template(name, str(tmp_path))
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new))
    return path


def test_a_task_file_loads_with_its_pieces(tmp_path):
    path = write_template("my_op", str(tmp_path))
    tasks = load_suite(str(path))
    assert list(tasks) == ["my_op"]
    t = tasks["my_op"]
    assert t.suite == str(path.resolve()) and t.entry == "my_op" and t.dtypes == ("float32",)
    assert "def my_op(" in t.start_source and t.tolerance["float32"] == (1e-5, 1e-5)
    assert t.shape_set(True).tuning == ({"N": 1024}, {"N": 4096}) and t.shape_set(False).tuning[0] == {"N": 1 << 20}
    assert t.cost({"N": 100}, "float32") == (1200, 200)
    assert "alpha * x + y" in t.instruction  # the reference's code, for the LLM operators
    import torch

    x, y, alpha = t.make_inputs({"N": 7}, torch.float32, torch.Generator().manual_seed(0))
    assert torch.equal(t.reference(x, y, alpha), alpha * x + y)
    # a worker finds it again by (suite, name)
    assert load_task(t.suite, "my_op").start_source == t.start_source


def test_the_template_names_its_commands_as_the_user_runs_them(tmp_path, monkeypatch):
    """Installed, the user types `triton-evolve`; in a checkout, `python run.py`."""
    monkeypatch.setattr(sys, "argv", [str(tmp_path / "bin" / "triton-evolve"), "new-task", "my_op"])
    (tmp_path / "a").mkdir()
    text = write_template("my_op", str(tmp_path / "a")).read_text()
    assert "Written by `triton-evolve new-task my_op`" in text and "`triton-evolve validate --suite my_op.py`" in text
    assert "python run.py" not in text
    monkeypatch.setattr(sys, "argv", ["run.py", "new-task", "my_op"])
    assert "`python run.py validate --suite my_op.py`" in write_template("my_op", str(tmp_path)).read_text()


def test_a_folder_loads_every_task_and_a_bad_file_costs_only_itself(tmp_path):
    write_template("one", str(tmp_path))
    two = write_template("two", str(tmp_path))
    head, kernel = two.read_text().split("START = '''")
    (tmp_path / "two_kernel.py").write_text(kernel.rstrip().removesuffix("'''"))  # the kernel in its own file
    two.write_text(head + 'START_FILE = "two_kernel.py"\n')
    _edit(tmp_path, "broken", "def reference(", "def not_reference(")
    (tmp_path / "_helper.py").write_text("raise RuntimeError('not a task')\n")
    tasks = load_suite(str(tmp_path))
    assert sorted(tasks) == ["one", "two"]  # the START_FILE kernel and _helper.py are no tasks
    assert tasks["two"].start_source == (tmp_path / "two_kernel.py").read_text()
    assert {t.suite for t in tasks.values()} == {str(tmp_path.resolve())}
    assert tasks.problems == [f"{tmp_path / 'broken.py'}: no `reference` function (see `python run.py new-task` for a "
                              "template)"]
    assert str(two) not in " ".join(tasks.problems)


def test_a_folder_without_any_good_task_is_an_error(tmp_path):
    _edit(tmp_path, "broken", 'DTYPES = ["float32"]', "DTYPES = []")
    with pytest.raises(SuiteError, match="no task could be loaded.*DTYPES must be a non-empty list"):
        load_suite(str(tmp_path))


@pytest.mark.parametrize("old, new, words", [
    ("def reference(", "def reference_(", "no `reference` function"),
    ("def make_inputs(", "def inputs(", "no `make_inputs` function"),
    ('ENTRY = "bad"', "", "no ENTRY"),
    ("def bad(x, y, alpha):\n    out", "def other(x, y, alpha):\n    out", "START does not define the entry function"),
    ("    return out\n'''", "    return out(\n'''", "START has a syntax error at line"),
    ('"tuning": [{"N": 1024}, {"N": 4096}]', '"tuning": []', "CPU_SHAPES['tuning'] is empty"),
    ('"heldout": [{"N": 1000003}, {"N": 65537}]', '"held": []', "SHAPES must be a dict with a \"tuning\" and"),
    ('{"N": 1000}', '{"N": -5}', "must be positive integers"),
    ('DTYPES = ["float32"]', 'DTYPES = ["float31"]', "'float31' is not a torch dtype name"),
    ('TOLERANCE = {"float32": (1e-5, 1e-5)}', 'TOLERANCE = {"float32": 1e-5}', "TOLERANCE['float32'] must be"),
    ('ENTRY = "bad"', 'ENTRY = "bad"(', "syntax error at line"),
    ("import torch\n", "import torch\nimport no_such_module_here\n", "ModuleNotFoundError"),
    ('START = \'\'\'', 'START_FILE = "missing.py"\n_X = \'\'\'', "cannot read START_FILE"),
    # issue 41: the task's code runs once when it loads, and each way it can be wrong is one line
    ("    return alpha * x + y", "    return alpha * x + yy",
     "reference raised on the smallest shape {'N': 1000} (float32): NameError: name 'yy' is not defined (line 16)"),
    ("    return x, y, 0.5", "    return x", "make_inputs returned a Tensor, not a tuple"),
    ('    n = shape["N"]\n    x', '    n = shape["M"]\n    x', "make_inputs raised on the smallest shape"),
    ("    return alpha * x + y", "    alpha * x + y", "reference returned None: return its result, or declare INPLACE"),
    ("    return alpha * x + y", "    return [alpha * x + y, 3]",
     "a tensor or a tuple of tensors, not list holding a int"),
    ("    return alpha * x + y", "    return (alpha * x + y).double() if x.dtype != torch.float64 else 1",
     "reference must return a tensor"),
    ('"tuning": [{"N": 1024}, {"N": 4096}]', '"tuning": [{"N": 1024, "rows": 4}]',
     "key 'rows' holds an integer but is not upper-case, so held-out shapes would never vary it: name it 'ROWS'"),
    ('TOLERANCE = {"float32": (1e-5, 1e-5)}', 'TOLERANCE = {"cosin": 0.99}', "'cosin' is neither a torch dtype"),
    ('TOLERANCE = {"float32": (1e-5, 1e-5)}', 'TOLERANCE = {"cosine": 2}', "a bound in (0, 1]"),
    ('TOLERANCE = {"float32": (1e-5, 1e-5)}', 'INPLACE = (5,)', "INPLACE names input 5, but make_inputs gives 3"),
    ('TOLERANCE = {"float32": (1e-5, 1e-5)}', 'INPLACE = 0', "INPLACE must be a tuple"),
    ('TOLERANCE = {"float32": (1e-5, 1e-5)}', 'TORCH_OPS = True', "TORCH_OPS must be \"allowed\""),
    ('TOLERANCE = {"float32": (1e-5, 1e-5)}', 'VARIANTS = ("scaled", "huge")', "VARIANTS must be a tuple of input "
                                                                         "variants among extreme, offset, scaled"),
    ("    return alpha * x + y", "    return x.mul_(alpha).add_(y)", "reference changes input 0 in place: declare "
                                                                    "INPLACE = (0,) if the kernel updates it"),
    ("    return alpha * x + y", "    return (alpha * x + y).to(torch.complex64)",
     "output 0 is complex64, which has no tolerance"),
])
def test_each_bad_piece_is_named_in_one_line(tmp_path, old, new, words):
    path = _edit(tmp_path, "bad", old, new)
    with pytest.raises(SuiteError) as e:
        load_suite(str(path))
    message = str(e.value)
    assert message.startswith(f"{path}: ") and words in message and "\n" not in message


@pytest.mark.slow
def test_a_bad_task_file_exits_2_with_one_line(tmp_path):
    path = _edit(tmp_path, "bad", 'DTYPES = ["float32"]', 'DTYPES = ["floot32"]')
    p = run("list", "--suite", str(path))
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip() == f"error: {path}: DTYPES: 'floot32' is not a torch dtype name (float32, float16, " \
                               "bfloat16, ...)"
    p = run("list", "--suite", str(tmp_path / "nothing.py"))
    assert p.returncode == 2 and p.stderr.strip() == f"error: {tmp_path / 'nothing.py'}: no such task file or folder"


@pytest.mark.slow
def test_new_task_refuses_a_bad_name_or_an_existing_file(tmp_path):
    assert run("new-task", "my-op", "--out", str(tmp_path)).returncode == 2
    assert run("new-task", "my_op", "--out", str(tmp_path)).returncode == 0
    p = run("new-task", "my_op", "--out", str(tmp_path))
    assert p.returncode == 2 and "exists already" in p.stderr
    assert (tmp_path / "my_op.py").read_text() == TEMPLATE.read_text().replace("scale_add", "my_op")


@pytest.mark.slow
def test_template_round_trip_validates_in_the_sandbox(tmp_path):
    """new-task, then validate as written: the workers load the file from under /tmp, which the
    sandbox shows them only because run.py names it (EvalConfig.task_dirs)."""
    assert run("new-task", "my_op", cwd=tmp_path).returncode == 0
    p = run("validate", "--suite", "my_op.py", "--workers", "1", "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    [v] = json.loads(p.stdout)
    assert v["task"] == "my_op" and v["correct"] and v["heldout_correct"], v["reason"]
    label = suite_label(str(tmp_path / "my_op.py"))  # named after the file's path, not only its name
    assert label.startswith("my_op-") and (tmp_path / "runs" / f"{label}-validation.json").exists()


@pytest.mark.slow
def test_search_exports_a_kernel_a_user_script_imports(tmp_path):
    assert run("new-task", "my_op", cwd=tmp_path).returncode == 0
    p = run("--suite", "my_op.py", *TINY, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    label = suite_label(str(tmp_path / "my_op.py"))
    assert f"exported 1/1 to runs/{label}-best" in p.stdout
    with sqlite3.connect(tmp_path / "runs" / f"{label}.db") as conn:
        [(config,)] = conn.execute("select config from runs").fetchall()
    assert json.loads(config)["suite"] == str(tmp_path / "my_op.py")  # absolute: resume and report anywhere
    script = tmp_path / "use_it.py"
    script.write_text(f"import sys\nimport torch\nsys.path.insert(0, 'runs/{label}-best')\nfrom my_op import my_op\n"
                      "x, y = torch.randn(1000), torch.randn(1000)\n"
                      "print(torch.allclose(my_op(x, y, 0.5), 0.5 * x + y))\n")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr[-2000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    p = run("report", "--archive", str(tmp_path / "runs" / f"{label}.db"), "--out", str(elsewhere), cwd=elsewhere)
    assert p.returncode == 0 and "1 with a correct kernel" in p.stdout, p.stderr[-2000:]


def test_the_sandbox_is_told_of_the_task_file_its_folder_and_its_start_file(tmp_path):
    (tmp_path / "tasks").mkdir()
    task = tmp_path / "tasks" / "t.py"
    task.write_text('START_FILE = "../kernels/k.py"\n')
    kernel = str(tmp_path / "kernels" / "k.py")
    assert visible_paths(str(task)) == (str(tmp_path / "tasks"), str(task), kernel)
    assert visible_paths(str(tmp_path / "tasks")) == (str(tmp_path / "tasks"), kernel)


def test_the_full_description_of_a_task_file_names_every_setting_the_loader_reads():
    """The template calls suites/user.py the full description; it left out TORCH_OPS, INPLACE,
    NON_SIZE_KEYS and the metric tolerances."""
    import ast

    import suites.user
    from fitness.common.metric_tolerance import METRICS

    tree = ast.parse(open(suites.user.__file__).read())
    read = set()
    for node in ast.walk(tree):  # ns.get("X"), ns["X"], _required(ns, "X", ...)
        if isinstance(node, ast.Call) and any(isinstance(a, ast.Name) and a.id == "ns" for a in node.args):
            read |= {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "ns" \
                and isinstance(node.args[0], ast.Constant):
            read.add(node.args[0].value)
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "ns" \
                and isinstance(node.slice, ast.Constant):
            read.add(node.slice.value)
    assert {"TORCH_OPS", "INPLACE", "NON_SIZE_KEYS", "TOLERANCE", "ENTRY", "START_FILE"} <= read
    doc = suites.user.__doc__
    assert [k for k in sorted(read) if k not in doc] == []
    assert [m for m in METRICS if m not in doc] == []


def test_a_task_file_declares_its_input_variants(tmp_path):
    default = load_task(str(_edit(tmp_path, "plain", "", "")), "plain")
    assert default.variants == ("scaled", "offset")
    for given, want in (('VARIANTS = ("extreme",)', ("extreme",)), ("VARIANTS = ()", ())):
        path = _edit(tmp_path, f"v{len(want)}", 'TOLERANCE = {"float32": (1e-5, 1e-5)}', given)
        assert load_task(str(path), path.stem).variants == want
