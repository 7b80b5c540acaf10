"""The closed set of tensor steps a replay may run (fitness.clean.primitives): schemas, effects and implementations."""
import pytest
import torch

from fitness.clean.compiled import ReplayError
from fitness.clean.primitives import (
    _KINDS,
    ALLOC,
    COPY,
    DTYPES,
    ENUMS,
    FILL,
    PRIMITIVES,
    READ,
    VIEW,
    Device,
    check_args,
)


def _check(key: str, *args, **kwargs) -> None:
    check_args(key, PRIMITIVES[key], list(args), kwargs)


def _run(key: str, *args, **kwargs):
    _check(key, *args, **kwargs)  # as the replayer does: the schema first, then the engine's implementation
    return PRIMITIVES[key].impl("cpu", *args, **kwargs)


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


# -- the schemas ----------------------------------------------------------------------------------
def test_arguments_that_fit_the_schema_are_accepted_with_optional_ones_left_out_or_none():
    x = torch.zeros(2, 3)
    _check("view.default", x, [3, 2])
    _check("slice.Tensor", x)
    _check("slice.Tensor", x, 1, None, 2, None)
    _check("add.Tensor", x, x, alpha=2)
    _check("add.Tensor", x, 1.5)
    _check("empty.memory_format", [2, 3], dtype=torch.float16, layout=torch.strided, device=Device(),
           pin_memory=False, memory_format=torch.contiguous_format)
    _check("index.Tensor", x, [None, torch.tensor([0, 1])])
    _check("cat.default", [x, x])


@pytest.mark.parametrize("key, args, words", [
    ("view.default", [torch.zeros(2)], "view.default recorded with 1 arguments, the engine's primitive takes 2 to 2"),
    ("neg.default", [torch.zeros(2), 1], "neg.default recorded with 2 arguments, the engine's primitive takes 1 to 1"),
    ("slice.Tensor", [torch.zeros(2), 0, 0, 1, 1, 1], "recorded with 6 arguments, the engine's primitive takes 1 to 5"),
    ("view.default", [torch.zeros(2), (2,)], "view.default: argument 1 is a tuple, the engine's primitive takes ints"),
    ("view.default", [torch.zeros(2), [2.0]], "argument 1 is a list, the engine's primitive takes ints"),
    ("view.default", [[1.0, 2.0], [2]], "argument 0 is a list, the engine's primitive takes T"),
    ("squeeze.dim", [torch.zeros(2), True], "argument 1 is a bool, the engine's primitive takes int"),
    ("add.Tensor", [torch.zeros(2), "1"], "argument 1 is a str, the engine's primitive takes T|num"),
    ("slice.Tensor", [torch.zeros(2), 0, 1.0], "argument 2 is a float, the engine's primitive takes int?"),
    ("cat.default", [[]], "argument 0 is a list, the engine's primitive takes Ts"),
    ("index.Tensor", [torch.zeros(2), [None]], "argument 1 is a list, the engine's primitive takes Tidx"),
])
def test_arguments_that_do_not_fit_are_refused_naming_the_mismatch(key, args, words):
    with pytest.raises(ReplayError) as e:
        check_args(key, PRIMITIVES[key], args, {})
    assert words in str(e.value)


@pytest.mark.parametrize("key, kwargs, words", [
    ("neg.default", {"alpha": 2}, "neg.default: keyword 'alpha' (int) is not one"),
    ("add.Tensor", {"alpha": "2"}, "add.Tensor: keyword 'alpha' (str) is not one"),
    ("empty_like.default", {"dtype": "float32"}, "keyword 'dtype' (str) is not one"),  # a name, not a decoded dtype
    ("empty.memory_format", {"device": "cuda:1"}, "keyword 'device' (str) is not one"),
    ("empty.memory_format", {"layout": torch.sparse_coo}, "keyword 'layout' (layout) is not one"),
    ("clone.default", {"memory_format": "channels_last"}, "keyword 'memory_format' (str) is not one"),
    ("div.Tensor_mode", {"rounding_mode": "ceil"}, "keyword 'rounding_mode' (str) is not one"),
    ("gelu.default", {"approximate": "erf"}, "keyword 'approximate' (str) is not one"),
])
def test_keywords_the_primitive_does_not_take_or_of_the_wrong_kind_are_refused(key, kwargs, words):
    prim = PRIMITIVES[key]
    args = [[2]] if prim.args[0] == "ints" else [torch.zeros(2)] + [2] * (key in ("add.Tensor", "div.Tensor_mode"))
    check_args(key, prim, args, {})  # the arguments fit: the keyword is what is refused
    with pytest.raises(ReplayError) as e:
        check_args(key, prim, args, kwargs)
    assert words in str(e.value) and "the engine's primitive takes" in str(e.value)


def test_every_primitive_has_a_known_effect_and_only_known_argument_kinds():
    assert {p.effect for p in PRIMITIVES.values()} <= {VIEW, ALLOC, FILL, COPY, READ}
    for key, prim in PRIMITIVES.items():
        kinds = list(prim.args) + list(prim.kwargs.values())
        assert all(k.removesuffix("?") in _KINDS for k in kinds), key


