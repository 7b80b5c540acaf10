"""The code stays plain: small modules and functions, short parameter lists, annotated public
functions where the engine's records cross packages (bench/plainness.py measures; this holds it)."""
import ast
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("plainness", ROOT / "bench" / "plainness.py")
plainness = sys.modules["plainness"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plainness)


def test_no_module_function_or_parameter_list_is_over_its_limit():
    assert plainness.over_limits(plainness.measure(plainness.modules())) == []


def test_every_public_function_of_the_engine_is_annotated():
    assert plainness.unannotated(plainness.modules(plainness.ANNOTATED)) == []


def test_the_measure_finds_what_is_over(tmp_path):
    long = tmp_path / "long.py"
    body = "\n".join(f"    x{i} = {i}" for i in range(60))
    long.write_text(f"def f(a, b, c, d, e, g, h, i):\n{body}\n    return x0\n")
    found = plainness.measure([long])
    assert [f.size for f in found["functions"]] == [62] and [f.size for f in found["params"]] == [8]
    assert any("function" in line and ":1 f: 62" in line for line in plainness.over_limits(found))
    assert plainness.unannotated([long]) and ast.parse(long.read_text())
