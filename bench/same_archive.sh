#!/usr/bin/env bash
# The same-seed archive check (issue 21): a builtin CPU search with a fixed seed and the LLM
# replay, then each archive's digest (bench/archive_digest.py). Run it before and after a change
# that should not alter what a search writes; the two digests must match.
#   bash bench/same_archive.sh TAG        (writes /tmp/same_TAG_*.db and their logs)
set -uo pipefail
cd "$(dirname "$0")/.."
tag=${1:?usage: bash bench/same_archive.sh TAG}
rm -f /tmp/same_"$tag"_*.db*
python run.py --suite builtin --tasks softmax,row_sum --islands 2 --generations 2 --population 4 --seed 11 \
  --workers 2 --archive /tmp/same_"$tag"_search.db > /tmp/same_"$tag"_search.log 2>&1
echo "search rc $?"
python bench/archive_digest.py /tmp/same_"$tag"_search.db
python bench/llm_replay.py /tmp/same_"$tag"_llm.db > /tmp/same_"$tag"_llm.log 2>&1
tail -1 /tmp/same_"$tag"_llm.log
python bench/archive_digest.py --search-only /tmp/same_"$tag"_llm.db
