"""A small OpenAI-compatible HTTP server for tests: /v1/models, /v1/chat/completions, and the Batch
API's /v1/files and /v1/batches. The real `openai` client talks to it; each test scripts the
answers with a `responder(body, n) -> text | (status, payload, headers)` and reads back what
the client sent in `requests`."""
from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

STARTS = Path(__file__).resolve().parent.parent / "suites" / "builtin" / "start"
START = (STARTS / "softmax.py").read_text()


def kernel_variant(n: int, task: str = "softmax", prose: str = "Strategy: try a different block size.") -> str:
    """An answer holding a correct module for a builtin task that hashes differently for each n."""
    return f"{prose}\n```python\n{(STARTS / f'{task}.py').read_text()}\n_VARIANT = {n}\n```\n"


def softmax_variant(n: int, prose: str = "Strategy: try a different block size.") -> str:
    return kernel_variant(n, "softmax", prose)


def completion(body: dict, text: str, usage: dict | None = None) -> dict:
    prompt = len(json.dumps(body.get("messages", []))) // 4
    usage = usage or {"prompt_tokens": prompt, "completion_tokens": len(text) // 4}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    return {"id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": body.get("model", "m"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": usage}


class LLMServer:
    def __init__(self, responder=None, models=("test-model",), usage=None, task="softmax"):
        self.responder = responder or (lambda body, n: kernel_variant(n, task))
        self.models, self.usage = models, usage
        self.requests: list[dict] = []  # chat completion bodies, in arrival order
        self.files: dict[str, str] = {}
        self.batches: dict[str, dict] = {}
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def answer(self, body: dict) -> tuple[int, object, dict]:
        with self.lock:
            self.requests.append(body)
            n = len(self.requests)
        out = self.responder(body, n)
        if isinstance(out, tuple):
            return out
        return 200, completion(body, out, dict(self.usage) if self.usage else None), {}

    def _handler(self):
        srv = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def send(self, status, payload, headers=None):
                data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path.rstrip("/") == "/v1/models":
                    if srv.models is None:
                        return self.send(404, {"error": {"message": "no model list here"}})
                    return self.send(200, {"object": "list", "data": [
                        {"id": m, "object": "model", "created": 0, "owned_by": "test"} for m in srv.models]})
                m = re.fullmatch(r"/v1/batches/([\w-]+)", self.path)
                if m:
                    return self.send(200, srv._finish_batch(m.group(1)))
                m = re.fullmatch(r"/v1/files/([\w-]+)/content", self.path)
                if m and m.group(1) in srv.files:
                    return self.send(200, srv.files[m.group(1)])
                self.send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path == "/v1/chat/completions":
                    status, payload, headers = srv.answer(json.loads(raw))
                    return self.send(status, payload, headers)
                if self.path == "/v1/files":
                    fid = f"file-{len(srv.files) + 1}"
                    srv.files[fid] = _multipart_file(raw, self.headers["Content-Type"])
                    return self.send(200, {"id": fid, "object": "file", "bytes": len(srv.files[fid]),
                                           "created_at": 0, "filename": "requests.jsonl", "purpose": "batch",
                                           "status": "processed"})
                if self.path == "/v1/batches":
                    body = json.loads(raw)
                    bid = f"batch-{len(srv.batches) + 1}"
                    srv.batches[bid] = {"id": bid, "object": "batch", "endpoint": body["endpoint"],
                                        "input_file_id": body["input_file_id"], "completion_window": "24h",
                                        "status": "in_progress", "created_at": 0, "polls": 0}
                    return self.send(200, srv.batches[bid])
                self.send(404, {"error": {"message": f"no route {self.path}"}})

        return Handler

    def _finish_batch(self, bid: str) -> dict:
        """The first poll says in_progress, the second completes the batch with the responder."""
        b = self.batches[bid]
        b["polls"] += 1
        if b["polls"] >= 2 and b["status"] != "completed":
            lines = []
            for line in self.files[b["input_file_id"]].splitlines():
                req = json.loads(line)
                status, payload, _ = self.answer(req["body"])
                lines.append(json.dumps({"id": f"req-{len(lines)}", "custom_id": req["custom_id"],
                                         "response": {"status_code": status, "request_id": "r", "body": payload},
                                         "error": None}))
            out = f"file-{len(self.files) + 1}"
            self.files[out] = "\n".join(lines) + "\n"
            b.update(status="completed", output_file_id=out)
        return {k: v for k, v in b.items() if k != "polls"}


def _multipart_file(raw: bytes, content_type: str) -> str:
    boundary = content_type.split("boundary=")[1].strip('"').encode()
    for part in raw.split(b"--" + boundary):
        if b"filename=" in part:
            return part.split(b"\r\n\r\n", 1)[1].rsplit(b"\r\n", 1)[0].decode()
    raise ValueError("no file in the upload")
