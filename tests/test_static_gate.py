import pytest

from fitness.engine.static_gate import MAX_SOURCE_BYTES, check_source

GOOD = '''
import torch
import triton
import triton.language as tl

@triton.jit
def _k(x_ptr, BLOCK: tl.constexpr):
    pass

def entry(x):
    _k[(1,)](x, BLOCK=16)
    return x
'''


def test_good_source_passes():
    assert check_source(GOOD, "entry").ok
    assert check_source(GOOD + "\ndef second(x):\n    return x\n", "entry, second").ok


@pytest.mark.parametrize("bad, words", [
    (b"\x00\x01binary", "binary"),
    (b"\xff\xfe not utf8", "UTF-8"),
    ("", "empty"),
    ("def f(:\n", "not valid Python"),
    (GOOD.replace("def entry", "def other"), "no top-level function named 'entry'"),
    (GOOD, "no top-level function named 'second'"),  # with entry "entry,second": see below
    (GOOD.replace("@triton.jit", ""), "no @triton.jit"),
    (GOOD + "\nimport subprocess\n", "import of 'subprocess'"),
    (GOOD + "\nimport ctypes\n", "import of 'ctypes'"),
    (GOOD + "\nfrom multiprocessing import Pool\n", "multiprocessing"),
    (GOOD + "\nimport socket\n", "socket"),
    (GOOD + "\nimport importlib\n", "importlib"),
    (GOOD + "\nimport gc\n", "gc"),
    (GOOD + "\nimport inspect\n", "inspect"),
    (GOOD + "\nexec('1')\n", "exec"),
    (GOOD + "\neval('1')\n", "eval"),
    (GOOD + "\n__import__('os')\n", "__import__"),
    (GOOD + "\ns = torch.cuda.Stream()\n", ".Stream"),
    (GOOD + "\ntorch.cuda.synchronize = None\n", "assigning to a library attribute"),
    (GOOD + "\nf = x.__class__\n", ".__class__"),
    (GOOD + "\nc = torch._C\n", "private attribute"),
    (GOOD + "\nimport sys\n", "sys"),
    (GOOD + "\nfrom . import x\n", "import from"),
    (GOOD + "\nfrom torch import *\n", "import of"),
    (GOOD + "\ng = getattr(torch, 'cuda')\n", "getattr"),
    (GOOD + "\ndef h():\n    global X\n", "global"),
    # modules re-exported as public library attributes: the way to the worker's own objects
    (GOOD + "\nw = torch.sys.modules['fitness.worker']\n", "is not allowed"),
    (GOOD + "\ntorch.os.write(3, b'x')\n", ".os"),
    (GOOD + "\nobjs = triton.runtime.driver.sys\n", ".sys"),
    (GOOD + "\ne = torch.utils.cpp_extension.load_inline\n", "load_inline"),
])
def test_bad_source_rejected(bad, words):
    result = check_source(bad, "entry,second" if "'second'" in words else "entry")
    assert not result.ok
    assert words in result.reason


def test_oversized_source_rejected():
    big = GOOD + "#" * MAX_SOURCE_BYTES
    assert "limit" in check_source(big, "entry").reason
    assert "limit" in check_source(big.encode(), "entry").reason


@pytest.mark.slow
def test_every_parse_of_ours_goes_through_the_lock_and_nothing_patches_ast():
    """CPython 3.11 parses unsafely in threads (gh-106905: a Dask unit's parallel evaluations
    died with "AST constructor recursion depth mismatch"): every layer parses with
    suites.ast_lock.parse, and importing the layers leaves the `ast` module as it was."""
    import ast
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    direct = []
    for path in [p for d in ("suites", "fitness", "operators", "evolve", "archives") for p in (root / d).rglob("*.py")]:
        if path.name == "ast_lock.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("parse", "literal_eval") and \
                    isinstance(node.value, ast.Name) and node.value.id == "ast":
                direct.append(f"{path.relative_to(root)}:{node.lineno}")
    assert direct == []
    code = ("import ast; p = ast.parse; import run, evolve.runner, fitness.engine.evaluator, operators.registry, "
            "archives.report; print(ast.parse is p)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True).stdout
    assert out.strip() == "True"


LLM_ANSWERS = sorted((__import__("pathlib").Path(__file__).parent / "llm_answers").glob("*.py"))


def test_the_corpus_of_llm_answers_is_there():
    assert len(LLM_ANSWERS) >= 30


@pytest.mark.parametrize("path", LLM_ANSWERS, ids=lambda p: p.stem)
def test_harmless_llm_answers_pass(path):
    """Issue 40: zero refusals of code that does no harm (`.__doc__`, `input` parameters, type
    hints, helpers, autotune lists), over LLM-style answers kept in tests/llm_answers."""
    source = path.read_text()
    entry = source.splitlines()[0].removeprefix("# entry:").strip()
    result = check_source(source, entry)
    assert result.ok, f"{path.name}: {result.reason}"


@pytest.mark.parametrize("bad, words", [
    (GOOD + "\ndef h(x, input=input):\n    return input()\n", "builtin input()"),  # a default is the outer scope's
    (GOOD + "\ndef h(x):\n    return [c for input in input() for c in input]\n", "builtin input()"),
    (GOOD + "\nclass A:\n    input = 1\n    def m(self):\n        return input()\n", "builtin input()"),
    (GOOD + "\ninput = 1\ndel input\ninput()\n", "builtin input()"),  # module scope is dynamic
    (GOOD + "\ndef h(getattr):\n    return getattr\nh2 = getattr\n", "builtin getattr()"),
])
def test_builtin_names_still_refused_where_they_reach_the_builtin(bad, words):
    result = check_source(bad, "entry")
    assert not result.ok and words in result.reason


def test_input_as_a_parameter_or_local_passes():
    src = GOOD + ("\ndef wrapper(input, dim: int = -1):\n    out = torch.empty_like(input)\n"
                  "    def inner():\n        return input.shape\n    return out, inner(), [input for input in (1,)]\n")
    assert check_source(src, "entry").ok
