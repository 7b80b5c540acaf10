"""The timing row as a record: the archive's JSON of a verdict's rows is byte for byte what the
dict rows wrote, the roofline step makes new rows, and readers get the records back (the real
SQLite archive, rows built by the GPU path's own functions with the children's replies stood in)."""
import json
import sqlite3
import statistics

import pytest

from archives.archive import Archive
from archives.records import Draft
from fitness.common.replies import PeakFigures, Prepared
from fitness.common.timing_row import TimingRow, rows_from_dicts
from fitness.engine.correctness import CorrectnessResult
from fitness.engine.outcome import Evaluation, verdict_from
from fitness.engine.trials import spread, timed_result, timed_row
from fitness.engine.verdict import speedup_from_rows

PEAKS = {"bandwidth_Bps": 3.0e12, "flops": 1.0e15}
# as the engine reads them from the child that measured them
PEAK_FIGURES = PeakFigures.from_wire({**PEAKS, "l2_bytes": 50 << 20, "device": "NVIDIA H100 80GB HBM3"})
TIMES = {"c": [0.5, 0.4, 0.6, 0.45], "b": [1.0, 1.0, 1.1, 0.9]}


def _cal(cost, describe="", warm=(1.5, 2)) -> dict:
    return {"c": {"warm_ms": warm[0]}, "b": {"cost": cost, "describe": describe, "warm_ms": warm[1]}}


def _typed(cal: dict) -> dict[str, Prepared]:
    """Each side's calibration as the engine reads it from the child's reply (fitness.common.replies)."""
    return {k: Prepared.from_wire({"t_one_ms": 0.1, "in_bytes": 0, "l2_bytes": 0, **d}) for k, d in cal.items()}


def _old_row(plan: dict, times: dict, method: str, n_sets: int, cal: dict) -> dict:
    """The dict fitness.engine.trials.timed_row returned before the record, as it wrote it."""
    bytes_, flops = cal["b"].get("cost") or (0.0, 0.0)
    case = plan["case"]
    return {"shape": case["shape"], "dtype": case["dtype"], "candidate_ms": statistics.median(times["c"]),
            "baseline_ms": statistics.median(times["b"]), "candidate_spread": spread(times["c"]),
            "baseline_spread": spread(times["b"]), "method": method, "input_sets": n_sets,
            "trials": len(times["c"]), "baseline_trials": len(times["b"]),
            "baseline_kept": bool(plan.get("baseline_reused")), "bytes": bytes_, "flops": flops,
            "describe": str(cal["b"].get("describe", "")),
            "phase_ms": {"warm_up": cal["c"].get("warm_ms", 0.0), "baseline_warm_up": cal["b"].get("warm_ms", 0.0)}}


def _old_floor(rows: list[dict], peaks: dict | None, floor: bool = True) -> None:
    """What fitness.engine.verdict.speedup_from_rows wrote into each dict before the record."""
    for r in rows:
        floor_ms = 0.0
        if peaks:
            floor_ms = 1e3 * max(r["bytes"] / peaks["bandwidth_Bps"], r["flops"] / peaks["flops"])
        r["floor_ms"] = floor_ms
        c, b = (max(r["candidate_ms"], floor_ms), max(r["baseline_ms"], floor_ms)) if floor else \
            (r["candidate_ms"], r["baseline_ms"])
        r["speedup"] = b / c if c > 0 else float("inf")


# a builtin shape with a float cost and one reused baseline; a script task's with an integer
# cost (JSON keeps 1000000 apart from 1000000.0), its inputs described, no warm-up recorded
SHAPES = [({"case": {"shape": {"M": 4096, "N": 1024}, "dtype": "float16"}, "baseline_reused": True},
           _cal((2.4e7, 0.0))),
          ({"case": {"shape": {"perf": 3}, "dtype": "given"}},
           {"c": {}, "b": {"cost": [1000000, 2000000], "describe": "float16[64, 64]"}}),
          ({"case": {"shape": {"N": 7}, "dtype": "float32"}}, {"c": {}, "b": {}})]  # no cost model


def _rows_both_ways(peaks: dict | None, floor: bool = True) -> tuple[list[TimingRow], list[dict]]:
    rows = [timed_row(plan, TIMES, "cuda-graph", 4, _typed(cal)) for plan, cal in SHAPES]
    old = [_old_row(plan, TIMES, "cuda-graph", 4, cal) for plan, cal in SHAPES]
    _old_floor(old, peaks, floor)
    return rows, old


def test_a_timed_row_writes_the_same_keys_in_the_same_order_as_the_dict_it_replaces():
    for plan, cal in SHAPES:
        row, old = timed_row(plan, TIMES, "eager", 2, _typed(cal)), _old_row(plan, TIMES, "eager", 2, cal)
        assert list(row.to_dict()) == list(old) and json.dumps(row.to_dict()) == json.dumps(old)
        assert TimingRow.from_dict(old) == row


def test_the_roofline_step_returns_new_rows_and_leaves_the_measured_ones_as_they_were():
    for peaks, floor in ((PEAKS, True), (PEAKS, False), (None, True)):
        rows, old = _rows_both_ways(peaks, floor)
        measured = [r.to_dict() for r in rows]
        floored, speedup, _ = speedup_from_rows(rows, PEAK_FIGURES if peaks else None, floor=floor)
        assert [r.to_dict() for r in rows] == measured and all(r.floor_ms is None for r in rows)
        assert json.dumps([r.to_dict() for r in floored]) == json.dumps(old)
        assert speedup == pytest.approx(statistics.geometric_mean(r["speedup"] for r in old))


def test_a_verdicts_rows_round_trip_through_the_archive_as_the_same_json_as_the_dict_rows(tmp_path):
    rows, old = _rows_both_ways(PEAKS)
    plans = [dict(plan, turn_s={"trials": 0.25}) for plan, _ in SHAPES]
    timing = timed_result(plans, rows, [0.0, 0.1, 0.2, 0.5], PEAK_FIGURES, floor=True)
    right = CorrectnessResult("correct", correct=True, heldout_correct=True, device="gpu")
    v = verdict_from(Evaluation("softmax", "", "", gpu=True, correctness=right, timing=timing))
    a = Archive(tmp_path / "a.db")
    run = a.new_run("builtin", {})
    cid = a.add_candidate(Draft(run, "softmax", 0, 1, "src", "h1", (), "knob_mutation")).id
    a.add_evaluation(cid, v)
    conn = sqlite3.connect(tmp_path / "a.db")
    times, verdict = conn.execute("select times, verdict from evaluations where candidate_id = ?", [cid]).fetchone()
    assert times == json.dumps(old)
    assert verdict == json.dumps(v.to_dict()) and json.dumps(json.loads(verdict)["times"]) == json.dumps(old)
    assert a.candidate(cid).times == tuple(v.times) and all(r.speedup is not None for r in v.times)
    a.close()


def test_a_row_of_an_older_archive_reads_with_what_it_lacks_as_not_recorded():
    full = _old_row(SHAPES[0][0], TIMES, "eager", 2, SHAPES[0][1])
    older = {k: x for k, x in full.items() if k not in ("baseline_kept", "describe", "phase_ms")}
    row = TimingRow.from_dict(older)
    assert (row.baseline_kept, row.describe, row.phase_ms, row.floor_ms, row.speedup) == (False, "", {}, None, None)
    assert row.candidate_ms == full["candidate_ms"]
    with pytest.raises(KeyError, match="candidate_ms"):
        TimingRow.from_dict({k: x for k, x in full.items() if k != "candidate_ms"})
    assert rows_from_dicts([older, {"shape": {}}, "not a row"]) == (row,)
