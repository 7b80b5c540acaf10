"""What a search wrote, as one checksum: `python bench/archive_digest.py runs/x.db`.

Two runs with the same seed and options must write the same archive but for clocks: tasks run
in threads, so candidate ids interleave differently between tasks from run to run. The digest
therefore names each candidate by (task, its index among the task's candidates) and leaves out
what measures time (created, elapsed_s, sessions) and the verdict's JSON (its phase timings);
it keeps every candidate's source, island, generation, parents, operator and note, every
evaluation's stage, correctness, speedup, error, flags and per-shape times, and every island
population. `--show` prints the canonical text instead of its hash, for a diff.

A wrong result's error names the secret seed its inputs were drawn from (fitness/engine/judges.py
draws one per evaluation so that no candidate can key answers on its inputs), and the values
it quotes follow from that seed: the digest keeps the error up to "(seed" and masks the rest.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import sqlite3
import sys

SECRET_SEED = re.compile(r"\(seed \d+\).*", re.S)


def canonical(path: str) -> list[str]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    rows = conn.execute("select c.*, e.stage, e.correct, e.heldout_correct, e.passed, e.speedup, e.error, "
                        "e.flags, e.times from candidates c left join evaluations e on e.candidate_id = c.id "
                        "order by c.run_id, c.task, c.id").fetchall()
    name, count = {}, {}
    for r in rows:
        key = (r["run_id"], r["task"])
        name[r["id"]] = f"{r['task']}#{count.get(key, 0)}"
        count[key] = count.get(key, 0) + 1
    out = [f"run {r['id']} {r['suite']} {r['status']} {r['config']}"
           for r in conn.execute("select * from runs order by id")]
    for r in rows:
        parents = [name.get(p, f"?{p}") for p in json.loads(r["parent_ids"] or "[]")]
        out.append(json.dumps([r["run_id"], name[r["id"]], r["island"], r["generation"], r["operator"], r["note"],
                               parents, r["code_hash"], r["source"], r["stage"], r["correct"],
                               r["heldout_correct"], r["passed"], r["speedup"],
                               SECRET_SEED.sub("(seed *)", r["error"] or ""), r["flags"], r["times"]]))
    for r in conn.execute("select * from populations order by run_id, task, generation, island"):
        members = [name.get(m, f"?{m}") for m in json.loads(r["members"])]
        out.append(json.dumps(["population", r["run_id"], r["task"], r["generation"], r["island"], members]))
    conn.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("archive")
    p.add_argument("--show", action="store_true", help="print the canonical text, not its hash")
    p.add_argument("--search-only", action="store_true",
                   help="leave out the runs rows (their stored options grow as options are added): candidates, "
                   "evaluations and populations only")
    args = p.parse_args(argv)
    lines = canonical(args.archive)
    if args.search_only:
        lines = [x for x in lines if not x.startswith("run ")]
    if args.show:
        print("\n".join(lines))
    else:
        n = sum(1 for x in lines if not x.startswith(("run ", '["population"')))
        print(f"{hashlib.sha256(chr(10).join(lines).encode()).hexdigest()}  {args.archive} ({n} candidates)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