def test_only_trailing_arguments_are_optional_as_the_argument_count_check_assumes():
    for key, prim in PRIMITIVES.items():
        optional = [k.endswith("?") for k in prim.args]
        assert optional == sorted(optional), key  # no required argument after an optional one


def test_exactly_the_ops_named_with_a_trailing_underscore_are_marked_in_place():
    for key, prim in PRIMITIVES.items():
        assert prim.inplace == key.split(".")[0].endswith("_"), key


def test_dtype_and_enum_names_are_torch_s_own():
    assert all(str(d) == f"torch.{name}" for name, d in DTYPES.items())
    assert DTYPES["float32"] is torch.float32 and DTYPES["bool"] is torch.bool
    assert all(v is getattr(torch, k) for k, v in ENUMS.items())


# -- the implementations against torch --------------------------------------------------------------
def test_arithmetic_and_reductions_give_what_torch_gives():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(4, 6, generator=g), torch.randn(4, 6, generator=g)
    assert torch.equal(_run("add.Tensor", x, y, alpha=3), torch.add(x, y, alpha=3))
    assert torch.equal(_run("sub.Tensor", x, 2.0), x - 2.0)
    assert torch.equal(_run("div.Tensor_mode", x, y, rounding_mode="floor"), torch.div(x, y, rounding_mode="floor"))
    assert torch.equal(_run("sum.dim_IntList", x, [1], True), x.sum(1, keepdim=True))
    assert torch.equal(_run("sum.dim_IntList", x, None), x.sum())
    assert torch.equal(_run("amax.default", x, [], True), x.amax(dim=(0, 1), keepdim=True))
    assert torch.equal(_run("amax.default", x, [0]), x.amax(0))
    assert torch.equal(_run("mean.dim", x, [-1], False, dtype=torch.float64), x.mean(-1, dtype=torch.float64))
    assert torch.equal(_run("var.correction", x, [1], correction=0, keepdim=True), x.var(1, correction=0, keepdim=True))
    assert torch.equal(_run("linalg_vector_norm.default", x, 2, [1]), torch.linalg.vector_norm(x, 2, 1))
    assert torch.equal(_run("addmm.default", y[:, :4], x, y.T, beta=0.5), torch.addmm(y[:, :4], x, y.T, beta=0.5))


def test_indexing_sorting_and_padding_give_what_torch_gives():
    x = torch.tensor([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]])
    values, indices = _run("topk.default", x, 2, None, None, None)
    assert torch.equal(values, torch.tensor([[3.0, 2.0], [5.0, 4.0]])) and torch.equal(indices, x.topk(2).indices)
    values, _ = _run("topk.default", x, 1, 1, False)
    assert torch.equal(values, torch.tensor([[1.0], [0.0]]))  # largest=False: the smallest
    assert torch.equal(_run("sort.default", x, None, True)[0], x.sort(-1, descending=True).values)
    assert torch.equal(_run("max.dim", x, 0, True)[1], torch.tensor([[0, 1, 1]]))
    assert torch.equal(_run("constant_pad_nd.default", x, [1, 0], None), torch.nn.functional.pad(x, [1, 0]))
    assert torch.equal(_run("index.Tensor", x, [None, torch.tensor([2, 0])]), x[:, [2, 0]])
    assert torch.equal(_run("index.Tensor", x, [x[:, 0] > 1]), x[x[:, 0] > 1])

    assert torch.equal(_run("slice.Tensor", x, None, None, 2), x[:2])  # dim None: 0, step None: 1
    assert torch.equal(_run("slice.Tensor", x, -1, 0, None, 2), x[:, ::2])
    assert torch.equal(_run("gelu.default", x, approximate="tanh"), torch.nn.functional.gelu(x, approximate="tanh"))


def test_an_index_list_with_a_dim_taken_whole_indexes_as_aten_does():
    t = torch.arange(24.0).reshape(2, 3, 4)
    for idx in ([None, torch.tensor([2, 0])], [torch.tensor([1]), None, torch.tensor([3, 0])],
                [None, None, torch.tensor([[1, 2]])], [torch.tensor([1, 0])]):
        want = torch.ops.aten.index.Tensor(t, idx)  # what the candidate's process ran
        got = _run("index.Tensor", t, idx)
        assert got.shape == want.shape and torch.equal(got, want), idx


def test_factories_make_on_the_replay_s_device_whatever_device_or_pinning_was_recorded():
    out = _run("full.default", [2, 3], 7, dtype=torch.float16, device=Device(), pin_memory=True, layout=None)
    assert out.dtype == torch.float16 and out.device.type == "cpu" and not out.is_pinned()
    assert torch.equal(out, torch.full((2, 3), 7, dtype=torch.float16))
    ints = _run("arange.start_step", 1, 10, 3, dtype=torch.int32)
    assert torch.equal(ints, torch.arange(1, 10, 3, dtype=torch.int32))
    made = _run("empty_strided.default", [2, 3], [1, 2], device=Device())
    assert made.shape == (2, 3) and made.stride() == (1, 2)


