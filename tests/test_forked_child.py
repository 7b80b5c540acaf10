"""The /dev/shm watch of a child without a mount namespace (fitness.engine.forked_child): what
appeared in a /dev/shm shared with the machine fails the candidate, and what it left fails the
later ones while it is there. Run in a folder under /dev/shm, so the watch sees the machine's
filesystem as it would."""
import os
import tempfile
from pathlib import Path

import pytest

from fitness.engine.forked_child import _ShmWatch

pytestmark = pytest.mark.skipif(not os.access("/dev/shm", os.W_OK), reason="no writable /dev/shm here")


@pytest.fixture
def shm():
    with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="te_test_watch_") as d:
        yield Path(d)


def test_a_file_the_candidate_left_fails_it_and_is_left_when_not_provably_its_own(shm):
    tainted: set[str] = set()
    watch = _ShmWatch(None, tainted, str(shm))
    (shm / "drawn.pt").write_bytes(b"x")
    note = watch.note(held=set())
    assert "gained drawn.pt" in note and "left drawn.pt in place (not provably its own)" in note
    assert (shm / "drawn.pt").exists() and tainted == {"drawn.pt"}


def test_a_file_the_candidates_processes_held_is_removed(shm):
    tainted: set[str] = set()
    watch = _ShmWatch(None, tainted, str(shm))
    (shm / "mine.pt").write_bytes(b"x")
    assert "removed mine.pt (its own)" in watch.note(held={"mine.pt"})
    assert not (shm / "mine.pt").exists() and tainted == set()


def test_a_child_forked_before_an_earlier_candidate_wrote_names_the_file_as_left_by_it(shm):
    """A spare child is forked ahead of need: its listing at the fork predates the file."""
    tainted: set[str] = set()
    spare, writer = _ShmWatch(None, tainted, str(shm)), _ShmWatch(None, tainted, str(shm))
    (shm / "drawn.pt").write_bytes(b"x")
    writer.note(held=set())
    note = spare.note(held=set())
    assert "left by an earlier candidate" in note and "drawn.pt" in note and "gained" not in note


def test_a_left_file_fails_later_candidates_only_while_it_is_there(shm):
    tainted: set[str] = set()
    _ShmWatch(None, tainted, str(shm))
    writer = _ShmWatch(None, tainted, str(shm))
    (shm / "drawn.pt").write_bytes(b"x")
    writer.note(held=set())
    assert "left by an earlier candidate" in _ShmWatch(None, tainted, str(shm)).note(held=set())
    later = _ShmWatch(None, tainted, str(shm))
    (shm / "drawn.pt").unlink()
    assert later.note(held=set()) == "" and tainted == set()
