"""Issue 39, class 4 (correctness that binds), without a worker: the layout check, integer and
index exactness, the input variants and the held-out sizes past the largest listed."""
import math
import random

import pytest
import torch

from fitness.common.compare import compare_outputs, compare_tree, same_layout
from fitness.common.reference import compare_case, compute, on_meta
from fitness.engine.judges import assign_variants
from suites.registry import load_suite
from suites.task import (
    OFFSET,
    OUTLIER,
    OUTLIER_EVERY,
    SCALE,
    Task,
    _free,
    _sizes,
    _step,
    apply_variant,
    describe_variant,
)
from tests.test_judges import function_judge

TASKS = load_suite("builtin")
TOL = {"float32": (1e-6, 1e-5), "int8": (1, 0), "int64": (1, 0)}


# -- layout ----------------------------------------------------------------------------------
def test_a_transposed_or_channels_last_output_with_the_right_values_fails_on_its_strides():
    ref = torch.randn(6, 5).double()
    view = ref.float().t().contiguous().t()  # same values, strides (1, 6)
    assert torch.equal(view.double(), ref)
    problem = compare_outputs(view, ref, TOL, expected=[("float32", (6, 5), (5, 1))])
    assert "has strides (1, 6), expected (5, 1)" in problem and "the reference's layout" in problem
    img = torch.randn(2, 3, 4, 4).double()
    last = img.float().contiguous(memory_format=torch.channels_last)
    assert "has strides" in compare_outputs(last, img, TOL, expected=[("float32", (2, 3, 4, 4), img.stride())])
    assert compare_outputs(img.float(), img, TOL, expected=[("float32", (2, 3, 4, 4), img.stride())]) == ""


def test_strides_over_one_element_do_not_count_and_row_major_passes_where_torch_followed_the_inputs():
    one_row = torch.randn(1, 8)
    assert same_layout(one_row.t().contiguous().t(), (8, 1))  # dimension 0 has one element
    # the reference on a transposed input keeps its layout (torch's preserve_format); row-major
    # is the layout any reader takes, so it passes too; another foreign layout does not
    assert same_layout(torch.empty(4, 3), (1, 4))
    assert not same_layout(torch.empty(4, 3).t().contiguous().t(), (3, 1))
    assert not same_layout(torch.empty(2, 3, 4).permute(1, 0, 2).contiguous().permute(1, 0, 2), (1, 8, 2))


def test_the_expected_strides_are_the_references_on_the_task_inputs_in_their_own_layout():
    x = torch.randn(8, 4).t()  # dense, not contiguous: torch's element-wise ops keep the layout
    expected = on_meta(TASKS["bias_gelu"], (x, torch.randn(8)))
    assert expected == [("float32", (4, 8), (1, 4))]
    assert expected[0][2] == TASKS["bias_gelu"].reference(x, torch.randn(8)).stride()
    strided = torch.randn(4, 12)[:, ::3]  # not dense
    assert on_meta(TASKS["transpose_copy"], (strided,)) == [("float32", (4, 4), (4, 1))]
    refs, expected = compute(TASKS["transpose_copy"], {"shape": {"M": 5, "N": 3}, "dtype": "float32", "seed": 1})
    assert expected == [("float32", (3, 5), (5, 1))]


def test_script_trees_compare_strides_and_integers_against_the_suites_kernel():
    ref = {"out": torch.randn(4, 3), "idx": torch.arange(4)}
    assert compare_tree({"out": ref["out"].clone(), "idx": ref["idx"].clone()}, ref, TOL) == ""
    moved = {"out": ref["out"].t().contiguous().t(), "idx": ref["idx"].clone()}
    assert "has strides" in compare_tree(moved, ref, TOL)
    assert "integer elements differ" in compare_tree({"out": ref["out"].clone(), "idx": ref["idx"] + 1}, ref, TOL)


# -- integers --------------------------------------------------------------------------------
def test_integer_outputs_are_exact_unless_the_task_declares_rounding_and_indices_always_are():
    ref = torch.arange(1000, dtype=torch.int64)
    one_off = ref.clone()
    one_off[-1] += 1
    for ties in (False, True):  # an index: no tolerance and no rounding rule lets it off by one
        problem = compare_outputs(one_off, ref, TOL, expected=[("int64", (1000,))], rounding_ties=ties)
        assert "1 of 1000 integer elements differ" in problem and "an index" in problem
    q, ref_q = one_off.to(torch.int8), ref.to(torch.int8)
    assert "no rounding rule declared" in compare_outputs(q, ref_q, TOL, expected=[("int8", (1000,))])
    assert compare_outputs(q, ref_q, TOL, expected=[("int8", (1000,))], rounding_ties=True) == ""
    half = ref_q.clone()
    half[::2] += 1  # truncation instead of rounding: half the elements, not ties
    assert "integer elements differ" in compare_outputs(half, ref_q, TOL, expected=[("int8", (1000,))],
                                                        rounding_ties=True)


def test_only_int8_quant_declares_a_rounding_rule_and_compare_case_applies_it():
    assert [n for n, t in TASKS.items() if t.rounding_ties] == ["int8_quant"]
    q = torch.tensor([3, 4, 5], dtype=torch.int8)
    ref = (torch.tensor([3, 4, 6], dtype=torch.int8), torch.ones(1, dtype=torch.float64))
    out = (q, torch.ones(1))
    expected = [("int8", (3,), (1,)), ("float32", (1,), (1,))]
    assert compare_case(TASKS["int8_quant"], out, ref, expected) == ""
    assert "integer elements differ" in compare_case(TASKS["row_argmax"], [q.long()], [ref[0].long()], None)