def test_a_conversion_copies_into_new_memory_even_to_the_same_dtype():
    x = torch.arange(6.0)
    same = _run("_to_copy.default", x, dtype=torch.float32)
    assert torch.equal(same, x) and _storage(same) != _storage(x)
    assert _run("_to_copy.default", x, dtype=torch.int64).dtype == torch.int64


def test_in_place_primitives_write_their_first_argument_and_return_it():
    cases = [
        ("add_.Tensor", lambda t: (t, torch.ones(2, 3)), {"alpha": 2}, 3.0),
        ("sub_.Tensor", lambda t: (t, 0.5), {}, 0.5),
        ("mul_.Tensor", lambda t: (t, 3.0), {}, 3.0),
        ("div_.Tensor", lambda t: (t, torch.full((2, 3), 4.0)), {}, 0.25),
        ("fill_.Scalar", lambda t: (t, 4.0), {}, 4.0),
        ("zero_.default", lambda t: (t,), {}, 0.0),
        ("copy_.default", lambda t: (t, torch.full((2, 3), 5.0)), {}, 5.0),
        ("masked_fill_.Scalar", lambda t: (t, torch.ones(2, 3, dtype=torch.bool), -1.0), {}, -1.0),
        ("clamp_.default", lambda t: (t, None, 0.5), {}, 0.5),
    ]
    for key, args, kwargs, value in cases:
        t = torch.ones(2, 3)
        out = _run(key, *args(t), **kwargs)
        assert out is t and torch.equal(t, torch.full((2, 3), value)), key


def test_reading_a_scalar_gives_the_host_its_number():
    assert PRIMITIVES["_local_scalar_dense.default"].effect == READ
    assert _run("_local_scalar_dense.default", torch.tensor([2.5])) == 2.5


# -- views --------------------------------------------------------------------------------------------
VIEWS = {
    "view.default": lambda t: (t, [6, 4]),
    "_unsafe_view.default": lambda t: (t, [24]),
    "as_strided.default": lambda t: (t, [2, 2], [6, 1], 3),
    "expand.default": lambda t: (t[:1], [5, 6]),
    "squeeze.default": lambda t: (t[:1],),
    "squeeze.dim": lambda t: (t[:1], 0),
    "squeeze.dims": lambda t: (t[:1], [0]),
    "unsqueeze.default": lambda t: (t, 1),
    "t.default": lambda t: (t,),
    "transpose.int": lambda t: (t, 0, 1),
    "permute.default": lambda t: (t, [1, 0]),
    "select.int": lambda t: (t, 1, 2),
    "slice.Tensor": lambda t: (t, 1, 2, 5, 2),
    "narrow.default": lambda t: (t, 0, 1, 2),
    "alias.default": lambda t: (t,),
    "detach.default": lambda t: (t,),
    "split.Tensor": lambda t: (t, 3, 1),
    "split_with_sizes.default": lambda t: (t, [1, 3]),
    "unbind.int": lambda t: (t, None),
    "lift_fresh.default": lambda t: (t,),
}
TORCH_VIEWS = {
    "view.default": lambda t: t.view(6, 4), "_unsafe_view.default": lambda t: t.reshape(24),
    "as_strided.default": lambda t: t.as_strided((2, 2), (6, 1), 3), "expand.default": lambda t: t[:1].expand(5, 6),
    "squeeze.default": lambda t: t[0], "squeeze.dim": lambda t: t[0], "squeeze.dims": lambda t: t[0],
    "unsqueeze.default": lambda t: t[:, None], "t.default": lambda t: t.T, "transpose.int": lambda t: t.T,
    "permute.default": lambda t: t.T, "select.int": lambda t: t[:, 2], "slice.Tensor": lambda t: t[:, 2:5:2],
    "narrow.default": lambda t: t[1:3], "alias.default": lambda t: t, "detach.default": lambda t: t,
    "split.Tensor": lambda t: list(t.split(3, 1)), "split_with_sizes.default": lambda t: list(t.split([1, 3])),
    "unbind.int": lambda t: list(t), "lift_fresh.default": lambda t: t,
}


def test_every_view_primitive_is_covered_here():
    assert set(VIEWS) == set(TORCH_VIEWS) == {k for k, p in PRIMITIVES.items() if p.effect == VIEW}


@pytest.mark.parametrize("key", sorted(VIEWS))
def test_a_view_primitive_gives_torch_s_view_in_its_source_s_storage(key):
    t = torch.arange(24.0).reshape(4, 6)
    out = _run(key, *VIEWS[key](t))
    want = TORCH_VIEWS[key](t)
    outs, wants = (out, want) if isinstance(out, list) else ([out], [want])
    assert len(outs) == len(wants) > 0
    for o, w in zip(outs, wants):
        assert o.shape == w.shape and torch.equal(o, w), key
        assert _storage(o) == _storage(t), key
