"""From command-line options to working LLM operators: the client's configuration (checked at
start, endpoint included, so a bad key, URL or model is one clear line before any work), the
client bound to the archive, the exchange folder, the GPU's figures, the retrieval corpus."""
from __future__ import annotations

import os
from dataclasses import dataclass

from operators.gpu_info import describe, detect
from operators.llm_client import LLMClient, LLMConfig, preflight, price_of
from operators.llm_exchange import Exchange, ExchangeError, import_answers
from operators.registry import LLMSetup, OperatorError
from operators.retrieval import Retriever, corpus_from_suites
from suites.data import local_suites
from suites.registry import SuiteError, load_suite


def temperatures(spec: str, islands: int) -> tuple[float, ...]:
    """One temperature per island, spread evenly over LO..HI, so islands explore differently."""
    lo, hi = _floats(spec, "--temperature")
    if islands == 1:
        return ((lo + hi) / 2,)
    return tuple(round(lo + (hi - lo) * i / (islands - 1), 3) for i in range(islands))


def _floats(spec: str, flag: str) -> tuple[float, float]:
    try:
        parts = [float(x) for x in str(spec).split(",")]
    except ValueError:
        raise OperatorError(f"{flag} takes one number or two separated by a comma, not {spec!r}") from None
    if len(parts) not in (1, 2) or any(p < 0 for p in parts):
        raise OperatorError(f"{flag} takes one non-negative number or two separated by a comma, not {spec!r}")
    return parts[0], parts[-1]


def llm_config(args) -> LLMConfig:
    key = os.environ.get("OPENAI_API_KEY") or None
    base_url = args.base_url or os.environ.get("OPENAI_BASE_URL") or None
    if not key and not args.llm_exchange:
        raise OperatorError(f"--operators {args.operators or 'llm'} needs an API key in OPENAI_API_KEY (a server "
                            "that checks none, e.g. vLLM or Ollama, takes any value: OPENAI_API_KEY=EMPTY)")
    price = _floats(args.llm_price, "--llm-price") if args.llm_price else None
    problems = []
    for flag, value, low in (("--llm-concurrency", args.llm_concurrency, 1), ("--max-tokens", args.max_tokens, 16),
                             ("--llm-retries", args.llm_retries, 0)):
        if value < low:
            problems.append(f"{flag} must be at least {low}")
    if args.llm_timeout <= 0:
        problems.append("--llm-timeout must be positive")
    if args.max_llm_calls is not None and args.max_llm_calls < 1:
        problems.append("--max-llm-calls must be at least 1")
    if args.max_cost is not None and args.max_cost <= 0:
        problems.append("--max-cost must be positive")
    if args.max_cost is not None and not price_of(args.model, price):
        problems.append(f"--max-cost needs the price of model {args.model!r}, which the built-in table lacks: "
                        "give --llm-price IN,OUT (USD per million prompt and completion tokens)")
    if problems:
        raise OperatorError("; ".join(problems))
    temperatures(args.temperature, 1)  # reported now rather than after the evaluator started
    config = LLMConfig(model=args.model, base_url=base_url, api_key=key, concurrency=args.llm_concurrency,
                       timeout_s=args.llm_timeout, retries=args.llm_retries, max_tokens=args.max_tokens,
                       max_cost=args.max_cost, max_calls=args.max_llm_calls, price=price)
    if not args.llm_exchange:
        error = preflight(config)
        if error:
            raise OperatorError(error)
    return config


@dataclass
class LLMRun:
    client: LLMClient
    setup: LLMSetup
    exchange: Exchange | None
    start_line: str

    def summary(self) -> str:
        db = self.client.store.db
        n, prompt, completion, cost, failed = db.execute(
            "select count(*), coalesce(sum(prompt_tokens), 0), coalesce(sum(completion_tokens), 0), "
            "coalesce(sum(cost_usd), 0), sum(error != '' or parse_error is not null) from llm_calls "
            "where run_id = ?", [self.client.run_id]).fetchone()
        line = (f"LLM: {n} call(s) in this run so far ({failed or 0} failed or unusable), {prompt} prompt + "
                f"{completion} completion tokens, ${cost:.4f}")
        return line + (f"; stopped early: {self.client.fatal}" if self.client.fatal else "")


def llm_run(config: LLMConfig, args, archive, run_id: int, tasks: dict) -> LLMRun:
    try:
        exchange = Exchange(args.llm_exchange) if args.llm_exchange else None
    except ExchangeError as e:
        raise OperatorError(str(e)) from None
    client = LLMClient(config, archive, run_id, exchange, spent=archive.llm_totals(run_id))
    notes = []
    if exchange:
        try:
            new = import_answers(exchange, client)
        except ExchangeError as e:
            raise OperatorError(str(e)) from None
        notes.append(f"exchange folder {exchange.dir}: {new} new answer(s) imported")
    gpu = describe(None if args.device == "cpu" else detect())
    suites = {"builtin": load_suite("builtin")}
    if args.suite != "builtin":
        suites[args.suite] = load_suite(args.suite, args.suite_path)
    for other in local_suites():  # the other public suites' references, where their data is here already
        if other not in suites:
            try:
                suites[other] = load_suite(other)
            except SuiteError:
                pass
    retriever = Retriever(corpus_from_suites(suites))
    setup = LLMSetup(client, gpu, retriever, args.suite, args.max_debug)
    price = client.price
    cost = f"${price[0]:g}/${price[1]:g} per million prompt/completion tokens" if price else \
        "price unknown, counted as $0 (give --llm-price IN,OUT)"
    budget = ", ".join(b for b in (f"at most {config.max_calls} calls" if config.max_calls else "",
                                   f"at most ${config.max_cost:g}" if config.max_cost else "") if b) or "no budget"
    where = "by file exchange (Batch API format)" if exchange else (config.base_url or "api.openai.com")
    line = (f"LLM: model {config.model} at {where}; {cost}; {budget}; concurrency {config.concurrency}; "
            f"temperatures {args.temperature} across islands; GPU: {gpu.split(':')[0]}")
    return LLMRun(client, setup, exchange, "; ".join([line, *notes]))