# -- input variants --------------------------------------------------------------------------
def test_variants_change_float_inputs_in_place_exactly_and_keep_their_layout():
    x = torch.randn(6, 10).t()  # a transposed view
    ids = torch.arange(6)
    before = x.clone()
    apply_variant((x, ids), "scaled")
    assert torch.equal(x, before * SCALE) and x.stride() == (1, 10) and torch.equal(ids, torch.arange(6))
    y = torch.randn(3, 7)
    before = y.clone()
    apply_variant((y,), "offset")
    assert torch.equal(y, before + OFFSET)
    z = torch.randn(4, 61)
    before = z.clone()
    apply_variant((z,), "extreme")
    changed = (z != before).flatten().nonzero().flatten().tolist()
    assert changed == [i for i in range(z.numel()) if i % OUTLIER_EVERY == 0]
    assert torch.equal(z.flatten()[changed], before.flatten()[changed] * OUTLIER)
    w, v = torch.ones(3), torch.ones(3)
    apply_variant((w, v), "scaled", varied=(1,))
    assert torch.equal(w, torch.ones(3)) and torch.equal(v, torch.full((3,), SCALE))


def test_a_case_draws_its_variant_and_keys_the_caches_by_it():
    task = TASKS["softmax"]
    case = {"shape": {"M": 4, "N": 16}, "dtype": "float32", "seed": 7}
    gen = lambda: torch.Generator().manual_seed(7)  # noqa: E731
    (usual,) = task.draw(case, torch.float32, gen())
    (offset,) = task.draw({**case, "variant": "offset"}, torch.float32, gen())
    assert torch.equal(offset, usual + OFFSET)
    assert task.case_key(case) != task.case_key({**case, "variant": "offset"})
    assert task.case_key({**case, "variant": "usual"}) == task.case_key(case)
    assert task.case_key({**case, "variant": "offset"})[-1] == 7  # the seed last: dropped for signatures
    assert "offset by 64" in describe_variant({**case, "variant": "offset"})
    with pytest.raises(ValueError, match="does not admit"):
        TASKS["attention"].draw({**case, "shape": {"B": 1, "H": 1, "S": 4, "D": 8}, "variant": "scaled"},
                                torch.float16, gen())
    with pytest.raises(ValueError, match="unknown input variant"):
        Task(**{**{f: getattr(task, f) for f in task.__dataclass_fields__}, "variants": ("shifted",)})


def test_untimed_cases_cycle_through_the_variants_and_the_timed_ones_keep_the_task_distribution():
    softmax = TASKS["softmax"]
    cases, _ = function_judge(softmax).cases()
    timed = [c for i, c in enumerate(cases) if c["split"] == "tuning" and i % 2 == 1]
    assert timed and all("variant" not in c for c in timed)
    untimed = [c for c in cases if c not in timed]
    assert {c["variant"] for c in untimed} == set(softmax.variants)
    one_seed = [{"split": "tuning"}, {"split": "tuning"}, {"split": "heldout"}, {"split": "heldout"}]
    assign_variants(one_seed, ("scaled", "offset"), 1)
    assert [c.get("variant") for c in one_seed] == [None, None, "scaled", "offset"]


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_builtin_reference_stays_finite_and_in_range_on_its_variants(name):
    task = TASKS[name]
    for variant in task.variants:
        for shape in task.interpreter_shapes.tuning:
            case = {"shape": shape, "dtype": task.dtypes[0], "seed": 3, "variant": variant}
            refs, expected = compute(task, case)
            for r, (dt, *_rest) in zip(refs, expected):
                if r.is_floating_point():
                    limit = torch.finfo(getattr(torch, dt)).max if getattr(torch, dt).is_floating_point else 2**63
                    assert bool(torch.isfinite(r).all()) and float(r.abs().max()) < limit, (variant, shape)


# -- held-out sizes --------------------------------------------------------------------------
@pytest.mark.parametrize("interpreter", [True, False])
def test_heldout_shapes_take_each_free_size_past_the_power_of_two_above_the_largest_listed(interpreter):
    for task in TASKS.values():
        ss = task.shape_set(interpreter)
        given = list(ss.tuning) + list(ss.heldout)
        limit = max(math.prod(_sizes(s).values()) for s in given)
        growth = 2.0
        free = {k for s in given for k in _sizes(s) if _free(k, given)}
        seen: set = set()
        for seed in range(60):
            drawn = task.draw_heldout(random.Random(seed), interpreter)
            beyond = set()
            for shape in drawn:
                assert math.prod(_sizes(shape).values()) <= growth * limit, (task.name, shape)
                for key, n in _sizes(shape).items():
                    values = [s[key] for s in given if key in _sizes(s)]
                    if n > max(values):
                        beyond.add(key)
                        ceiling = 1 << (max(values) - 1).bit_length()
                        assert n > ceiling and n % _step(values) == 0, (task.name, key, n)
                        assert _step(values) > 1 or n % 2 == 1, (task.name, key, n)
            if free:
                assert beyond, (task.name, drawn)  # every evaluation meets one size past the list
            seen |= beyond
        if len(ss.heldout) >= len(free) and task.name != "attention":
            assert seen == free, (task.name, seen, free)


def test_a_variant_whose_reference_is_not_finite_fails_saying_nothing_could_be_verified():
    ref = [torch.tensor([1.0, float("inf")], dtype=torch.float64)]
    out = [torch.tensor([1.0, float("inf")])]
    expected = [("float32", (2,), (1,))]
    problem = compare_case(TASKS["softmax"], out, ref, expected, {"variant": "scaled"})
    assert "not finite on the 'scaled' input variant" in problem and "nothing could be verified" in problem
    assert compare_case(TASKS["softmax"], out, ref, expected, {}) == ""  # the task's own: compared as ever
