"""A deterministic LLM search on CPU, for checking that a change keeps what a search writes:
the local chat-completions server (tests/llm_server.py) answers each request by a hash of its
content (not its arrival order), with the wrong-result details that follow from the secret
correctness seed masked, so two runs with the same seed ask and are answered the same.

    python bench/llm_replay.py /tmp/a.db && python bench/archive_digest.py --search-only /tmp/a.db
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.llm_server import START, LLMServer  # noqa: E402

SECRET = re.compile(r"\(seed \d+\)[^\n]*")


def responder(body: dict, n: int) -> str:
    messages = [{**m, "content": SECRET.sub("", m["content"])} for m in body["messages"]]
    h = int(hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:8], 16)
    src = START.replace("tl.exp(", "tl.exp2(") if h % 3 == 0 else START  # a third are wrong
    return f"Strategy: variant {h % 1000}.\n```python\n{src}\n_VARIANT = {h % 1000}\n```\n"


def main(archive: str) -> int:
    with LLMServer(responder) as srv:
        os.environ["OPENAI_API_KEY"] = "EMPTY"
        import run

        rc = run.main(["--suite", "builtin", "--tasks", "softmax", "--islands", "2", "--population", "4",
                       "--generations", "3", "--workers", "2", "--model", "test-model", "--base-url", srv.url,
                       "--archive", archive])
        print("rc", rc, "requests", len(srv.requests))
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
