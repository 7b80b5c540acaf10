"""fitness/common/flags.py: one enum for a verdict's flags, stored as their strings."""
import json

from archives.kernel_view import FLAG_NOTES
from fitness.common.flags import Flag


def test_a_flag_is_its_string_in_comparisons_sets_json_and_text():
    stored = json.loads(json.dumps([Flag.INVALID_HERE, Flag.SPEEDUP_REVIEW]))  # as the archive keeps them
    assert stored == ["invalid-here", "speedup-over-10x-review"]
    assert Flag.INVALID_HERE in stored and "invalid-here" in {Flag.INVALID_HERE}
    assert f"{Flag.NO_SANDBOX}" == "no-sandbox" and Flag("timing-failed") is Flag.TIMING_FAILED


def test_every_flag_has_a_note_in_the_kernel_report():
    assert sorted(FLAG_NOTES) == sorted(f.value for f in Flag)
