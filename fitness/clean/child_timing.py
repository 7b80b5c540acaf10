"""What a clean child keeps for the GPU timing: its prepared shapes, and the device's ceilings.

A timing child (the baseline, or a candidate's replay) prepares each timed shape before the
measuring turn (fitness.engine.measuring): draws, warm-up, input sets, graph. The baseline child keeps
its prepared shapes across candidates, one per shape and epoch of draws, so they are held here by
slot, the least recently used dropped past a share of the GPU's memory. Apart from fitness.process.child,
which loads the code to be timed; fitness.clean.timing holds how one side is timed.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import torch

from fitness.clean.timing import TimedSide
from fitness.common.messages import TimeCheck, TimeOpen, TimeOracle, TimeSets, Trial
from suites.script import describe_inputs, to_wire

# GPU memory a timing child keeps in prepared shapes (input sets up to 2 GiB each, fitness.clean.timing),
# as a share of the device's: the baseline child keeps every shape of a search's epoch. H100
# builtin at a fixed 12 GiB: its sides were dropped and prepared again inside the turn (0.2 s of
# the 0.7 s each candidate held it)
KEEP_SIDES_SHARE = 0.3
# A request's first region, after the other side's process held the GPU, ran slow: H100 TritonBench
# A/A alone, 3 us shapes took 3.4-3.7 us in the first region of a request and 2.8-3.1 us in the
# next two (the first of a turn, a graph's first replay, twice as long). A short region is run once
# untimed before the request's timed ones; one this long or longer pays a few us in the switch.
WARM_REGION_BELOW_MS = 2.0


class PreparedSides:
    """The timed shapes a child holds prepared, by slot, and the one the measuring turn opened."""

    def __init__(self) -> None:
        self.side: TimedSide | None = None  # the shape being measured
        # shapes prepared for a later turn, by slot; the baseline child keeps its sides across
        # candidates (one per shape and epoch of draws), the least recently used dropped past a budget
        self.sides: OrderedDict[str, TimedSide] = OrderedDict()
        self.keep_share = KEEP_SIDES_SHARE  # the engine gives each of its baseline children a part

    def prepare(self, slot: str, side: TimedSide, cost: Callable[[], list] | None) -> dict:
        """The side warmed up and calibrated, kept under `slot`; `cost`: the suite's cost model
        of the shape, for the reply (run only on the clean side that may run suite code)."""
        reply = side.calibrate()  # warm-up (launcher, module load) and the time of one call
        if cost is not None:
            reply["cost"] = cost()
        reply["describe"] = describe_inputs(side.draws[0])  # what the prompt names behind this row's time
        side.cal = reply
        self.sides[slot] = side
        self._trim(slot)
        return reply

    def _trim(self, keep: str) -> None:
        """Least recently used sides dropped (never `keep`) until the kept ones fit the budget."""
        total = sum(s.nbytes() for s in self.sides.values())
        budget = self.keep_share * torch.cuda.get_device_properties(0).total_memory
        dropped = False
        for slot in [k for k in self.sides if k != keep]:
            if total <= budget:
                break
            total -= self.sides.pop(slot).nbytes()
            dropped = True
        if dropped:  # their memory back to the GPU, not kept in this child's allocator: H100, a
            torch.cuda.empty_cache()  # timed validate's baseline children had grown to 20 GiB each

    # -- the timing requests (fitness.engine.measuring), answered from the prepared sides -------------
    def open(self, req: TimeOpen) -> dict:
        """The measuring turn begins on a prepared slot: what it holds, or that it is gone."""
        slot = str(req.slot)
        if slot not in self.sides:
            return {"missing": True}
        self.sides.move_to_end(slot)
        self.side = self.sides[slot]
        return {"cal": self.side.cal, "method": self.side.method, "n_sets": len(self.side.sets),
                "n_draws": self.side.n_draws()}

    def sets(self, req: TimeSets) -> dict:
        """The input sets and (graph) the captured region of a prepared slot."""
        side = self.sides[str(req.slot)]
        method = side.prepare(req.n_sets, req.graph)
        self._trim(str(req.slot))
        return {"method": method, "n_draws": side.n_draws()}

    def trial(self, req: Trial) -> dict:
        """`reps` timed trials back to back, trial j on rotation rots[j] of the draws, or on fresh
        draws of key fresh[j] (the engine's choice): one round trip for several. `check`:
        {"rep": j, "picks": sets} keeps those sets' outputs after trial j, for the time_check
        request after the turn."""
        passes, rots = req.passes, list(req.rots)
        fresh: list[int | None] = list(req.fresh or ()) or [None] * len(rots)  # a trial of fresh draws: its key
        check = req.check
        if self.side is None:
            raise RuntimeError("a trial before the measuring turn opened a side")
        side = self.side
        if side.region_ms is None or side.region_ms < WARM_REGION_BELOW_MS:
            # untimed, on another rotation: the timed one starts cold as before
            side.trial((rots[0] + 1) % max(1, side.n_draws()), passes)
        ms = []
        for j, rot in enumerate(rots):
            picks = list(check.picks) if check is not None and check.rep == j else None
            ms.append(side.trial(rot, passes, picks, fresh[j]))
        return {"ms": ms}

    def check(self, req: TimeCheck) -> dict:
        """The outputs the checked trial kept; `drop`: the slot is done with."""
        slot = str(req.slot)
        outs = self.sides[slot].checked()
        if req.drop:
            del self.sides[slot]
        return {"outputs": [to_wire(o) for o in outs]}

    def oracle(self, req: TimeOracle) -> dict:
        """The baseline's outputs of the picked sets on rotation `rot`: [under 0x00, under 0xFF] each."""
        side = self.sides[str(req.slot)]
        runs = side.oracle(req.rot, list(req.picks))
        return {"outputs": [[to_wire(a), to_wire(b)] for a, b in runs], "n_draws": side.n_draws()}


def peaks() -> dict:
    """Measured ceilings: device-to-device copy bandwidth and bf16 matmul rate."""
    n = 1 << 28  # 1 GiB of float32
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t_copy, t_mm = _median_ms(lambda: dst.copy_(src)), _median_ms(lambda: a @ a)
    return {"bandwidth_Bps": 2 * n * 4 / (t_copy * 1e-3), "flops": 2 * 8192 ** 3 / (t_mm * 1e-3),
            "l2_bytes": torch.cuda.get_device_properties(0).L2_cache_size, "device": torch.cuda.get_device_name()}


def _median_ms(fn: Callable[[], object], reps: int = 10) -> float:
    fn()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]
