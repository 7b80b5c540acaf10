"""The LLM client: chat completions through the `openai` SDK against any OpenAI-compatible endpoint.

Every call goes: request hash -> archived response? (then no request is sent) -> budget
reservation -> send with retries -> archive the response -> hand it to the operator. Storing before
use is what lets a run killed at any moment resume without paying twice for an answer it got.

Budgets are never exceeded, in-flight calls included: before a call is sent it reserves an upper
bound of its cost (prompt bytes, as a byte-level tokenizer never makes more tokens than bytes, plus
max_tokens of completion); when it returns, the reservation is replaced by the billed usage.
"""
from __future__ import annotations

import hashlib
import json
import logging
import random
import threading
import time
from dataclasses import dataclass, field

from operators.base import Exhausted, Pending, Unusable

logger = logging.getLogger(__name__)

# USD per million (prompt, completion) tokens, as published in 2025; matched by longest prefix of
# the model name. Local servers (vLLM, SGLang, Ollama) are free: unknown models cost 0 unless the
# user gives --llm-price.
PRICES = {
    "gpt-4o": (2.50, 10.00), "gpt-4o-mini": (0.15, 0.60),
    "gpt-4.1": (2.00, 8.00), "gpt-4.1-mini": (0.40, 1.60), "gpt-4.1-nano": (0.10, 0.40),
    "gpt-5": (1.25, 10.00), "gpt-5-mini": (0.25, 2.00), "gpt-5-nano": (0.05, 0.40),
    "o3": (2.00, 8.00), "o3-mini": (1.10, 4.40), "o4-mini": (1.10, 4.40),
}
# these take max_completion_tokens and only the default temperature
REASONING_PREFIXES = ("o1", "o3", "o4", "gpt-5")
MAX_STORED_CHARS = 1 << 20  # a runaway response is kept, but only its first megabyte
FATAL_STATUS = (401, 403, 404)  # no point retrying, nor sending more calls


def price_of(model: str, override: tuple[float, float] | None = None) -> tuple[float, float] | None:
    if override:
        return override
    best = max((p for p in PRICES if model.startswith(p)), key=len, default=None)
    return PRICES[best] if best else None


def is_reasoning(model: str) -> bool:
    return model.startswith(REASONING_PREFIXES)


def request_hash(body: dict) -> str:
    """Identity of a request: the exact JSON body sent (model, messages, sampling)."""
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:40]


def job_slot(meta: dict, seed: int | None, turns: int) -> str | None:
    """The job a request is made for, in no words of the prompt: task, operator, island,
    generation, the parents it asks about, the job's seed and the conversation's length (a
    follow-up is its own slot). Within one run a job's draw gives its seed, so an answer to it is
    found again on any machine; None where the caller says too little to name a job."""
    place = [meta.get(k) for k in ("task", "operator", "island", "generation")]
    if seed is None or any(v is None for v in place):
        return None
    return json.dumps([*place, [int(i) for i in meta.get("parent_ids") or []], seed, turns])


@dataclass(frozen=True)
class LLMConfig:
    model: str
    base_url: str | None = None
    api_key: str | None = None
    concurrency: int = 4
    timeout_s: float = 300.0
    retries: int = 5
    backoff_s: float = 2.0  # first retry delay; doubles, capped at 60 s
    max_tokens: int = 8192
    max_cost: float | None = None  # USD, the whole run (earlier sessions included)
    max_calls: int | None = None
    price: tuple[float, float] | None = None  # overrides the table
    batch_discount: float = 0.5  # the Batch API bills half


@dataclass
class Reply:
    text: str
    call_id: int
    cached: bool = False


@dataclass
class Budget:
    max_cost: float | None
    max_calls: int | None
    spent: float = 0.0
    calls: int = 0
    reserved: float = 0.0
    in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reserve(self, bound: float):
        with self.lock:
            if self.max_calls is not None and self.calls + self.in_flight + 1 > self.max_calls:
                raise Exhausted(f"LLM call budget spent ({self.calls} of --max-llm-calls {self.max_calls})")
            if self.max_cost is not None and self.spent + self.reserved + bound > self.max_cost:
                raise Exhausted(f"LLM cost budget spent (${self.spent:.4f} of --max-cost {self.max_cost}; "
                                f"the next call could cost up to ${bound:.4f})")
            self.in_flight += 1
            self.reserved += bound

    def settle(self, bound: float, cost: float):
        with self.lock:
            self.in_flight -= 1
            self.reserved -= bound
            self.calls += 1
            self.spent += cost


