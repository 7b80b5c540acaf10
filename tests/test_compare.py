import torch

from fitness.common.compare import compare_outputs

TOL = {"float32": (1e-6, 1e-5), "float16": (1e-3, 1e-3), "int8": (1, 0)}


def test_exact_match_passes():
    x = torch.randn(10, 10)
    assert compare_outputs(x, x.double(), TOL, expected=[("float32", (10, 10))]) == ""


def test_every_element_is_checked():
    ref = torch.randn(1000).double()
    out = ref.float().clone()
    out[777] += 1.0
    msg = compare_outputs(out, ref, TOL, expected=[("float32", (1000,))])
    assert "1 of 1000" in msg and "(777,)" in msg


def test_nan_never_passes_even_against_nan():
    ref = torch.tensor([1.0, float("nan")], dtype=torch.float64)
    out = torch.tensor([1.0, float("nan")])
    assert "outside tolerance" in compare_outputs(out, ref, TOL, expected=[("float32", (2,))])


def test_matching_infinities_pass():
    ref = torch.tensor([float("inf"), -float("inf")], dtype=torch.float64)
    assert compare_outputs(ref.float(), ref, TOL, expected=[("float32", (2,))]) == ""
    assert compare_outputs(-ref.float(), ref, TOL, expected=[("float32", (2,))]) != ""


def test_dtype_shape_and_count_are_enforced():
    ref = torch.randn(4, 4).double()
    assert "dtype float16" in compare_outputs(ref.half(), ref, TOL, expected=[("float32", (4, 4))])
    assert "shape" in compare_outputs(ref.float().t().reshape(2, 8), ref, TOL, expected=[("float32", (4, 4))])
    assert "2 output" in compare_outputs((ref.float(), ref.float()), ref, TOL, expected=[("float32", (4, 4))])


def test_lower_precision_fails_float32_tolerance():
    ref = torch.softmax(torch.randn(64, 256).double() * 3, -1)
    low = ref.half().float()
    assert "outside tolerance" in compare_outputs(low, ref, TOL, expected=[("float32", (64, 256))])


def test_integer_outputs_are_exact_whatever_the_tolerance_says():
    q = torch.tensor([1, 2, 3], dtype=torch.int8)
    ref_q = torch.tensor([1, 3, 3], dtype=torch.int8)
    assert "integer elements differ" in compare_outputs((q,), (ref_q,), TOL, expected=[("int8", (3,))])
    # a declared rounding rule admits one tie rounded the other way, not more
    assert compare_outputs((q,), (ref_q,), TOL, expected=[("int8", (3,))], rounding_ties=True) == ""
    ref_far = torch.tensor([1, 9, 3], dtype=torch.int8)
    assert "integer elements differ" in compare_outputs((q,), (ref_far,), TOL, expected=[("int8", (3,))],
                                                        rounding_ties=True)


def test_tree_compare_walks_every_leaf_and_matches_the_references_nans():
    import torch

    from fitness.common.compare import compare_outputs, compare_tree, is_weak

    tol = {"float32": (1e-3, 1e-3)}
    ref = {"a": [torch.tensor([1.0, float("nan")]), {"n": 3, "s": 2.5}], "b": (True, "x")}
    same = {"a": [torch.tensor([1.0, float("nan")]), {"n": 3, "s": 2.5}], "b": (True, "x")}
    assert compare_tree(same, ref, tol) == ""
    bad = {"a": [torch.tensor([1.0, 2.0]), {"n": 3, "s": 2.5}], "b": (True, "x")}
    assert "result['a'][0]" in compare_tree(bad, ref, tol)
    deep = {"a": [torch.tensor([1.0, float("nan")]), {"n": 4, "s": 2.5}], "b": (True, "x")}
    assert "result['a'][1]['n']: got 4, expected 3" in compare_tree(deep, ref, tol)
    assert "result['b'][0]" in compare_tree({**same, "b": (False, "x")}, ref, tol)
    assert "keys" in compare_tree({"a": same["a"]}, ref, tol)
    # against a float64 oracle (builtin tasks) a NaN never passes, even where the reference has one
    assert compare_outputs([torch.tensor([float("nan")])], [torch.tensor([float("nan")])], tol)
    assert is_weak({"shape": (3, 4), "ok": True, "v": torch.tensor(1.0)})
    assert not is_weak({"out": torch.ones(2)})


