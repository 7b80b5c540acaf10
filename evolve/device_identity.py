"""Which device a run's evaluations were made on, and what a resume on another one does.

A timing belongs to the GPU model it was measured on (DESIGN.md section 6): a speedup from an
H100 is never compared with one from an H200, nor an untimed CPU verdict taken for a timed one.
Every evaluation names its device (the verdict's, as the evaluator's child reports it: the GPU's
name, or "cpu (Triton interpreter)"); a device's model is that name without its parenthesis,
so a CPU run's is "cpu". A resume whose machine has another model refuses in one line, or with
`--retime` sets the other device's evaluations aside (archives: retired_evaluations) so that the
kernels the run keeps are evaluated again here before any is compared (evolve.task_search).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from archives.archive import Archive
    from evolve.evaluating import SearchEvaluator

RETIME_FLAG = "--retime"
UNKNOWN = "a GPU this engine could not name"


class DeviceMismatch(Exception):
    """The archive's run was measured on another device and no re-timing was asked for; the message
    is meant for the user."""


def device_model(name: str) -> str:
    """'cpu (Triton interpreter)' -> 'cpu'; a GPU's name as torch gives it, unchanged."""
    return name.split(" (", 1)[0].strip()


def machine_devices(evaluator: SearchEvaluator) -> frozenset[str]:
    """The device models this command's evaluations will name: the evaluation units' (a cluster's
    probe names them), else "cpu" without a GPU, else the GPU's name read in a short-lived child
    process (the engine never holds a CUDA context). Empty: a GPU that could not be named."""
    named = {device_model(u.device) for u in evaluator.units(0) if u.device.strip("? ")}
    if named:
        return frozenset(named)
    if not evaluator.gpu:
        return frozenset({"cpu"})
    from operators.gpu_info import detect

    info = detect()
    return frozenset({device_model(info["name"])}) if info and info.get("name") else frozenset()


@dataclass(frozen=True)
class DeviceCheck:
    """What a resume found of the devices: the run's evaluations made elsewhere, per device name."""

    here: frozenset[str]
    foreign: dict[str, int]  # device name as archived -> evaluations

    @property
    def moved(self) -> bool:
        return bool(self.foreign)

    def there_text(self) -> str:
        return ", ".join(f"{name} ({n} evaluation{'s' * (n != 1)})" for name, n in sorted(self.foreign.items()))

    def here_text(self) -> str:
        return ", ".join(sorted(self.here)) or UNKNOWN

    def refusal(self, path: object, run_id: int) -> str:
        return (f"archive {path} holds run {run_id} measured on {self.there_text()}; this machine is "
                f"{self.here_text()}: timings of one device are never compared with another's. Add "
                f"{RETIME_FLAG} to evaluate the kernels the run keeps again here (the other device's evaluations "
                "are kept aside in its table retired_evaluations), or give --fresh or another --archive")

    def retimed(self, n: int) -> str:
        return (f"{RETIME_FLAG}: run measured on {self.there_text()}, resumed on {self.here_text()}: {n} "
                "evaluation(s) set aside (table retired_evaluations); the kernels the run keeps are evaluated "
                "again here")


def check_devices(archive: Archive, run_id: int, here: frozenset[str]) -> DeviceCheck:
    """The run's evaluations made on a device model other than this machine's (an evaluation that
    names no device, e.g. one the static gate refused, holds no measurement and stays)."""
    foreign = {name: n for name, n in archive.evaluation_devices(run_id).items()
               if name and device_model(name) not in here}
    return DeviceCheck(here, foreign)


def retime_elsewhere(archive: Archive, run_id: int, check: DeviceCheck) -> str:
    """Sets the other devices' evaluations aside; the line that says so."""
    n = archive.retire_evaluations(run_id, sorted(check.foreign), check.here_text())
    return check.retimed(n)
