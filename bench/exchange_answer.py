"""Answers an `--llm-exchange` round without an LLM: for each request in DIR/requests.jsonl, the
starting kernel of the task the prompt names, made distinct by a trailing assignment (so it is a
new candidate, evaluated like any answer), written as Batch API output lines into DIR. It drives
the exchange loop end to end on a GPU node (bench/device/llm_settings.sh) where no model is.

    python bench/exchange_answer.py DIR --suite tritonbench
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def task_of(messages: list[dict], names: list[str]) -> str | None:
    """The task a prompt is about: every operator's prompt opens with "Task `NAME`"
    (operators/prompts/*.md)."""
    text = "\n".join(str(m.get("content", "")) for m in messages)
    m = re.search(r"Task `([^`]+)`", text)
    return m.group(1) if m and m.group(1) in names else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir")
    p.add_argument("--suite", default="builtin")
    a = p.parse_args(argv)
    from suites.registry import load_suite

    tasks = load_suite(a.suite)
    names = sorted(tasks)
    folder = Path(a.dir)
    requests = [json.loads(line) for line in (folder / "requests.jsonl").read_text().splitlines() if line.strip()]
    out, unknown = [], 0
    for r in requests:
        name = task_of(r["body"]["messages"], names)
        if name is None:
            unknown += 1
            continue
        v = int(hashlib.sha256(r["custom_id"].encode()).hexdigest()[:8], 16)  # the request's own: never a repeat
        text = f"Variant {v} of the starting kernel.\n```python\n{tasks[name].start_source}\n_VARIANT = {v}\n```\n"
        out.append({"custom_id": r["custom_id"], "response": {"status_code": 200, "body": {
            "choices": [{"message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0}}}})
    n = len(list(folder.glob("output-*.jsonl")))
    (folder / f"output-stub{n}.jsonl").write_text("".join(json.dumps(o) + "\n" for o in out))
    print(f"answered {len(out)} of {len(requests)} request(s); {unknown} named no task of {a.suite}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