def test_on_device_copies_every_tensor_of_a_tree_and_keeps_its_shape():
    from fitness.common.compare import on_device
    a, b = torch.ones(2), torch.zeros(3)
    tree = [{"outputs": [a, (b, 5)], "torch_elements": 7}, None]
    moved = on_device(tree, "meta")
    assert moved[0]["outputs"][0].device.type == "meta" and moved[0]["outputs"][1][0].device.type == "meta"
    assert isinstance(moved[0]["outputs"][1], tuple) and moved[0]["outputs"][1][1] == 5
    assert moved[0]["torch_elements"] == 7 and moved[1] is None and a.device.type == "cpu"


def test_a_comparison_the_device_has_no_room_for_is_made_on_the_host_with_the_same_answer():
    from fitness.common.compare import compare_tree, compare_where_room

    ref = {"y": torch.randn(64), "n": 3}
    bad = {"y": ref["y"].clone(), "n": 3}
    bad["y"][5] += 1.0
    seen: list[str] = []

    def compare(out: dict, expected: dict) -> str:  # the device ("meta" here) is full
        seen.append(out["y"].device.type)
        if out["y"].device.type != "cpu":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 196.00 MiB.")
        return compare_tree(out, expected, TOL)

    assert compare_where_room("meta", compare, bad, ref) == compare_tree(bad, ref, TOL) != ""
    good = {"y": ref["y"].clone(), "n": 3}
    assert compare_where_room("meta", compare, good, ref) == ""
    assert seen == ["meta", "cpu", "meta", "cpu"]



def test_a_float16_output_whose_reference_is_beyond_float16_is_right_as_the_infinity_float16_rounds_it_to():
    ref = torch.tensor([1.0, 131304.0, -70000.0], dtype=torch.float64)  # a matmul on inputs offset +64
    want = [("float16", (3,))]
    assert compare_outputs(ref.half(), ref, TOL, expected=want) == ""  # 1, inf, -inf: what float16 holds
    wrong = ref.half().clone()
    wrong[1] = 65504.0  # a finite value where the sum overflows: not what float16 gives
    assert "1 of 3 elements" in compare_outputs(wrong, ref, TOL, expected=want)
    flipped = ref.half().clone()
    flipped[2] = float("inf")
    assert "1 of 3 elements" in compare_outputs(flipped, ref, TOL, expected=want)
    # float32 holds 131304: there the exact value is still required
    assert compare_outputs(ref.float(), ref, {"float32": (1e-6, 1e-5)}, expected=[("float32", (3,))]) == ""


def test_an_absolute_metric_bound_grows_with_a_variants_magnitude_as_atol_does():
    ref = torch.randn(4096, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    tol = {"float32": {"rmse": 0.1}}
    F32 = [("float32", (4096,))]
    noisy = (ref + 0.05 * torch.randn(4096, generator=torch.Generator().manual_seed(1), dtype=torch.float64)).float()
    assert compare_outputs(noisy, ref, tol, expected=F32) == ""
    scaled_ref, scaled_out = ref * 16, noisy * 16  # the same kernel on inputs scaled x16: rmse 0.8
    assert "rmse" in compare_outputs(scaled_out, scaled_ref, tol, expected=F32)  # the plain case's bound, unscaled
    assert compare_outputs(scaled_out, scaled_ref, tol, F32, slack=4.0, scaled=True) == ""  # a variant's
    assert "rmse" in compare_outputs((scaled_ref + 1000).float(), scaled_ref, tol, F32, slack=4.0,
                                   scaled=True)
    assert "rel_rmse" in compare_outputs(scaled_out * 2, scaled_ref, {"float32": {"rel_rmse": 0.1}}, F32,
                                         slack=4.0, scaled=True)  # a relative bound is not scaled
