"""What an operator is handed of an archived kernel: the archive's own record seen through
operators.base.Parent, its tuning results and never its held-out ones (the real SQLite archive)."""
import pytest

from archives.archive import Archive
from archives.records import Draft
from fitness.engine.verdict import Verdict
from operators.base import Parent
from tests.timing_rows import timing_row


def test_a_parent_shows_the_archived_kernels_tuning_results_and_its_lineages_reflections(tmp_path):
    a = Archive(tmp_path / "a.db")
    run = a.new_run("builtin", {})
    cid = a.add_candidate(Draft(run, "softmax", 0, 2, "src", "h1", (), "llm_repair", "fixed the mask")).id
    a.add_evaluation(cid, Verdict("softmax", stage="timed", correct=True, heldout_correct=False, speedup=1.5,
                                  flags=["noisy-timing"], times=[timing_row({"N": 8})], reason="held-out shape"))
    p = Parent(a.candidate(cid), ("widened BLOCK", "fixed the mask"))
    assert (p.id, p.source, p.operator, p.note, p.stage) == (cid, "src", "llm_repair", "fixed the mask", "timed")
    assert p.correct and p.speedup == 1.5 and p.flags == ("noisy-timing",) and p.times == (timing_row({"N": 8}),)
    assert p.error == "held-out shape" and p.repairs == 2
    a.close()


def test_the_parent_view_names_no_held_out_result():
    fields = {name for name in dir(Parent) if not name.startswith("_")}
    assert not fields & {"heldout_correct", "passed", "evaluation", "verdict"}
    with pytest.raises(AttributeError):
        Parent.heldout_correct  # noqa: B018 - the attribute must not exist