class LLMClient:
    """`store` is the archive (archives.archive.Archive: its LLM calls and exchange requests);
    `exchange`, when given, replaces the network: unanswered requests are queued for the Batch API
    instead."""

    def __init__(self, config: LLMConfig, store, run_id: int, exchange=None, spent: tuple[int, float] = (0, 0.0)):
        self.config, self.store, self.run_id, self.exchange = config, store, run_id, exchange
        self.price = price_of(config.model, config.price)
        self.budget = Budget(config.max_cost, config.max_calls, calls=spent[0], spent=spent[1])
        self.slots = threading.BoundedSemaphore(max(1, config.concurrency))
        self.fatal = ""
        self._sdk = None
        if exchange is None:
            from openai import OpenAI

            # retries are ours (below): they are recorded and honour the budget
            self._sdk = OpenAI(api_key=config.api_key, base_url=config.base_url, timeout=config.timeout_s,
                               max_retries=0)

    # -------------------------------------------------------------------------------------
    def body(self, messages: list[dict], temperature: float | None, seed: int | None = None) -> dict:
        body = {"model": self.config.model, "messages": messages}
        if seed is not None:
            # two samples of one prompt are two requests: without a seed the second would get the
            # first one's stored answer
            body["seed"] = seed
        if is_reasoning(self.config.model):
            body["max_completion_tokens"] = self.config.max_tokens
        else:
            body["max_tokens"] = self.config.max_tokens
            if temperature is not None:
                body["temperature"] = round(float(temperature), 3)
        return body

    def cost(self, prompt_tokens: int | None, completion_tokens: int | None, discount: float = 1.0) -> float:
        if not self.price:
            return 0.0
        return discount * ((prompt_tokens or 0) * self.price[0] + (completion_tokens or 0) * self.price[1]) / 1e6

    def bound(self, body: dict) -> float:
        prompt = len(json.dumps(body["messages"]).encode()) + 16 * len(body["messages"])
        return self.cost(prompt, self.config.max_tokens)

    def complete(self, messages: list[dict], temperature: float | None, meta: dict, seed: int | None = None) -> Reply:
        """The assistant's text for these messages. `meta` (task, operator, island, generation,
        parent_ids) goes into the archived row. Raises Exhausted (budget, endpoint refused), Pending
        (exchange round), or LLMCallError (this call failed after its retries; recorded)."""
        body = self.body(messages, temperature, seed)
        key = request_hash(body)
        slot = job_slot(meta, seed, len(messages))
        row_meta = {**meta, "parent_ids": json.dumps(list(meta.get("parent_ids") or [])), "slot": slot}
        hit = self.store.llm_response(key)
        if hit is None and slot is not None:
            # the same job asked on another machine, or before its parents were timed again: its
            # prompt's text differs (the GPU it names, the times it quotes), its answer is this job's
            hit = self.store.llm_answer_for_slot(self.run_id, slot)
        if hit is not None:
            self.store.use_llm_call(hit["id"], key, row_meta)
            return Reply(hit["response"], hit["id"], cached=True)
        if self.fatal:
            raise Unusable(self.fatal)
        bound = self.bound(body)
        self.budget.reserve(bound)
        if self.exchange is not None:
            # the call is as good as paid once it is in the request file: keep the reservation, and
            # the request itself in the archive, so its answer is matched to it wherever it is read
            self.store.add_llm_request({**row_meta, "request_hash": key, "run_id": self.run_id,
                                        "body": json.dumps(body), "created": time.time()})
            self.exchange.queue(key, body, (str(meta.get("task", "")), str(meta.get("operator", ""))))
            raise Pending(f"request {key} is waiting in the exchange folder")
        cost = bound  # unless the server says what it billed
        try:
            with self.slots:
                text, usage, attempts, latency, error, status = self._send(body)
            cost = self.cost(usage.get("prompt_tokens"), usage.get("completion_tokens")) if usage else \
                (bound if text is not None else 0.0)
        finally:
            self.budget.settle(bound, cost)
        stored = text[:MAX_STORED_CHARS] if text is not None else None
        row = {"run_id": self.run_id, "request_hash": key, "model": self.config.model,
               "messages": json.dumps(messages), "response": stored, "response_chars": len(text or ""),
               "prompt_tokens": usage.get("prompt_tokens"), "completion_tokens": usage.get("completion_tokens"),
               "cost_usd": cost, "latency_s": latency, "attempts": attempts, "error": error,
               "source": "api", "created": time.time(), **row_meta, "used_for": key}
        call_id = self.store.add_llm_call(row)
        if status in FATAL_STATUS:
            self.fatal = f"the LLM endpoint refused the request: {error}"
            raise Unusable(self.fatal)
        if text is None:
            raise LLMCallError(error, call_id)
        return Reply(text, call_id)

    def _send(self, body: dict):
        """(text or None, usage, attempts, latency_s, error, HTTP status or None)."""
        import openai

        rng = random.Random()
        t0 = time.monotonic()
        error, status = "", None
        for attempt in range(1, self.config.retries + 2):
            retry_after = None
            try:
                resp = self._sdk.chat.completions.create(**body)
                try:  # the SDK does not validate: a server's odd JSON surfaces here
                    usage = resp.usage.model_dump() if resp.usage else {}
                    text = resp.choices[0].message.content or ""
                except (AttributeError, IndexError, TypeError):
                    return None, {}, attempt, time.monotonic() - t0, "the response holds no chat completion", None
                if not isinstance(text, str) or not all(isinstance(usage.get(k, 0) or 0, int) for k in
                                                        ("prompt_tokens", "completion_tokens")):
                    return None, {}, attempt, time.monotonic() - t0, "the response holds no chat completion", None
                return text, usage, attempt, time.monotonic() - t0, "", 200
            except openai.APIStatusError as e:
                status = e.status_code
                error = f"HTTP {status}: {_short(e)}"
                if status != 429 and status < 500:
                    return None, {}, attempt, time.monotonic() - t0, error, status
                retry_after = _retry_after(e.response.headers)
            except openai.APITimeoutError:
                error, status = f"timed out after {self.config.timeout_s:g} s", None
            except openai.APIConnectionError as e:
                error, status = f"cannot connect to {self.config.base_url or 'the OpenAI API'}: {_short(e)}", None
            except openai.OpenAIError as e:  # e.g. a body that is not a chat completion
                return None, {}, attempt, time.monotonic() - t0, f"bad response: {_short(e)}", None
            if attempt <= self.config.retries:
                logger.info("LLM call attempt %d failed (%s); retrying", attempt, error)
                delay = min(60.0, self.config.backoff_s * 2 ** (attempt - 1)) * (0.5 + rng.random() / 2)
                time.sleep(min(60.0, retry_after) if retry_after is not None else delay)
        return None, {}, self.config.retries + 1, time.monotonic() - t0, f"{error} (gave up after " \
            f"{self.config.retries + 1} attempts)", status


