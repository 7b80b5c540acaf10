"""Prints N tasks of a suite drawn at random with a printed seed, comma separated, for `--tasks`
(the seed goes to stderr, so `TASKS=$(python bench/sample_tasks.py ...)` keeps only the names).

    python bench/sample_tasks.py --suite tritonbench --n 40 --seed 48
"""
import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from suites.registry import SuiteError, load_suite  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", default="tritonbench")
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--seed", type=int, default=None, help="default: drawn, and printed")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    try:
        names = sorted(load_suite(args.suite))
    except SuiteError as e:
        sys.exit(f"error: {e}")
    picked = sorted(random.Random(seed).sample(names, min(args.n, len(names))))
    print(f"seed {seed}: {len(picked)} of the {len(names)} tasks of {args.suite}", file=sys.stderr)
    print(",".join(picked))


if __name__ == "__main__":
    main()
