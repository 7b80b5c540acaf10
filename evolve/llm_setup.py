"""From command-line options to working LLM operators: the client's configuration (checked at
start, endpoint included, so a bad key, URL or model is one clear line before any work), the
client bound to the archive, the exchange folder, the GPU's figures, the retrieval corpus."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from archives.archive import Archive
from evolve.cli_options import program
from evolve.config import LLMConfig, RunConfig
from evolve.task_search import Halt, TaskEnd
from operators.gpu_info import describe, detect
from operators.llm_client import LLMClient
from operators.llm_client import LLMConfig as ClientConfig
from operators.llm_client import preflight as client_preflight
from operators.llm_exchange import Exchange, ExchangeError, import_answers
from operators.registry import LLMSetup, OperatorError
from operators.retrieval import Retriever, corpus_from_suites
from suites.data import local_suites
from suites.registry import SuiteError, load_suite


def temperatures(spec: str, islands: int) -> tuple[float, ...]:
    """One temperature per island, spread evenly over LO..HI, so islands explore differently.
    `spec` is checked by run.py (`parse_temperature`)."""
    lo, hi = parse_temperature(spec)
    if islands == 1:
        return ((lo + hi) / 2,)
    return tuple(round(lo + (hi - lo) * i / (islands - 1), 3) for i in range(islands))


def parse_temperature(spec: str) -> tuple[float, float]:
    """LO[,HI] as two numbers; ValueError (with the message for the user) when it is not that."""
    try:
        parts = [float(x) for x in str(spec).split(",")]
    except ValueError:
        raise ValueError(f"--temperature takes one number or two separated by a comma, not {spec!r}") from None
    if len(parts) not in (1, 2) or any(p < 0 for p in parts):
        raise ValueError(f"--temperature takes one non-negative number or two separated by a comma, not {spec!r}")
    return parts[0], parts[-1]


def preflight(config: ClientConfig) -> None:
    """The endpoint answers and serves the model, or OperatorError saying what is wrong."""
    error = client_preflight(config)
    if error:
        raise OperatorError(error)


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
        unused = self.client.store.unused_answer_count(self.client.run_id)
        if unused:  # kept in the archive: a task that goes on adopts them (evolve.task_search)
            line += f"; {unused} stored answer(s) not used yet (kept for their tasks' next generation)"
        return line + (f"; stopped early: {self.client.fatal}" if self.client.fatal else "")

    def calls_and_cost(self) -> tuple[int, float]:
        """The run's LLM calls and their cost so far (all sessions), for the progress view."""
        store = self.client.store
        with store.lock:
            n, cost = store.db.execute("select count(*), coalesce(sum(cost_usd), 0) from llm_calls where run_id = ?",
                                       [self.client.run_id]).fetchone()
        return int(n), float(cost)

    def finish(self, waiting: bool, ends: Mapping[str, TaskEnd]) -> None:
        """The command's closing LLM lines: the calls early stops spared; when an exchange round
        waits, its request file and what waits in it, per task and operator."""
        print(self.summary() + saved_text(ends), flush=True)
        if waiting and self.exchange:
            counts = self.exchange.pending_counts()
            path, n = self.exchange.write_requests()
            per = ", ".join(f"{task} {op} {k}" for (task, op), k in sorted(counts.items()))
            print(f"waiting for LLM answers: wrote {n} request(s) to {path} (OpenAI Batch API input format)"
                  + (f"; pending per task and operator: {per}" if per else "")
                  + f"; send them with `{program()} llm-batch {path.parent}` (or any Batch API runner that "
                  f"writes its output .jsonl into {path.parent}), then run this command again: tasks whose "
                  f"answers are all there go on, the others wait", flush=True)


def saved_text(ends: Mapping[str, TaskEnd]) -> str:
    """'; early stopping saved about N LLM call(s) (task: why, ...)', or '' when no task stopped early."""
    early = {name: e for name, e in ends.items() if e.halt in (Halt.PATIENCE, Halt.ROOFLINE)}
    if not early:
        return ""
    total = sum(e.saved_calls for e in early.values())
    why = ", ".join(f"{name}: {e.halt.value}" for name, e in sorted(early.items()))
    return f"; early stopping saved about {total} LLM call(s) ({why})"


def llm_run(llm: LLMConfig, run: RunConfig, archive: Archive, run_id: int, setting: str = "optimize") -> LLMRun:
    try:
        exchange = Exchange(llm.exchange) if llm.exchange else None
    except ExchangeError as e:
        raise OperatorError(str(e)) from None
    client = LLMClient(llm.client, archive, run_id, exchange, spent=archive.llm_totals(run_id))
    notes = []
    if exchange:
        try:
            new = import_answers(exchange, client)
        except ExchangeError as e:
            raise OperatorError(str(e)) from None
        notes.append(f"exchange folder {exchange.dir}: {new} new answer(s) imported")
    gpu = describe(None if run.device == "cpu" else detect())
    setup = LLMSetup(client, gpu, Retriever(corpus_from_suites(corpus_suites(run, setting))), run.suite, llm.max_debug)
    config = llm.client
    price = client.price
    cost = f"${price[0]:g}/${price[1]:g} per million prompt/completion tokens" if price else \
        "price unknown, counted as $0 (give --llm-price IN,OUT)"
    budget = ", ".join(b for b in (f"at most {config.max_calls} calls" if config.max_calls else "",
                                   f"at most ${config.max_cost:g}" if config.max_cost else "") if b) or "no budget"
    where = "through a file exchange (Batch API format)" if exchange else f"at {config.base_url or 'api.openai.com'}"
    line = (f"LLM: model {config.model} {where}; {cost}; {budget}; concurrency {config.concurrency}; "
            f"temperatures {llm.temperature} across islands; GPU told to the model: {gpu}")
    return LLMRun(client, setup, exchange, "; ".join([line, *notes]))


def corpus_suites(run: RunConfig, setting: str = "optimize") -> dict:
    """The suites whose references the retrieval corpus draws on: builtin, the searched one, and
    the other public suites whose data is here already; in the instruction setting, never the
    searched one (GEAK's rule: no example can be a task of the benchmark being measured)."""
    suites = {"builtin": load_suite("builtin")}
    if run.suite != "builtin":
        suites[run.suite] = load_suite(run.suite, run.suite_path)
    for other in local_suites():
        if other not in suites:
            try:
                suites[other] = load_suite(other)
            except SuiteError:
                pass
    return {k: v for k, v in suites.items() if k != run.suite} if setting == "instruction" else suites
