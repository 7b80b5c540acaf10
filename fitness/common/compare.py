"""Element-wise comparison of outputs against a reference, with the task's tolerance.

Every element is checked (no sampling, no silently skipped containers), NaN never passes, and
the output's dtype and shape must be what the reference gives for the task's inputs.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

from fitness.common.metric_tolerance import metric_mismatch


def as_list(x: object) -> list:
    return list(x) if isinstance(x, (tuple, list)) else [x]


def on_device(tree: Any, device: str | torch.device) -> Any:
    """The same tree of dicts, lists and tuples with every tensor copied to `device`."""
    if isinstance(tree, torch.Tensor):
        return tree.to(device)
    if isinstance(tree, dict):
        return {k: on_device(v, device) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(on_device(v, device) for v in tree)
    return tree


def on_device_if_room(tree: Any, device: str | torch.device) -> Any:
    """on_device, or the tree as it was where the device has no room for it (compared there)."""
    try:
        return on_device(tree, device)
    except torch.cuda.OutOfMemoryError:
        return tree


# one comparison at a time on the engine's GPU: float64 copies of a 256 MiB fp16 output take GiBs,
# beside the children's memory, and on the GPU a comparison takes milliseconds
_ON_GPU = threading.Lock()
ENGINE_GPU_CACHE = 1 << 30  # what the engine's allocator may keep between comparisons


def compare_where_room(device: str | torch.device, compare: Callable[[Any, Any], str], out: Any, ref: Any,
                       cache_limit: int | None = ENGINE_GPU_CACHE) -> str:
    """compare(out, ref) with both trees on `device`, one comparison at a time there, or on the
    host where the device has no room. H100, a 14-task TritonBench search: a comparison's float64
    temporaries met the children's 70 GiB and the engine's out-of-memory error ended the search.
    `cache_limit`: what the process's allocator may keep afterwards; None for a reference child,
    whose cached references are its purpose (emptied each time: 17.5 ms a comparison, not 2)."""
    if str(device) != "cpu":
        with _ON_GPU:
            try:
                return compare(on_device(out, device), on_device(ref, device))
            except torch.cuda.OutOfMemoryError:
                pass
            finally:
                if cache_limit is not None and torch.cuda.memory_reserved() > cache_limit:
                    torch.cuda.empty_cache()  # the children need the room more than the engine
    return compare(on_device(out, "cpu"), on_device(ref, "cpu"))


def compare_tree_on(device: str, out: Any, ref: Any, tolerance: dict, slack: float = 1.0, path: str = "result") -> str:
    """compare_tree on `device`, or on the host where the device has no room. H100 TritonBench: the
    engine's float64 comparisons on the CPU held each candidate's clean child 4.5 s after its turn."""
    return compare_where_room(device, lambda o, r: compare_tree(o, r, tolerance, slack, path), out, ref)


def dtype_name(t: torch.Tensor | torch.dtype) -> str:
    d = t.dtype if isinstance(t, torch.Tensor) else t
    return str(d).removeprefix("torch.")


# an output's expected (dtype name, shape) or (dtype name, shape, strides): the strides of the
# reference run on the task's inputs in their own dtype and layout (fitness.common.reference.on_meta)
Expected = tuple


def compare_outputs(outs: Any, refs: Any, tolerance: dict, expected: list[Expected] | None = None,
                    slack: float = 1.0, scaled: bool = False, rounding_ties: bool = False) -> str:
    """'' when every output matches, else a one-line description of the first mismatch.

    `expected`: [(dtype name, shape[, strides])] the outputs must have; defaults to the refs'
    own. `rounding_ties`: the task declares a rounding rule (integer outputs off by one on a .5
    boundary, never index outputs).
    """
    outs, refs = as_list(outs), as_list(refs)
    if len(outs) != len(refs):
        return f"returned {len(outs)} output(s), expected {len(refs)}"
    expected = expected or [(dtype_name(r), tuple(r.shape), tuple(r.stride())) for r in refs]
    for i, (o, r, want) in enumerate(zip(outs, refs, expected)):
        problem = _form_mismatch(o, *want)
        if problem:
            return f"output {i} {problem}"
        dt = want[0]
        if not o.is_floating_point() and not o.is_complex():
            # exact whatever the tolerance says: an index off by one is a wrong index
            problem = _integer_mismatch(o, r.to(o.device), ties=rounding_ties and dt not in INDEX_DTYPES)
        elif dt not in tolerance:
            return f"task has no tolerance for dtype {dt}"
        elif isinstance(tolerance[dt], dict):  # whole-tensor metrics (fitness.common.metric_tolerance)
            r = held_as(r, o.dtype)
            problem = metric_mismatch(o, r, tolerance[dt], slack * _magnitude(r) if scaled else 1.0)
        else:
            problem = _float_mismatch(o, r, tolerance[dt], slack, scaled)
        if problem:
            return f"output {i} ({dt}): {problem}"
    return ""


def _form_mismatch(o: Any, dt: str, shape: tuple, strides: tuple | None = None) -> str:
    """What is wrong with the output's type, dtype, shape or layout ('' if nothing)."""
    if not isinstance(o, torch.Tensor):
        return f"is a {type(o).__name__}, not a tensor"
    if dtype_name(o) != dt:
        return f"has dtype {dtype_name(o)}, expected {dt}"
    if tuple(o.shape) != tuple(shape):
        return f"has shape {tuple(o.shape)}, expected {tuple(shape)}"
    if strides is not None and not same_layout(o, tuple(strides)):
        return (f"has strides {tuple(o.stride())}, expected {tuple(strides)} (the reference's layout"
                f"{'' if _contiguous(o.shape, tuple(strides)) else ', or row-major'}): the right values in "
                f"another memory layout are a different tensor to whoever reads it")
    return ""


