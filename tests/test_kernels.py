"""The report's kernel section reads the archive's own records: its lineage is the candidates the
archive returns, its times the best kernel's timing rows, and report.json keeps the keys it
always gave (the real SQLite archive)."""
import pytest

from archives import kernel_view, kernels
from archives.archive import Archive
from archives.records import Draft
from fitness.common.replies import PeakFigures
from fitness.engine.verdict import Verdict, speedup_from_rows
from tests.timing_rows import timing_row

PEAKS = PeakFigures(bandwidth_Bps=1.0e12, flops=1.0e15, l2_bytes=50 << 20, device="NVIDIA H100 80GB HBM3")


def _archive(tmp_path) -> tuple[Archive, int, dict[str, int]]:
    """A start, a mutation of it, and a crossover of both that is the best kernel; its second
    shape runs under its roofline floor (the floored speedup is not the measured one)."""
    a = Archive(tmp_path / "k.db")
    run = a.new_run("builtin", {})
    ok = {"stage": "timed", "correct": True, "heldout_correct": True}

    def put(parents: tuple[int, ...], op: str, gen: int, island: int, speedup: float, rows=()) -> int:
        cid = a.add_candidate(Draft(run, "softmax", island, gen, f"# {op} {gen}\n", f"h{gen}", parents, op,
                                    f"note {gen}")).id
        a.add_evaluation(cid, Verdict("softmax", speedup=speedup, times=list(rows), **ok))
        return cid

    start = put((), "start", 0, -1, 1.0)
    mid = put((start,), "knob_mutation", 1, 0, 1.2)
    rows, speedup, _ = speedup_from_rows([timing_row({"N": 1024}, "float32", 0.5, 1.0, bytes=1e8),
                                          timing_row({"N": 64}, "float16", 0.002, 0.004, bytes=1e7)], PEAKS)
    best = put((mid, start), "llm_crossover", 2, 1, speedup or 0.0, rows)
    return a, run, {"start": start, "mid": mid, "best": best}


def test_the_lineage_is_the_archives_own_candidates_start_first(tmp_path):
    a, run, ids = _archive(tmp_path)
    s = kernels.section("softmax", a.candidates(run, "softmax"))
    assert s.lineage == tuple(a.candidate(ids[k]) for k in ("start", "mid", "best")) and s.broken_at is None
    assert s.times == s.lineage[2].times == a.candidate(ids["best"]).times and len(s.times) == 2
    assert kernel_view.lineage_rows(s)[2][1] == f"#{ids['best']} (+ parents #{ids['start']})"
    a.close()


def test_report_json_gives_each_step_and_shape_with_the_keys_it_always_had(tmp_path):
    a, run, ids = _archive(tmp_path)
    j = kernels.as_json(kernels.section("softmax", a.candidates(run, "softmax")))
    assert j["lineage"][2] == {"id": ids["best"], "operator": "llm_crossover", "note": "note 2", "stage": "timed",
                               "speedup": j["best"]["speedup"], "generation": 2, "island": 1,
                               "other_parents": [ids["start"]]}
    assert j["lineage"][0]["other_parents"] == []
    assert j["times"][0] == {"shape": "N=1024", "dtype": "float32", "candidate_ms": 0.5, "baseline_ms": 1.0,
                             "spread": 0.01, "speedup": 2.0}
    a.close()


def test_the_times_table_shows_the_measured_speedup_not_the_floored_one(tmp_path):
    a, run, _ = _archive(tmp_path)
    s = kernels.section("softmax", a.candidates(run, "softmax"))
    tiny = s.times[1]
    assert tiny.floor_ms == pytest.approx(0.01) and tiny.speedup == 1.0  # both sides floored at 10 us
    assert kernel_view.times_rows(s)[1] == ["N=64", "float16", "0.0020", "0.0040", "2.000x", "1.0%"]
    a.close()
