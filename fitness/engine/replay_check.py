"""The check after the measuring turn (fitness.engine.measuring): the outputs one timed trial of the
replay kept, against the engine's own reference of each set's draw or the baseline's outputs of the
same trial's sets. Separate because it needs no turn, no epoch and no child: only the plan of a
shape that was timed, the outputs the replay kept, and the task's judge.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from fitness.clean.timing import draws_for, fresh_seed_of
from fitness.engine.judges import Judge
from fitness.engine.trials import TimingRejected


def check_outputs(judge: Judge, plan: dict, outs: Sequence[Any]) -> None:
    """Raises TimingRejected unless every checked output of the replay (`outs`) is right for its
    input set (memory the baseline leaves unwritten is no part of the baseline's outputs)."""
    rot, picks = plan["check"]
    if len(outs) != len(picks):
        raise TimingRejected(f"the replay kept {len(outs)} checked outputs, not {len(picks)}: no timed trial "
                             "of it was checked")
    seeds = plan["epoch"]["seeds"]
    n_draws = draws_for(plan["n_sets"], len(seeds))
    key = plan.get("check_key")
    for i, (pick, oc) in enumerate(zip(picks, outs)):
        seed = seeds[(pick + rot) % n_draws] if key is None else fresh_seed_of(key, pick)
        if plan.get("oracle") is not None:
            zero, full = plan["oracle"][i]
            problem = judge.check_timed(plan["case"], seed, unwritten_as(oc, zero, full), zero)
        else:
            problem = judge.check_timed(plan["case"], seed, oc, None)
        if problem:
            raise TimingRejected(f"a timed trial of the replay, checked unannounced, gave a wrong result "
                                 f"(input set {pick}): {problem}")


def unwritten_as(candidate: list, zero: list, full: list) -> list:
    """The candidate's outputs with the elements the baseline left unwritten (they differ between
    its call on 0x00-filled and on 0xFF-filled memory) taken from the baseline's: no part of the answer."""
    out = []
    for i, c in enumerate(candidate):
        z = zero[i] if i < len(zero) else None
        f = full[i] if i < len(full) else None
        if not (isinstance(c, torch.Tensor) and isinstance(z, torch.Tensor) and isinstance(f, torch.Tensor)) \
                or c.shape != z.shape or z.shape != f.shape or c.dtype != z.dtype:
            out.append(c)
            continue
        out.append(torch.where(_bits(z) != _bits(f), z, c))
    return out


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The elements as integers of their width: compared bit for bit (a NaN equals itself here)."""
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    t = t.contiguous()
    if t.dtype == torch.bool or t.element_size() not in ints:
        return t
    return t.view(ints[t.element_size()])