def same_layout(o: torch.Tensor, strides: tuple) -> bool:
    """Whether `o` is laid out as the reference: the same strides on every dimension of more than
    one element (a stride over one element is never used). Where the reference's own layout is
    not row-major (torch follows its inputs' layout), row-major is accepted as well."""
    if len(strides) != o.dim():
        return False
    if all(n <= 1 or a == b for n, a, b in zip(o.shape, o.stride(), strides)):
        return True
    return not _contiguous(o.shape, strides) and _contiguous(o.shape, tuple(o.stride()))


def _contiguous(shape: torch.Size | tuple, strides: tuple) -> bool:
    expected = 1
    for n, st in reversed(list(zip(shape, strides))):
        if n > 1 and st != expected:
            return False
        expected *= n
    return True


def _float_mismatch(o: torch.Tensor, r: torch.Tensor, tol: tuple, slack: float, scaled: bool) -> str:
    atol, rtol = (v * slack for v in tol)
    # on the outputs' own device: the timing worker compares on the GPU, the engine on the CPU
    o64 = o.detach().to(torch.float64)
    r64 = held_as(r.detach().to(o64.device, torch.float64), o.dtype)
    if scaled:
        # atol relative to the tensor's magnitude: two kernels that sum in different orders
        # differ by a few ulps of the partial sums, not of each (possibly cancelled) element
        atol *= _magnitude(r64)
    return _mismatch(o64, r64, atol, rtol, nan_equal=scaled)


def _magnitude(r: torch.Tensor) -> float:
    """max(1, the largest finite |element|): what a variant's tolerance grows with."""
    finite = r[torch.isfinite(r)] if r.numel() else r
    return max(1.0, float(finite.abs().max())) if finite.numel() else 1.0


