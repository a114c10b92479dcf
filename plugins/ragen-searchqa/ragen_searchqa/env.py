"""The SearchQA environment (RAGEN SearchQA): answer multi-hop questions by searching a real retrieval server.

Each env talks HTTP to a retrieval server: the shared subprocess this process starts for its corpus (see
``client.py``) or the server at ``retriever_url``. Actions are ``search[query]`` and ``finish[answer]``; other text is
scored as an answer (RAGEN's fallback) unless ``fallback_answer=False``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import attrs

from ragen import ConfigError, Env, EnvConfig, Expert, option
from ragen_searchqa.client import RetrieverClient, RetrieverError, ServerLease, acquire_server
from ragen_searchqa.data import DataError, Dataset, Question, read_corpus, write_corpus
from ragen_searchqa.hotpot import HF_DATASET, load_hf, load_hotpot_file
from ragen_searchqa.kb import MIN_KB_SIZE, build_kb
from ragen_searchqa.limits import MAX_QUERY_CHARS, MAX_TOP_K
from ragen_searchqa.scoring import extract_fallback_answer, score_answer

SOURCES = ("synthetic", "hotpot", "hf")
ACTIONS_LINE = "Available actions: search[<query>], finish[<answer>]"
MAX_STEPS_TEXT = "Maximum search steps reached. Episode ended without an answer."
_ACTION = re.compile(r"(search|finish)\s*\[(.*)\]", re.DOTALL | re.IGNORECASE)


@attrs.frozen(kw_only=True)
class SearchQAConfig(EnvConfig):
    """Question source and corpus, the retrieval server, the observation caps and the reward threshold."""

    source: str = option("synthetic", "Questions and corpus: 'synthetic' (procedural multi-hop KB, offline), 'hotpot' "
                         "(a HotpotQA-format JSON file) or 'hf' (HF hotpot_qa, distractor; needs the network).")
    kb_seed: int = option(0, "Seed of the synthetic knowledge base (independent of episode seeds).")
    kb_size: int = option(2000, f"Documents in the synthetic knowledge base (>= {MIN_KB_SIZE}).")
    hotpot_file: str | None = option(None, "HotpotQA-format JSON file for source='hotpot' (a path; not shipped).")
    hf_dataset: str = option(HF_DATASET, "Hugging Face dataset repo for source='hf'.")
    hf_config: str = option("distractor", "Configuration (folder of parquet shards) of the HF dataset.")
    hf_max_questions: int = option(20_000, "Train questions read from the HF dataset (RAGEN: the first 20,000).")
    corpus_file: str | None = option(None, "JSONL corpus {id, title, text} that replaces the source's corpus.")
    val_size: int | None = option(
        None, "Questions held out for val/test by a Random(0) permutation; None = min(500, 10 %) of the source.")
    retriever_url: str | None = option(
        None, "URL of a running retrieval server (same API) to use instead of starting one, e.g. a GPU retriever.")
    title_weight: float = option(
        1.0, "Weight of the BM25 title field in the server this env starts (0 = plain BM25 over the content).")
    top_k: int = option(5, f"Documents per search (RAGEN: 5; the server allows up to {MAX_TOP_K}).")
    max_doc_chars: int = option(800, "Characters of a document shown before it is cut with '...' (RAGEN: 800).")
    max_results_chars: int = option(4000, "Characters of the whole result block before it is cut (RAGEN: 4,000).")
    max_steps: int = option(10, "Env steps after which the episode is truncated with reward 0 (RAGEN: 10).")
    f1_threshold: float = option(0.3, "Token F1 from which a non-exact answer earns its F1 as reward (RAGEN: 0.3).")
    fallback_answer: bool = option(
        True, "Score text that is neither search[...] nor finish[...] as an answer (RAGEN); False: it is invalid.")
    server_start_timeout: float = option(30.0, "Seconds the started server has to answer GET /health.")
    retriever_timeout: float = option(30.0, "Seconds one retrieval request may take.")

    def __attrs_post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ConfigError(f"source: expected one of {', '.join(SOURCES)}, got {self.source!r}")
        if self.kb_size < MIN_KB_SIZE:
            raise ConfigError(f"kb_size: must be >= {MIN_KB_SIZE}, got {self.kb_size}")
        if not 1 <= self.top_k <= MAX_TOP_K:
            raise ConfigError(f"top_k: must be in [1, {MAX_TOP_K}], got {self.top_k}")
        for key in ("max_doc_chars", "max_results_chars", "max_steps", "hf_max_questions"):
            if getattr(self, key) < 1:
                raise ConfigError(f"{key}: must be >= 1, got {getattr(self, key)}")
        for key in ("server_start_timeout", "retriever_timeout"):
            if not getattr(self, key) > 0:
                raise ConfigError(f"{key}: must be > 0, got {getattr(self, key)}")
        if not 0.0 <= self.f1_threshold <= 1.0:
            raise ConfigError(f"f1_threshold: must be in [0, 1], got {self.f1_threshold}")
        if self.title_weight < 0:
            raise ConfigError(f"title_weight: must be >= 0, got {self.title_weight}")
        if self.val_size is not None and self.val_size < 0:
            raise ConfigError(f"val_size: must be >= 0 or None, got {self.val_size}")
        if self.retriever_url is not None and not re.match(r"https?://[^/\s]+", self.retriever_url):
            raise ConfigError(f"retriever_url: expected http://host:port, got {self.retriever_url!r}")
        super().__attrs_post_init__()

    @property
    def action_budget(self) -> int:
        """Actions an episode can execute: the per-episode and per-turn budgets and ``max_steps``."""
        return min(self.max_actions_per_episode, self.max_turns * self.max_actions_per_turn, self.max_steps)


# ---- actions and observations -------------------------------------------------------------------------------------
def parse_action(text: str) -> tuple[str, str]:
    """``("search", query)``, ``("finish", answer)``, ``("invalid", why)`` or ``("other", text)`` (fallback text)."""
    text = str(text).strip()
    if not text:
        return "invalid", "the action is empty"
    match = _ACTION.fullmatch(text)
    if match is None:
        return "other", text
    kind, arg = match.group(1).lower(), match.group(2).strip()
    if kind == "search" and not arg:
        return "invalid", "search[] needs a query"
    if kind == "search" and len(arg) > MAX_QUERY_CHARS:
        return "invalid", f"the search query is {len(arg)} characters long (at most {MAX_QUERY_CHARS})"
    return kind, arg


def format_results(results: list[dict], max_doc_chars: int = 800, max_total_chars: int = 4000) -> str:
    """RAGEN's result block: ``[Document i] (ID: id, Score: s)`` then the content, cut at the two caps."""
    if not results:
        return "No relevant documents found for the query."
    parts = []
    for i, hit in enumerate(results, 1):
        content = str(hit.get("content", ""))
        if len(content) > max_doc_chars:
            content = content[:max_doc_chars] + "..."
        parts.append(f"[Document {i}] (ID: {hit.get('id')}, Score: {float(hit.get('score', 0.0)):.3f})\n{content}")
    block = "\n\n".join(parts)
    return block[:max_total_chars] + "..." if len(block) > max_total_chars else block


