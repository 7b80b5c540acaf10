"""Knob operators: find launch and compile parameters, rewrite them as valid Python, mix two
parents of one kernel."""
import ast
import random

from operators.base import Context, Parent
from operators.knobs import KnobCrossover, KnobMutation, apply, find_knobs
from tests.candidates import candidate

SRC = '''import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=4, num_stages=2)], key=["n"])
@triton.jit
def _k(x_ptr, n, BLOCK: tl.constexpr):
    pass


@triton.jit
def _plain(x_ptr, n, BLOCK: tl.constexpr, ROWS: tl.constexpr):
    pass


def entry(x):
    TILE = 256  # a comment that must survive
    _k[(1,)](x, x.numel())
    _plain[(1,)](
        x, x.numel(), TILE,
        ROWS=16, num_warps=8,
    )
    return x
'''


def parent(cid: int, source: str) -> Parent:
    """A kernel as the archive hands it to an operator, not evaluated yet."""
    return Parent(candidate(cid, source))


def test_finds_every_kind_of_knob():
    knobs = {k.key: k for k in find_knobs(SRC)}
    assert knobs[("config", 0, "BLOCK")].value == 64
    assert knobs[("config", 0, "num_warps")].value == 4
    assert knobs[("config", 0, "num_stages")].value == 2
    assert knobs[("assign", "entry", "TILE")].value == 256
    assert knobs[("launch", "entry", "_plain", 1, "ROWS")].value == 16
    assert knobs[("launch", "entry", "_plain", 1, "num_warps")].value == 8
    # absent at the site: insertable
    assert knobs[("launch", "entry", "_plain", 1, "num_stages")].value is None
    # an autotuned kernel takes these from its Configs; at the launch they would clash
    assert ("launch", "entry", "_k", 0, "num_warps") not in knobs


def test_apply_rewrites_values_and_inserts_missing_ones():
    knobs = {k.key: k for k in find_knobs(SRC)}
    out = apply(SRC, {knobs[("assign", "entry", "TILE")]: 512,
                      knobs[("launch", "entry", "_plain", 1, "num_stages")]: 3,
                      knobs[("config", 0, "num_warps")]: 2})
    ast.parse(out)
    assert "TILE = 512  # a comment that must survive" in out
    assert "ROWS=16, num_warps=8, num_stages=3," in out
    assert '{"BLOCK": 64}, num_warps=2, num_stages=2' in out
    again = {k.key: k.value for k in find_knobs(out)}
    assert again[("launch", "entry", "_plain", 1, "num_stages")] == 3


def test_mutation_changes_a_knob_and_nothing_else():
    rng = random.Random(3)
    for _ in range(20):
        child = KnobMutation().propose([parent(1, SRC)], Context("t"), rng)
        assert child is not None and child.source != SRC and child.operator == "knob_mutation"
        before = {k.key: k.value for k in find_knobs(SRC)}
        after = {k.key: k.value for k in find_knobs(child.source)}
        changed = [key for key in before if before[key] != after[key]]
        assert 1 <= len(changed) <= 2, child.note
        ast.parse(child.source)


def test_mutation_is_reproducible_from_the_generator():
    a = KnobMutation().propose([parent(1, SRC)], Context("t"), random.Random(7))
    b = KnobMutation().propose([parent(1, SRC)], Context("t"), random.Random(7))
    assert a.source == b.source


def test_no_knobs_means_no_child():
    assert KnobMutation().propose([parent(1, "def entry(x):\n    return x\n")], Context("t"), random.Random(0)) is None


def test_crossover_takes_shared_knobs_from_either_parent():
    knobs = {k.key: k for k in find_knobs(SRC)}
    other = apply(SRC, {knobs[("assign", "entry", "TILE")]: 1024, knobs[("config", 0, "BLOCK")]: 128})
    seen = set()
    for seed in range(30):
        child = KnobCrossover().propose([parent(1, SRC), parent(2, other)], Context("t"), random.Random(seed))
        if child is None:
            continue  # the coin kept every knob of the first parent
        values = {k.key: k.value for k in find_knobs(child.source)}
        seen.add((values[("assign", "entry", "TILE")], values[("config", 0, "BLOCK")]))
    assert {(1024, 64), (256, 128), (1024, 128)} <= seen


def test_crossover_only_crosses_knobs_of_the_same_site():
    # other names everywhere: the only shared keys (the autotune config's warps and stages) hold
    # the same values, so there is nothing to cross
    unrelated = SRC.replace("_plain", "_other").replace("TILE", "T2").replace('"BLOCK"', '"B2"')
    unrelated = unrelated.replace("ROWS=16", "ROWS=32")
    for seed in range(10):
        assert KnobCrossover().propose([parent(1, SRC), parent(2, unrelated)], Context("t"),
                                       random.Random(seed)) is None


def test_every_builtin_starting_kernel_has_knobs(builtin):
    for task in builtin.values():
        assert find_knobs(task.start_source), task.name


AUTOTUNED = """import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=4)], key=["n"])
@triton.jit
def _add(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


def entry(x):
    y = torch.empty_like(x)
    _add[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, y, x.numel())
    return y
"""


def test_every_mutant_of_an_autotuned_kernel_still_runs(tmp_path, monkeypatch):
    import importlib.util

    import torch

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    rng, mutate, seen = random.Random(0), KnobMutation(), set()
    for i in range(20):
        child = mutate.propose([parent(1, AUTOTUNED)], Context("t"), rng)
        if child is None or child.source in seen:
            continue
        seen.add(child.source)
        path = tmp_path / f"m{i}.py"
        path.write_text(child.source)
        spec = importlib.util.spec_from_file_location(f"autotuned_mutant_{i}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        x = torch.arange(100.0)
        assert torch.equal(module.entry(x), x + 1), child.source
    assert len(seen) >= 3