def held_as(r64: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The float64 reference as the output's dtype can hold it: an element beyond the dtype's
    range is the infinity the dtype rounds it to, which a right kernel returns there (issue 49:
    a float16 matmul on inputs offset +64 sums to 131304, inf in float16, and the exact 131304
    failed every float16 kernel). Elsewhere the reference keeps its float64 precision."""
    if not dtype.is_floating_point or dtype == torch.float64 or not r64.numel():
        return r64
    rounded = r64.to(dtype)
    over = torch.isinf(rounded) & torch.isfinite(r64)
    return torch.where(over, rounded.to(r64.dtype), r64) if bool(over.any()) else r64


# integer outputs are exact. Where a task declares a rounding rule, the float64 reference and a
# float32 kernel may round a value that sits on a .5 boundary differently: off by one on at most
# this share of elements (random data puts about 1e-5 of the elements there; truncating instead
# of rounding, 50%)
INTEGER_TIE_SHARE = 1e-4
INDEX_DTYPES = ("int32", "int64")  # what an index comes in: exact, whatever the task declares


def _integer_mismatch(o: torch.Tensor, r: torch.Tensor, ties: bool = False) -> str:
    diff = (o.to(torch.int64) - r.to(torch.int64)).abs()
    n_bad = int((diff != 0).sum())
    allowed = max(1, int(INTEGER_TIE_SHARE * o.numel())) if ties else 0
    if n_bad == 0 or (int(diff.max()) <= 1 and n_bad <= allowed):
        return ""
    worst = int(torch.argmax(diff))
    rule = (f"off by one allowed on at most {INTEGER_TIE_SHARE:.0e} of them, for the task's rounding ties"
            if ties else "no rounding rule declared" if dtype_name(o) not in INDEX_DTYPES else "an index")
    return (f"{n_bad} of {o.numel()} integer elements differ (exact required; {rule}); worst: got "
            f"{o.flatten()[worst].item()}, expected {r.flatten()[worst].item()}")


def _mismatch(o: torch.Tensor, r: torch.Tensor, atol: float, rtol: float, nan_equal: bool = False) -> str:
    """`nan_equal`: a NaN matches a NaN. Only where the reference is a suite's kernel (script
    tasks): some of those return NaN by design (fully masked rows), and a candidate must then do
    the same. Against a float64 oracle, NaN never passes."""
    if o.numel() == 0:
        return ""
    err = (o - r).abs_()
    bound = r.abs().mul_(rtol).add_(atol)
    # NaN compares False, and an infinite reference gives an infinite bound that must not count
    bad = (err <= bound).logical_not_().logical_or_(torch.isinf(r))
    del bound
    if not bool(bad.any()):
        return ""
    same_inf = torch.isinf(o) & torch.isinf(r) & (torch.sign(o) == torch.sign(r))
    bad &= ~same_inf
    if nan_equal:
        bad &= ~(torch.isnan(o) & torch.isnan(r))
    n_bad = int(bad.sum())
    if not n_bad:
        return ""
    err = torch.where(torch.isnan(err), torch.full_like(err, float("inf")), err)
    err = torch.where(same_inf, torch.zeros_like(err), err)
    worst = int(torch.argmax(err))
    idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), o.shape))
    o, r = o.cpu(), r.cpu()
    return (f"{n_bad} of {o.numel()} elements outside tolerance (atol {atol:g}, rtol {rtol:g}); "
            f"worst at {idx}: got {o.flatten()[worst].item():.6g}, expected {r.flatten()[worst].item():.6g}")


def compare_tree(out: Any, ref: Any, tolerance: dict, slack: float = 1.0, path: str = "result") -> str:
    """Like compare_outputs for whatever a test script returns: dicts, lists and tuples are walked
    to every leaf (none is skipped), tensors compared element-wise with a magnitude-scaled atol,
    numbers within the float32 tolerance, anything else by equality."""
    if isinstance(ref, torch.Tensor):
        if type(out) is not torch.Tensor:
            return f"{path}: got a {type(out).__name__}, expected a tensor"
        problem = compare_outputs([out], [ref], tolerance, slack=slack, scaled=True)
        return f"{path}: {problem.removeprefix('output 0 ')}" if problem else ""
    if isinstance(ref, dict):
        if not isinstance(out, dict):
            return f"{path}: got a {type(out).__name__}, expected a dict"
        if set(out) != set(ref):
            return f"{path}: keys {sorted(map(str, out))} differ from the reference's {sorted(map(str, ref))}"
        for k in ref:
            problem = compare_tree(out[k], ref[k], tolerance, slack, f"{path}[{k!r}]")
            if problem:
                return problem
        return ""
    if isinstance(ref, (list, tuple)):
        if not isinstance(out, (list, tuple)) or len(out) != len(ref):
            return f"{path}: got {_describe(out)}, expected a sequence of {len(ref)}"
        for i, (o, r) in enumerate(zip(out, ref)):
            problem = compare_tree(o, r, tolerance, slack, f"{path}[{i}]")
            if problem:
                return problem
        return ""
    if isinstance(ref, float) and not isinstance(out, bool) and isinstance(out, (int, float)):
        atol, rtol = (v * slack for v in tolerance.get("float32", (1e-5, 1e-5)))
        if out == ref or abs(out - ref) <= atol * max(1.0, abs(ref)) + rtol * abs(ref) or (out != out and ref != ref):
            return ""
        return f"{path}: got {out!r}, expected {ref!r}"
    if type(out) is not type(ref) or out != ref:
        return f"{path}: got {_describe(out)}, expected {_describe(ref)}"
    return ""


def _describe(x: object) -> str:
    text = repr(x) if not isinstance(x, torch.Tensor) else f"a tensor of shape {tuple(x.shape)}"
    return text if len(text) <= 60 else text[:57] + "..."


def is_weak(tree: Any) -> bool:
    """True when no leaf is a tensor of more than one element: only shapes, flags or scalars,
    which a wrong kernel can reproduce."""
    if isinstance(tree, torch.Tensor):
        return tree.numel() <= 1
    if isinstance(tree, dict):
        return all(is_weak(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return all(is_weak(v) for v in tree)
    return True


def count_elements(tree: Any) -> int:
    if isinstance(tree, torch.Tensor):
        return tree.numel()
    if isinstance(tree, dict):
        return sum(count_elements(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return sum(count_elements(v) for v in tree)
    return 0