def build_instructions(cfg: SearchQAConfig) -> str:
    corpus = {
        "synthetic": "a knowledge base of documents about fictional people, cities, countries, companies, films and "
        "books",
        "hotpot": "a collection of Wikipedia paragraphs",
        "hf": "a collection of Wikipedia paragraphs",
    }[cfg.source]
    return " ".join([
        f"You answer questions by searching {corpus}; you cannot see it except through searches.",
        f"search[query] returns the {cfg.top_k} documents that best match the query's keywords (BM25); "
        "finish[answer] submits your final answer and ends the episode.",
        "Think inside <think> </think>, then give exactly one action per turn inside <answer> </answer>.",
        "Most questions need two searches: first the entity the question names, then the entity its document "
        "leads to. Answer with the shortest exact name, year or phrase (yes or no for yes/no questions); answers are "
        "scored by exact match, partial word overlap earns partial credit.",
        f"An episode ends after {cfg.max_steps} actions without an answer.",
        "Example 1: 'Question: In which country is the headquarters of Orvik Foods?' -> <think>I need to find where "
        "Orvik Foods is headquartered.</think><answer>search[Orvik Foods]</answer>",
        "Example 2: the results said 'Orvik Foods ... is headquartered in Talmond.' and then 'Talmond is a city in "
        "Veskar.' -> <think>Talmond is in Veskar.</think><answer>finish[Veskar]</answer>",
    ])


