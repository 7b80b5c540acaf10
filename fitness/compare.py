"""Element-wise comparison of outputs against a reference, with the task's tolerance.

Every element is checked (no sampling, no silently skipped containers), NaN never passes, and
the output's dtype and shape must be what the reference gives for the task's inputs.
"""
from __future__ import annotations

import torch


def as_list(x) -> list:
    return list(x) if isinstance(x, (tuple, list)) else [x]


def dtype_name(t: torch.Tensor | torch.dtype) -> str:
    d = t.dtype if isinstance(t, torch.Tensor) else t
    return str(d).removeprefix("torch.")


def compare_outputs(outs, refs, tolerance: dict, expected=None, slack: float = 1.0) -> str:
    """'' when every output matches, else a one-line description of the first mismatch.

    `expected`: [(dtype name, shape)] the outputs must have; defaults to the refs' own.
    """
    outs, refs = as_list(outs), as_list(refs)
    if len(outs) != len(refs):
        return f"returned {len(outs)} output(s), expected {len(refs)}"
    expected = expected or [(dtype_name(r), tuple(r.shape)) for r in refs]
    for i, (o, r, (dt, shape)) in enumerate(zip(outs, refs, expected)):
        if not isinstance(o, torch.Tensor):
            return f"output {i} is a {type(o).__name__}, not a tensor"
        if dtype_name(o) != dt:
            return f"output {i} has dtype {dtype_name(o)}, expected {dt}"
        if tuple(o.shape) != tuple(shape):
            return f"output {i} has shape {tuple(o.shape)}, expected {tuple(shape)}"
        if dt not in tolerance:
            return f"task has no tolerance for dtype {dt}"
        atol, rtol = (v * slack for v in tolerance[dt])
        # on the outputs' own device: the timing worker compares on the GPU, the engine on the CPU
        o64 = o.detach().to(torch.float64)
        problem = _mismatch(o64, r.detach().to(o64.device, torch.float64), atol, rtol)
        if problem:
            return f"output {i} ({dt}): {problem}"
    return ""


def _mismatch(o: torch.Tensor, r: torch.Tensor, atol: float, rtol: float) -> str:
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