class LLMCallError(Exception):
    def __init__(self, message: str, call_id: int):
        super().__init__(message)
        self.call_id = call_id


def _retry_after(headers) -> float | None:
    try:
        if headers.get("retry-after-ms") is not None:
            return float(headers["retry-after-ms"]) / 1000
        if headers.get("retry-after") is not None:
            return float(headers["retry-after"])
    except (TypeError, ValueError):
        pass
    return None


def _short(e: Exception) -> str:
    return " ".join(str(e).split())[:300]


def preflight(config: LLMConfig) -> str:
    """Checks at start that the endpoint answers and serves the model; '' when fine, else a
    one-line error. A server without a model list (404 on /models) is given the benefit of the doubt."""
    import openai

    sdk = openai.OpenAI(api_key=config.api_key, base_url=config.base_url, timeout=min(30.0, config.timeout_s),
                        max_retries=1)
    where = config.base_url or "the OpenAI API"
    try:
        names = [m.id for m in sdk.models.list()]
    except openai.AuthenticationError as e:
        return f"the LLM endpoint {where} refused the API key (OPENAI_API_KEY): {_short(e)}"
    except openai.APIStatusError as e:
        if e.status_code in (404, 405, 501):
            return ""
        return f"the LLM endpoint {where} answered HTTP {e.status_code} to a model list request: {_short(e)}"
    except openai.APIConnectionError as e:
        return f"cannot reach the LLM endpoint {where}: {_short(e)}"
    except openai.OpenAIError as e:
        return f"the LLM endpoint {where} gave an unusable answer: {_short(e)}"
    if names and config.model not in names:
        shown = ", ".join(sorted(names)[:8]) + (", ..." if len(names) > 8 else "")
        return f"the LLM endpoint {where} does not serve model {config.model!r} (it serves: {shown})"
    return ""