def load_dataset(cfg: SearchQAConfig) -> Dataset:
    try:
        if cfg.source == "synthetic":
            return build_kb(cfg.kb_seed, cfg.kb_size, cfg.val_size)
        if cfg.source == "hotpot":
            return load_hotpot_file(cfg.hotpot_file, cfg.val_size)
        return load_hf(cfg.hf_dataset, cfg.hf_config, cfg.hf_max_questions, cfg.val_size)
    except DataError as exc:
        raise ConfigError(str(exc)) from None


# ---- the env ------------------------------------------------------------------------------------------------------
class SearchQAEnv(Env):
    """Multi-hop question answering with search[query] / finish[answer] over a real BM25 retrieval server."""

    config_cls = SearchQAConfig
    reset_options = ("task_index",)
    name = "searchqa"
    config: SearchQAConfig

    def __init__(self, config: SearchQAConfig | None = None, render_mode: str | None = "ansi"):
        super().__init__(config, render_mode)
        cfg = self.config
        self.procedural = cfg.source == "synthetic"  # data-backed sources may repeat a question across seeds
        self.dataset = load_dataset(cfg)
        self.instructions = build_instructions(cfg)
        self.expert = SearchQAExpert()
        self.question: Question | None = None
        self.task_index = -1
        self.steps = 0
        self.searches: list[str] = []  #: queries of this episode, in order
        self.last_results: list[dict] = []  #: the server's answer to the last search
        self._lease: ServerLease | None = None
        self._url = self._connect()

    # ---- the retrieval server -----------------------------------------------------------------------------------
    def _connect(self) -> str | None:
        """Check the user's server, or lease (start or share) this process's server for the corpus."""
        cfg = self.config
        if cfg.retriever_url:
            client = RetrieverClient(cfg.retriever_url, cfg.retriever_timeout)
            try:
                client.health(timeout=min(cfg.retriever_timeout, 10.0))
            except RetrieverError as exc:
                raise ConfigError(f"retriever_url: {exc}") from None
            return client.url
        key, writer = self._corpus_source()
        self._lease = acquire_server(key, writer, title_weight=cfg.title_weight, start_timeout=cfg.server_start_timeout)
        return None

    def _corpus_source(self):
        """``(key, write_corpus)`` of the corpus the server indexes: the user's JSONL file or the dataset's."""
        if self.config.corpus_file:
            path = Path(self.config.corpus_file).expanduser().resolve()
            try:
                read_corpus(path)  # a bad file fails here, with the key named, not in the server
            except DataError as exc:
                raise ConfigError(str(exc)) from None
            return f"corpus/{path}@{path.stat().st_mtime_ns}", lambda _folder: path

        def write(folder: Path) -> Path:
            write_corpus(self.dataset.docs, folder / "corpus.jsonl")
            return folder / "corpus.jsonl"

        return self.dataset.key, write

    @property
    def retriever_url(self) -> str:
        """The URL this env sends its searches to (a restarted server has a new port)."""
        return self._url or self._lease.url

    @property
    def server_pid(self) -> int | None:
        """The pid of the server subprocess this env shares (None with ``retriever_url``)."""
        return self._lease.pid if self._lease is not None else None

    def retrieve(self, query: str) -> list[dict]:
        """The server's top ``top_k`` results; a server process that died is restarted once."""
        try:
            return RetrieverClient(self.retriever_url, self.config.retriever_timeout).retrieve(query, self.config.top_k)
        except RetrieverError:
            if self._lease is None:
                raise
            self._lease.ensure_running()  # a no-op when another env restarted it already
            return RetrieverClient(self.retriever_url, self.config.retriever_timeout).retrieve(query, self.config.top_k)

    # ---- state the expert reads ---------------------------------------------------------------------------------
    @property
    def actions_left(self) -> int:
        return max(self.config.action_budget - self.steps, 0)

    # ---- the contract -------------------------------------------------------------------------------------------
    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        task_index = options.pop("task_index", None)
        items = self.dataset.split(self.split)
        if not items:
            raise ConfigError(f"val_size: the {self.split} split of {self.dataset.key} is empty")
        if task_index is None:
            index = seed % len(items)
        elif not 0 <= int(task_index) < len(items):
            raise ConfigError(f"options.task_index: must be in [0, {len(items) - 1}], got {task_index}")
        else:
            index = int(task_index)
        self.question, self.task_index = items[index], index
        self.task_id = f"searchqa/{self.dataset.name}/{self.question.qid}"
        self.steps, self.searches, self.last_results = 0, [], []
        return f"Question: {self.question.question}\n{ACTIONS_LINE}", {"task_index": index}

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.steps += 1
        at_limit = self.steps >= self.config.max_steps
        kind, arg = parse_action(action)
        if kind == "search":
            return self._search(arg, at_limit)
        if kind == "finish":
            return self._finish(arg, valid=True)
        if kind == "other" and self.config.fallback_answer:
            return self._finish(extract_fallback_answer(arg), valid=False)
        why = arg if kind == "invalid" else "expected search[<query>] or finish[<answer>]"
        obs = f"Invalid action: {why}. Use search[<query>] to search or finish[<answer>] to answer.\n"
        obs += MAX_STEPS_TEXT if at_limit else ACTIONS_LINE
        return obs, 0.0, False, at_limit, self._info(valid=False, effective=False)

    def _search(self, query: str, at_limit: bool):
        self.last_results = self.retrieve(query)
        self.searches.append(query)
        block = format_results(self.last_results, self.config.max_doc_chars, self.config.max_results_chars)
        obs = f"Search results for '{query}':\n{block}\n\n{MAX_STEPS_TEXT if at_limit else ACTIONS_LINE}"
        return obs, 0.0, False, at_limit, self._info(valid=True, effective=True)

    def _finish(self, answer: str, valid: bool):
        score = score_answer(answer, self.question.answers, self.config.f1_threshold)
        label = "Your answer" if valid else "Your answer (extracted)"
        obs = f"{label}: {answer}. Reward: {score.reward:.2f}"
        info = self._info(valid=valid, effective=True, success=score.reward > 0, em=score.em, f1=score.f1)
        return obs, score.reward, True, False, {**info, "answer": answer}

    def _info(self, valid: bool, effective: bool, success: bool = False, em: bool = False, f1: float = 0.0) -> dict:
        return {"success": success, "action_is_valid": valid, "action_is_effective": effective, "em": float(em),
                "f1": float(f1), "num_searches": len(self.searches)}

    def validate_action(self, text: str) -> bool:
        """search[query] and finish[answer]; other non-empty text too while ``fallback_answer`` scores it."""
        kind, _ = parse_action(text)
        return kind in ("search", "finish") or (kind == "other" and self.config.fallback_answer)

    def _close(self) -> None:
        if self._lease is not None:
            self._lease.release()


