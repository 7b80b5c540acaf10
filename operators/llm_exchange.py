"""LLM calls by file, for GPU nodes without internet: the OpenAI Batch API's JSONL formats.

A run with `--llm-exchange DIR` sends nothing. Each request it has no stored answer for is queued;
at the end of the round the queue goes to DIR/requests.jsonl (Batch API input lines, custom_id =
the request hash) and the run stops, saying so. Someone runs `python run.py llm-batch DIR` where
there is internet (or any tool that writes Batch API output lines into DIR), and the next run
imports every answer file in DIR into the archive under those hashes: the same requests, made
again, then find their answers there. Each queued request is also kept in the archive
(llm_requests) with the job it was made for, and its answer is stored with it: on another machine,
whose prompts name another GPU and other times, the same job finds its answer by its slot
(operators.llm_client.job_slot), and an answer no job takes is adopted by the search
(evolve.task_search), never dropped.
"""
from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter
from pathlib import Path

REQUESTS = "requests.jsonl"
STATE = "batch.json"
ENDPOINT = "/v1/chat/completions"


class ExchangeError(Exception):
    """The exchange folder cannot be used; the message is meant for the user."""


class Exchange:
    def __init__(self, folder: str | Path):
        self.dir = Path(folder)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ExchangeError(f"cannot use --llm-exchange folder {self.dir}: {e.strerror}") from None
        self.pending: dict[str, dict] = {}
        self.asker: dict[str, tuple[str, str]] = {}  # per pending request: (task, operator)
        self.lock = threading.Lock()

    def queue(self, key: str, body: dict, asker: tuple[str, str] = ("", "")):
        with self.lock:
            self.pending[key] = body
            self.asker[key] = asker

    def pending_counts(self) -> dict[tuple[str, str], int]:
        """Requests waiting for an answer, per (task, operator)."""
        with self.lock:
            return dict(Counter(self.asker[k] for k in self.pending))

    def write_requests(self) -> tuple[Path, int]:
        """This round's requests, replacing the last round's file (whose answered requests are in
        the archive now, and whose unanswered ones this round asks again)."""
        path = self.dir / REQUESTS
        with self.lock:
            lines = [json.dumps({"custom_id": k, "method": "POST", "url": ENDPOINT, "body": b})
                     for k, b in sorted(self.pending.items())]
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(line + "\n" for line in lines))
        tmp.replace(path)  # a reader never sees half a file
        return path, len(lines)

    def answers(self) -> list[dict]:
        """Every answer line in DIR's other .jsonl files: {custom_id, text|None, usage, error, messages}."""
        asked = {}
        req = self.dir / REQUESTS
        if req.exists():
            for r in _lines(req):
                if "custom_id" in r:
                    asked[r["custom_id"]] = r.get("body", {}).get("messages")
        out = []
        for path in sorted(self.dir.glob("*.jsonl")):
            if path.name == REQUESTS:
                continue
            for r in _lines(path):
                if "custom_id" not in r or not ("response" in r or "error" in r):
                    continue
                out.append({**_answer(r), "custom_id": r["custom_id"], "messages": asked.get(r["custom_id"]),
                            "file": path.name})
        return out


def _lines(path: Path):
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                raise ExchangeError(f"{path}:{n} is not a JSON line") from None
            if isinstance(r, dict):
                yield r


def _answer(r: dict) -> dict:
    resp = r.get("response") or {}
    if r.get("error") or resp.get("status_code", 200) != 200:
        err = r.get("error") or resp.get("body", {}).get("error") or {}
        msg = err.get("message") if isinstance(err, dict) else str(err)
        return {"text": None, "usage": {}, "error": f"batch answer: HTTP {resp.get('status_code', '?')}: {msg}"}
    body = resp.get("body") or {}
    try:
        text = body["choices"][0]["message"].get("content") or ""
    except (KeyError, IndexError, TypeError, AttributeError):
        return {"text": None, "usage": {}, "error": "batch answer holds no chat completion"}
    return {"text": text, "usage": body.get("usage") or {}, "error": ""}


