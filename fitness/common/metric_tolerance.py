"""Whole-tensor metrics as a tolerance kind (issue 41): a quantization kernel is judged by how
close its whole output is to the reference (cosine similarity, relative L1, RMSE), not element
by element, where a few elements a rounding step away are expected.

A task states them in TOLERANCE beside, or instead of, element-wise (atol, rtol) pairs:
`{"cosine": 0.999}` for every output, or `{"float16": {"rel_l1": 0.02}}` for one dtype's.
Each bound must hold; a NaN or infinity where the reference is finite fails (a metric would
otherwise average it away or be NaN itself), and a cosine bound also bounds the ratio of the
norms (cosine alone would pass any multiple of the reference).
"""
from __future__ import annotations

import math
from collections.abc import Callable

import torch

# name -> (what it computes, whether larger is better); one-line descriptions for messages
METRICS: dict[str, tuple[Callable[[torch.Tensor, torch.Tensor], float], bool]] = {
    "cosine": (lambda o, r: _cosine(o, r), True),  # cosine similarity of the flattened tensors, >= bound
    "rel_l1": (lambda o, r: float((o - r).abs().sum() / r.abs().sum().clamp_min(1e-30)), False),  # <= bound
    "rmse": (lambda o, r: float((o - r).pow(2).mean().sqrt()), False),  # root-mean-square error, <= bound
    "rel_rmse": (lambda o, r: float((o - r).pow(2).mean().sqrt() / r.pow(2).mean().sqrt().clamp_min(1e-30)),
                 False),  # RMSE over the reference's RMS, <= bound
    "max_abs": (lambda o, r: float((o - r).abs().max()), False),  # the largest element error, <= bound
}
# bounds in the outputs' own units: on an input variant they grow with the outputs' magnitude, as
# an element-wise atol does (fitness.common.compare: a bound stated for unit data, `rmse <= 0.1`,
# judged unscaled on inputs scaled x16 or offset +64 failed honest kernels, issue 49)
ABSOLUTE = frozenset({"rmse", "max_abs"})


def _cosine(o: torch.Tensor, r: torch.Tensor) -> float:
    no, nr = float(o.norm()), float(r.norm())
    if no == 0.0 and nr == 0.0:
        return 1.0
    return float((o * r).sum()) / max(no * nr, 1e-300)


def _scale_mismatch(o: torch.Tensor, r: torch.Tensor, bound: float) -> str:
    """Cosine similarity ignores scale (2 * ref has cosine 1): the norms must agree as closely as
    the bound's angle allows (a relative error of about sqrt(2 (1 - bound)))."""
    no, nr = float(o.norm()), float(r.norm())
    allowed = math.sqrt(2 * (1 - bound))
    if nr == 0.0:
        return "" if no == 0.0 else f"the output's norm is {no:.6g} where the reference's is 0"
    ratio = no / nr
    if abs(ratio - 1) > allowed:
        return (f"the output's norm is {ratio:.6g} times the reference's; a cosine bound of {bound:g} allows "
                f"{1 - allowed:.6g} to {1 + allowed:.6g} (cosine alone ignores scale)")
    return ""


def parse_metrics(given: object, where: str) -> dict[str, float]:
    """{metric: bound} checked: known names, finite numbers; a ValueError saying what is wrong."""
    if not isinstance(given, dict) or not given:
        raise ValueError(f"{where} must be a dict {{metric: bound}} with metrics from {', '.join(METRICS)}")
    out = {}
    for name, bound in given.items():
        if name not in METRICS:
            raise ValueError(f"{where}: unknown metric {name!r} (known: {', '.join(METRICS)})")
        if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not math.isfinite(bound):
            raise ValueError(f"{where}[{name!r}] must be a finite number, not {bound!r}")
        if name == "cosine" and not 0.0 < bound <= 1.0:
            raise ValueError(f"{where}['cosine'] is a similarity: a bound in (0, 1], not {bound!r}")
        out[name] = float(bound)
    return out


def metric_mismatch(o: torch.Tensor, r: torch.Tensor, metrics: dict[str, float], scale: float = 1.0) -> str:
    """'' when every bound holds for output `o` against reference `r` (same shape), else one line;
    `scale` multiplies the bounds of the ABSOLUTE metrics (an input variant's)."""
    if o.numel() == 0:
        return ""
    o64, r64 = o.detach().to(torch.float64), r.detach().to(o.device, torch.float64)
    finite = torch.isfinite(r64)
    broken = int((finite & ~torch.isfinite(o64)).sum())
    if broken:
        return f"{broken} of {o.numel()} elements are NaN or infinite where the reference is finite"
    o64, r64 = o64[finite], r64[finite]  # an infinite reference element: no distance to measure
    for name, bound in metrics.items():
        bound = bound * scale if name in ABSOLUTE else bound
        if name == "cosine" and o64.numel():
            problem = _scale_mismatch(o64, r64, bound)
            if problem:
                return problem
        fn, larger_is_better = METRICS[name]
        value = fn(o64, r64) if o64.numel() else (1.0 if larger_is_better else 0.0)
        ok = value >= bound if larger_is_better else value <= bound
        if not ok or math.isnan(value):
            side = ">=" if larger_is_better else "<="
            return f"{name} {value:.6g} over the whole tensor, the task requires {side} {bound:g}"
    return ""