# ---- the expert ---------------------------------------------------------------------------------------------------
class SearchQAExpert(Expert):
    """Searches the gold supporting titles in reasoning order, then finishes with the gold answer.

    Synthetic KB: ``search[bridge entity]``, ``search[intermediate entity]``, ``finish[answer]``; HotpotQA:
    ``search[supporting title 1]``, ``search[title 2]``, ``finish[gold]``. Titles already searched are skipped; when
    the budget leaves room for one action only, it finishes.
    """

    def plan(self, env: SearchQAEnv) -> list[str]:
        q = env.question
        if q is None or env._done:
            return []
        done = {s.lower() for s in env.searches}
        pending = [t for t in q.support if t.lower() not in done][: max(env.actions_left - 1, 0)]
        return [f"search[{t}]" for t in pending] + [f"finish[{q.answers[0]}]"]

    def next_actions(self, env: SearchQAEnv, k: int) -> list[str]:
        return self.plan(env)[: max(k, 0)]

    def rationale(self, env: SearchQAEnv) -> str:
        plan = self.plan(env)
        if not plan:
            return ""
        q, searched = env.question, len(env.searches)
        found = [h for h in q.hops[: min(searched, len(q.hops))]]
        known = f"The results show that {' and '.join(found)}. " if found else ""
        if plan[0].startswith("search["):
            title = plan[0][len("search["):-1]
            return f"{known}I still need the document about {title}, so I search for it."
        if found:
            return f"{known}So the answer is {q.answers[0]}."
        titles = " and ".join(q.support)
        return f"The passages about {titles} give the answer: {q.answers[0]}."