def import_answers(exchange: Exchange, client) -> int:
    """Stores every answer not stored yet, each with the request it answers (the archive's copy of
    it, written when it was queued on whatever machine, else the request file's); returns how many
    were new."""
    new = 0
    for a in exchange.answers():
        key, source = a["custom_id"], f"batch:{a['file']}"
        # per answer file: a request that failed in one batch and was asked again in the next is
        # imported from each; an answer already stored for it makes the later one moot
        if client.store.has_llm_call(key, source) or client.store.llm_response(key) is not None:
            continue
        client.store.add_llm_call(_answer_row(a, client, client.store.llm_request(key), source))
        new += 1
    return new


def _answer_row(a: dict, client, request: dict | None, source: str) -> dict:
    """An imported answer as an llm_calls row: its request's text and job where the archive holds
    the request (so it is found for that job on any machine), else what the request file said."""
    usage, text = a["usage"], a["text"]
    row = {"run_id": client.run_id, "request_hash": a["custom_id"], "model": client.config.model,
           "messages": json.dumps(a["messages"]) if a["messages"] is not None else None,
           "response": text, "response_chars": len(text or ""), "prompt_tokens": usage.get("prompt_tokens"),
           "completion_tokens": usage.get("completion_tokens"),
           "cost_usd": client.cost(usage.get("prompt_tokens"), usage.get("completion_tokens"),
                                   client.config.batch_discount),
           "latency_s": None, "attempts": 1, "error": a["error"], "source": source, "created": time.time()}
    if request is not None:
        body = json.loads(request["body"] or "{}")
        row.update({k: request[k] for k in ("run_id", "task", "operator", "island", "generation", "slot",
                                            "parent_ids")},
                   messages=json.dumps(body.get("messages")), model=body.get("model", row["model"]))
    return row


# -- `run.py llm-batch DIR`: the side with internet ------------------------------------------
def send_batch(folder: str | Path, api_key: str | None, base_url: str | None, poll_s: float = 30.0,
               say=print) -> Path:
    """Sends DIR/requests.jsonl through the Batch API, waits, writes DIR/output-<batch>.jsonl.
    The batch id is kept in DIR/batch.json, so an interrupted wait resumes instead of paying again."""
    import openai

    folder = Path(folder)
    req = folder / REQUESTS
    if not req.is_file() or not req.read_text().strip():
        raise ExchangeError(f"no pending requests in {req}: run the search with --llm-exchange {folder} first")
    digest = hashlib.sha256(req.read_bytes()).hexdigest()
    sdk = openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=3)
    state_path = folder / STATE
    state = json.loads(state_path.read_text()) if state_path.exists() else {}
    try:
        if state.get("requests_sha256") == digest and state.get("batch_id"):
            batch_id = state["batch_id"]
            say(f"resuming batch {batch_id} (already sent for this request file)")
        else:
            with open(req, "rb") as f:
                file = sdk.files.create(file=f, purpose="batch")
            batch = sdk.batches.create(input_file_id=file.id, endpoint=ENDPOINT, completion_window="24h")
            batch_id = batch.id
            state_path.write_text(json.dumps({"requests_sha256": digest, "batch_id": batch_id}))
            say(f"sent {sum(1 for _ in _lines(req))} request(s) as batch {batch_id}")
        while True:
            batch = sdk.batches.retrieve(batch_id)
            if batch.status in ("completed", "failed", "expired", "cancelled"):
                break
            say(f"batch {batch_id}: {batch.status}; checking again in {poll_s:g} s")
            time.sleep(poll_s)
        if batch.status == "failed" and not batch.output_file_id:
            raise ExchangeError(f"batch {batch_id} failed: {batch.errors}")
        out = folder / f"output-{batch_id}.jsonl"
        parts = [sdk.files.content(fid).text for fid in (batch.output_file_id, batch.error_file_id) if fid]
        out.write_text("".join(p if p.endswith("\n") or not p else p + "\n" for p in parts))
    except openai.OpenAIError as e:
        raise ExchangeError(f"the Batch API at {base_url or 'api.openai.com'} failed: "
                            f"{' '.join(str(e).split())[:300]}") from None
    say(f"batch {batch_id}: {batch.status}; answers in {out}; run the search again to use them")
    return out
