"""Before/after counts of two `validate` records, by status and reason: what a change to the
evaluator gained or lost, task by task.

    python bench/validation_table.py BEFORE.json AFTER.json

A refusal caused by the replay's own limits is counted as such in either record: the status
`not-replayable` (since issue 48), or, in an older record, a reason naming one of the old limits.
"""
import argparse
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from suites.validation import NOT_REPLAYABLE, VALID, reason_class, replay_limit  # noqa: E402

# what the replay's narrow model said before issue 48 (each an honest pattern it could not model)
OLD_LIMITS = {
    "is an input of the call, not memory the call made": "destination output (an input of the call)",
    "memory that appeared from outside the recorded call": "module-level buffer",
    "not one of the engine's primitives": "aten op outside the table",
    "cannot be replayed": "an argument the recorder cannot encode",
}


def bucket(entry: dict) -> str:
    reason = entry.get("reason_whole") or entry.get("reason", "")
    if entry.get("status") == VALID:
        return "valid, timed" if entry.get("speedup") is not None else "valid, not timed"
    if entry.get("status") == NOT_REPLAYABLE:
        return "replay limit: " + replay_limit(reason)
    for words, label in OLD_LIMITS.items():
        if words in reason:
            return "replay limit: " + label
    return "invalid-here: " + reason_class(reason)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    args = ap.parse_args()
    records = [json.loads(Path(p).read_text())["tasks"] for p in (args.before, args.after)]
    both = sorted(set(records[0]) & set(records[1]))
    counts = [Counter(bucket(r[t]) for t in both) for r in records]
    print(f"{len(both)} tasks in both records\n")
    print(f"{'status / reason':80} {'before':>6} {'after':>6}")
    for label in sorted(set(counts[0]) | set(counts[1])):
        print(f"{label[:80]:80} {counts[0][label]:6d} {counts[1][label]:6d}")
    limits = [sum(n for k, n in c.items() if k.startswith("replay limit")) for c in counts]
    print(f"\nrefused for the replay's limits: {limits[0]} before, {limits[1]} after")
    print("\nchanged:")
    for t in both:
        b, a = bucket(records[0][t]), bucket(records[1][t])
        if b != a:
            print(f"  {t:36} {b[:60]}  ->  {a[:60]}")


if __name__ == "__main__":
    main()
