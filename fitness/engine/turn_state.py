"""The measuring turn's state kept across candidates (fitness.engine.measuring): the turn's lock and
the time it was held, each shape's epochs of draws and the baseline's calibration, the epoch's
checked trial and the baseline's outputs of it, the long-lived baseline children and the GPU's
peaks. Separate from fitness.engine.measuring, which schedules one candidate's timing on this state
(before, inside and after the turn): this part only keeps and hands out what candidates share.
"""
from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterator

from fitness.clean.timing import draws_for, n_sets_for
from fitness.common.messages import Peaks, TimeOracle
from fitness.common.replies import PeakFigures, Prepared
from fitness.engine.baseline_child import BaselineChild, SeedBank, ShapeKey
from fitness.engine.gpu_busy import BusyProbe
from fitness.engine.pool import ChildProcess, WorkerPool
from fitness.engine.settings import StageSettings
from fitness.engine.trials import TimingChild, check_plan, checked
from suites.lru import BytesLRU
from suites.script import tensors_of
from suites.task import nbytes

ORACLE_BYTES = 4 << 30  # host memory for the baseline's checked outputs (script tasks)


class TurnState:
    def __init__(self, settings: StageSettings, pool: WorkerPool | None, children: int | None = None):
        """`pool`: the long-lived baseline children, one per place (`children`: how many, if no pool)."""
        self.settings, self.pool = settings, pool
        self.lock = threading.Lock()  # the turn itself
        self.busy_s = 0.0  # time the turn was held
        self._bases = [BaselineChild(pool) for _ in range(children or (pool.size if pool else 1))]
        self._base_of: dict[str, int] = {}  # task -> its baseline child, in order of first timing
        # the baseline's calibration per shape (one call's time, input bytes): from it the next
        # candidate's replay child makes its input sets and graph before its turn
        self._baseline_cal: dict[ShapeKey, Prepared] = {}
        self._epochs: dict[ShapeKey, dict] = {}  # per shape: the draws both sides are timed on now
        self._epoch_lock = threading.Lock()
        self._seed_bank = SeedBank()  # per task and baseline: each epoch's seeds
        self._epoch_ids = itertools.count()
        self._peak_figures: PeakFigures | None = None
        self.baseline_prepares = 0  # baseline sides prepared inside the turn
        self.baseline_prepares_outside = 0  # ... and before it, beside another candidate's trials
        # per shape and epoch: the baseline's checked outputs
        self._oracles = BytesLRU(ORACLE_BYTES, lambda outs: nbytes(tensors_of(outs)))
        self.busy = BusyProbe()  # other processes' work on the GPU while a shape is measured

    @staticmethod
    def _n_sets(base: Prepared) -> int:
        """Input sets per timed region, from the baseline's calibration of the shape."""
        return n_sets_for(base.in_bytes, base.t_one_ms, base.l2_bytes)

    def _plan_epoch(self, plan: dict) -> dict | None:
        """The shape's current epoch if it is still the plan's (a later candidate may have opened
        the next one); the caller holds _epoch_lock."""
        ep = self._epochs.get(plan["key"])
        return ep if ep is not None and ep["id"] == plan["epoch"]["id"] else None

    def _check_of(self, plan: dict, n: int) -> tuple[int, list[int]]:
        """The epoch's checked trial (rotation, sets), drawn once per epoch and number of sets (the
        replay is a clean process that cannot see it), so the baseline's outputs serve every candidate."""
        n_draws = draws_for(n, len(plan["epoch"]["seeds"]))
        with self._epoch_lock:
            ep = self._plan_epoch(plan)
            check = ep.get("check") if ep is not None else None
            if not check or check[0] != n:
                check = (n, *check_plan(n, n_draws))
                if ep is not None:
                    ep["check"] = check
        plan["check"], plan["n_sets"] = (check[1], check[2]), n
        return check[1], check[2]

    def _oracle(self, plan: dict, base: TimingChild) -> tuple:
        """The baseline's outputs of the checked trial's sets (twice: fitness.clean.timing.TimedSide.oracle),
        taken once per epoch and kept (LRU, ORACLE_BYTES): H100 TritonBench, taking both sides'
        outputs inside every turn held 1.3 s of its 2.0 s per candidate."""
        rot, picks = plan["check"]
        key = (plan["key"], plan["epoch"]["id"], rot, tuple(picks))
        with self._epoch_lock:
            if key in self._oracles:
                return self._oracles.get(key)
        req = TimeOracle(picks=tuple(picks), rot=rot, slot=plan["base_slot"])
        outs = checked(base.ask(req, self.settings.timing_timeout_s), "b").outputs
        with self._epoch_lock:
            self._oracles.put(key, outs)
        return outs

    def _base(self, task_name: str) -> BaselineChild:
        """The baseline child that holds this task's shapes: tasks spread in turn over them."""
        with self._epoch_lock:
            i = self._base_of.setdefault(task_name, len(self._base_of) % len(self._bases)) if task_name else 0
        return self._bases[i]

    def baseline_side(self, task_name: str = "") -> ChildProcess:
        """The long-lived baseline child of a task: it loads only the suite's code, never a candidate's."""
        return self._base(task_name).get()

    @contextlib.contextmanager
    def _baseline(self, task_name: str = "") -> Iterator[TimingChild]:
        """A task's baseline child, held: a preparing and the turn's trials never interleave."""
        with self._base(task_name).lock:
            yield self.baseline_side(task_name)

    def close(self) -> None:
        for base in self._bases:
            base.close()

    @property
    def peaks(self) -> PeakFigures:
        """Measured ceilings (copy bandwidth, bf16 matmul rate), once, in the clean baseline child;
        TimingRejected where it could not measure them (no roofline to floor times at)."""
        if self._peak_figures is None:
            with self.lock, self._baseline() as child:
                self._peak_figures = checked(child.ask(Peaks(), self.settings.timing_timeout_s), "b")
        return self._peak_figures
