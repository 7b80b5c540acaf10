"""The search's settings, frozen: run.py builds them from the command line, checked in one place
(run.py's `configs`), and the engine never sees argparse. A test or a script builds them directly."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from operators.llm_client import LLMConfig as ClientConfig

if TYPE_CHECKING:
    from fitness.engine.cluster import ClusterConfig
    from fitness.engine.evaluator import EvalConfig


@dataclass(frozen=True)
class SearchConfig:
    """One task's evolutionary search."""

    islands: int = 4
    population: int = 8  # kernels per island
    generations: int = 10
    migration_interval: int = 3  # generations between ring migrations
    seed: int = 0  # the same seed and options give the same run
    budget_evals: int | None = None  # per task
    target_speedup: float | None = None  # a task stops once its best kernel reaches it
    temperatures: tuple[float, ...] = ()  # per island, for LLM operators; islands differ in it
    patience: int | None = None  # a task stops after this many generations without a better best speedup
    roofline_stop: float | None = None  # a task stops once its best kernel reaches this share of the roofline
    # optimize: Triton to Triton from the starting kernel; instruction (GEAK's): the LLM writes
    # generation 0 from the instruction and interface, never seeing the reference's or start's code
    setting: str = "optimize"


@dataclass(frozen=True)
class RunConfig:
    """What the run searches, where it keeps it, and how the command ends."""

    suite: str = "builtin"
    suite_path: str | None = None  # the suite's data folder (else $TRITON_EVOLVE_DATA, else the cache)
    tasks: str | None = None  # comma-separated filters; None: all
    difficulty: str | None = None
    category: str | None = None
    validation: str | None = None  # validate's record of the tasks invalid here (default per suite)
    archive: Path = Path("runs/builtin.db")
    export: Path = Path("runs/builtin-best")
    fresh: bool = False  # a new run in the archive even if one is there
    extend: bool = False  # on resume, generations and the task filters may grow
    retime: bool = False  # on resume on another device model: evaluate the kept kernels again here
    time_limit: float | None = None  # seconds for the whole command
    aa_every: int = 25  # GPU: an A/A sentinel after every N evaluations; 0: none
    operators: str = "knobs"  # knobs, llm or both, resolved
    operators_explicit: bool = False  # named on the command line (else the default)
    knob_rate: float = 0.3  # with both: the share of children from knob operators
    device: str = "auto"  # what the evaluator runs on (auto, cpu, cuda)
    model: str | None = None  # the LLM's name, kept with the run
    # kept with the run so every session of it compares: the baseline and the input seeds
    baseline: str = "reference"
    seeds: str = "0,1"
    # every option the command resolved, by name: stored with the run so a resume needs only the archive
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LLMConfig:
    """The LLM operators: the client's settings and how the search uses them."""

    client: ClientConfig
    exchange: str | None = None  # no network: the folder of Batch API request and answer files
    temperature: str = "0.6,1.2"  # LO[,HI], spread across the islands
    max_debug: int = 5  # failed repairs of one lineage before it is dropped


@dataclass(frozen=True)
class Configs:
    """Everything a search command asked for (run.py's `search_configs`)."""

    run: RunConfig
    search: SearchConfig
    evaluation: EvalConfig  # how candidates are checked and timed
    cluster: ClusterConfig | None  # None: this process's own pools
    llm: LLMConfig | None  # None: knob operators only
