"""ragen-searchqa: scoring, actions, the procedural KB, HotpotQA loading, the real retrieval server (API, errors,
concurrency, lifecycle), the env contract and the expert (environments.md §9)."""

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from gymnasium.utils import env_checker as gym_checker
from ragen_searchqa.client import RetrieverClient, RetrieverError, running_servers
from ragen_searchqa.data import DataError, Doc, Question, partition, read_corpus, write_corpus
from ragen_searchqa.env import ACTIONS_LINE, MAX_STEPS_TEXT, format_results, parse_action
from ragen_searchqa.hotpot import DatasetUnavailableError, load_hotpot_file, records_to_dataset
from ragen_searchqa.index import BM25Index
from ragen_searchqa.kb import build_kb
from ragen_searchqa.scoring import extract_fallback_answer, f1_score, normalize_answer, score_answer
from ragen_searchqa.server import RetrievalServer

import ragen
from ragen.envs.episode import Episode
from ragen.testing import check_env, ragen_cmd, run_two_steps

SHARED = Path(__file__).resolve().parents[4] / "shared"  # the data folder beside this repository
HOTPOT = SHARED / "data" / "hotpotqa" / "hotpot_dev_distractor_100.json"
needs_hotpot = pytest.mark.skipif(not HOTPOT.is_file(), reason=f"shared HotpotQA data not found at {HOTPOT}")
NO_SPEC_WARNING = "ignore:.*alternative render modes:UserWarning"
SMALL_KB = {"kb_size": 120, "kb_seed": 7}  # its own corpus key: lifecycle tests see their own server only


# ---- fixtures -----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def env():
    """A searchqa env whose lease keeps the default KB's server up for the whole module (envs share it)."""
    e = ragen.make_env("searchqa")
    yield e
    e.close()


@pytest.fixture(scope="module")
def hotpot_env():
    if not HOTPOT.is_file():
        pytest.skip(f"shared HotpotQA data not found at {HOTPOT}")
    e = ragen.make_env("searchqa-hotpot", hotpot_file=str(HOTPOT))
    yield e
    e.close()


@pytest.fixture(scope="module")
def thread_server():
    """A real RetrievalServer on a loopback port, in a thread of this process, over a small hand-made corpus."""
    docs = [
        Doc("d3", "Twin", "alpha beta gamma"),
        Doc("d1", "Twin", "alpha beta gamma"),  # same content as d3: a tie, broken by id
        Doc("d2", "Other", "delta epsilon alpha alpha"),
        Doc("d4", "Long", "zeta " * 400),
    ] + [Doc(f"x{i:02d}", f"Filler {i}", f"common word tag{i}") for i in range(60)]
    server = RetrievalServer(BM25Index(docs), "127.0.0.1", 0)
    server.start_in_thread()
    yield server
    server.shutdown()
    server.server_close()


def post(url, body, headers=None, timeout=10):
    """(status, parsed JSON body) of a POST with a raw body."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(
        url, data=data, method="POST", headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def get(url, timeout=10):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def raw_http(port, data: bytes) -> tuple[int, dict]:
    """Send raw bytes, return (status, JSON body) of the reply."""
    status, _, body = raw_reply(port, data)
    return status, json.loads(body)


def port_refuses(url) -> bool:
    host, port = url.removeprefix("http://").split(":")
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def process_gone(pid, wait=10.0) -> bool:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # our own child: reap it if it is a zombie
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass
        time.sleep(0.05)
    return False


def play_expert(env, seed=None, task_index=None, split="train"):
    """One expert episode through the core's Episode; returns (episode, [(query, results)], last info)."""
    ep = Episode(env)
    opts = {"split": split} | ({"task_index": task_index} if task_index is not None else {})
    ep.reset(seed=seed if seed is not None else 0, options=opts)
    searches, res = [], None
    while not ep.done:
        plan = env.expert.next_actions(env, env.config.max_actions_per_turn)
        res = ep.step_turn(" || ".join(plan) if plan else None)
        if plan and plan[0].startswith("search["):
            searches.append((plan[0][7:-1], list(env.last_results)))
    return ep, searches, res.info


# ---- scoring: normalisation and the reward table ------------------------------------------------------------------
@pytest.mark.parametrize("text, norm", [
    ("The Beatles", "beatles"),
    ("  A  tale of TWO cities!! ", "tale of two cities"),
    ("U.S.A.", "usa"),
    ("an apple, the pear and a plum", "apple pear and plum"),
    ("Theatre", "theatre"),  # articles only as whole words
    ("1,838", "1838"),
    ("", ""),
])
def test_normalize_answer(text, norm):
    assert normalize_answer(text) == norm


@pytest.mark.parametrize("pred, golds, reward, em", [
    ("Greenwich Village, New York City", ["Greenwich Village, New York City"], 1.0, True),
    ("greenwich village new york city.", ["Greenwich Village, New York City"], 1.0, True),
    ("the Animorphs", ["Animorphs"], 1.0, True),
    ("New York City", ["Greenwich Village, New York City"], 2 * (3 / 3) * (3 / 5) / (3 / 3 + 3 / 5), False),  # F1 0.75
    ("Greenwich", ["Greenwich Village, New York City"], 2 * 1 * 0.2 / 1.2, False),  # F1 1/3 >= 0.3
    ("York", ["Greenwich Village New York City Manhattan"], 0.0, False),  # F1 2/7 < 0.3
    ("Paris", ["London"], 0.0, False),
    ("yes", ["yes"], 1.0, True),
    ("yes", ["no"], 0.0, False),
    ("yes it is", ["yes"], 0.0, False),  # yes/no: no partial credit
    ("no answer", ["noanswer"], 0.0, False),
    ("", ["London"], 0.0, False),
    ("Tokyo", ["London", "tokyo"], 1.0, True),  # the best gold counts
])
def test_reward_table(pred, golds, reward, em):
    score = score_answer(pred, golds)
    assert score.reward == pytest.approx(reward) and score.em is em
    assert score.f1 == pytest.approx(1.0 if em else max(f1_score(pred, g) for g in golds))


def test_f1_threshold_is_configurable():
    assert score_answer("York", ["New York City"], f1_threshold=0.3).reward == pytest.approx(0.5)
    assert score_answer("York", ["New York City"], f1_threshold=0.6).reward == 0.0


@pytest.mark.parametrize("text, answer", [
    (r"I think \boxed{Paris} or maybe \boxed{Lyon}", "Lyon"),
    ("The capital is **Paris**, not **Lyon**.", "Paris"),
    ("After reading, the answer is: Marie Curie. Done.", "Marie Curie"),
    ("The film came out in 1994; therefore, 1994 is it.", "1994 is it"),
    ("She also liked it. Really.", "She also liked it"),  # "also" does not trigger a 'so' rule
    ("<think>the answer is wrong</think> Berlin is the city", "Berlin is the city"),
    ("Oslo", "Oslo"),
])
def test_fallback_extraction(text, answer):
    assert extract_fallback_answer(text) == answer


# ---- actions and observations -------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, parsed", [
    ("search[Ed Wood]", ("search", "Ed Wood")),
    ("  SEARCH[ Ed Wood ]  ", ("search", "Ed Wood")),
    ("search[[1] brackets]", ("search", "[1] brackets")),
    ("finish[Paris]", ("finish", "Paris")),
    ("finish[]", ("finish", "")),
    ("search[]", ("invalid", "search[] needs a query")),
    ("search[   ]", ("invalid", "search[] needs a query")),
    ("", ("invalid", "the action is empty")),
    ("search Ed Wood", ("other", "search Ed Wood")),
    ("search[Ed Wood", ("other", "search[Ed Wood")),
    ("I think finish[Paris]", ("other", "I think finish[Paris]")),
])
def test_parse_action(text, parsed):
    assert parse_action(text) == parsed


def test_overlong_query_is_invalid():
    kind, why = parse_action("search[" + "x" * 2001 + "]")
    assert kind == "invalid" and "2001" in why
    assert parse_action("search[" + "x" * 2000 + "]")[0] == "search"


def test_format_results_caps():
    hits = [{"id": "a", "content": "T\n" + "x" * 900, "score": 1.23456}, {"id": "b", "content": "short", "score": 0.5}]
    block = format_results(hits)
    first, second = block.split("\n\n")
    assert first.startswith("[Document 1] (ID: a, Score: 1.235)\nT\n") and first.endswith("x...")
    assert len(first.split("\n", 1)[1]) == 800 + 3
    assert second == "[Document 2] (ID: b, Score: 0.500)\nshort"
    capped = format_results(hits * 5, max_total_chars=1000)
    assert len(capped) == 1003 and capped.endswith("...")
    assert format_results([]) == "No relevant documents found for the query."


# ---- the procedural knowledge base --------------------------------------------------------------------------------
def test_kb_is_seeded_and_sized():
    a, b, c = build_kb(0, 2000), build_kb.__wrapped__(0, 2000), build_kb(1, 2000)
    assert a == b  # the cache holds what a fresh build gives
    assert a.docs != c.docs and a.train != c.train
    assert len(a.docs) == 2000 and len(build_kb(0, 300).docs) == 300
    assert len({d.id for d in a.docs}) == 2000 and len({d.title for d in a.docs}) == 2000
    with pytest.raises(ragen.ConfigError, match="kb_size"):
        build_kb(0, 10)


def test_kb_names_have_distinct_stems():
    """Each entity owns a pseudo-word; no two share a stemmed token that identifies them."""
    kb = build_kb(0, 2000)
    index = BM25Index(kb.docs[:1], title_weight=0)  # only for its tokenizer
    owners = {}
    for doc in kb.docs:
        for tok in index.tokenize([doc.title])[0]:
            owners.setdefault(tok, set()).add(doc.id)
    unique = {doc.id: [t for t in index.tokenize([doc.title])[0] if len(owners[t]) == 1] for doc in kb.docs}
    assert all(unique.values()), [d for d, toks in unique.items() if not toks][:5]


def test_kb_questions_need_two_documents():
    kb = build_kb(0, 2000)
    by_title = {d.title: d for d in kb.docs}
    questions = kb.train + kb.held_out
    kinds = {q.kind for q in questions}
    assert kinds == {"film-director-city", "book-author-year", "company-hq-country", "company-founder-year",
                     "company-founded-earlier"}
    for q in questions:
        first, second = (by_title[t] for t in q.support)
        answer = q.answers[0]
        assert q.support[0] in q.question  # the question names the first hop
        if q.kind == "company-founded-earlier":
            assert q.support[1] in q.question and answer in q.support
            years = [int(by_title[t].text.split(" in ")[1][:4]) for t in q.support]
            assert years[0] != years[1] and answer == q.support[years.index(min(years))]
        else:
            assert q.support[1] in first.text  # the first document leads to the second entity
            assert answer in second.text and answer not in first.text and answer not in q.question, q


def test_people_documents_do_not_name_their_works():
    kb = build_kb(0, 2000)
    works = [d.title for d in kb.docs if d.id.startswith(("film", "book", "company"))]
    people = [d for d in kb.docs if d.id.startswith("person")]
    assert all(w not in p.text for p in people[:300] for w in works)


def test_splits_are_disjoint_and_sized():
    kb = build_kb(0, 2000)
    n = len(kb.train) + len(kb.held_out)
    assert len(kb.held_out) == min(500, n // 10)
    assert not {q.qid for q in kb.train} & {q.qid for q in kb.held_out}
    qs = [Question(str(i), f"q{i}", ("a",), ("t",)) for i in range(100)]
    train, held = partition(qs, None)
    assert (len(train), len(held)) == (90, 10) and partition(qs, None) == (train, held)
    assert [int(q.qid) for q in train] == sorted(int(q.qid) for q in train)  # file order kept
    with pytest.raises(DataError, match="val_size"):
        partition(qs, 100)
    with pytest.raises(ragen.ConfigError, match="val_size"):
        ragen.make_env("searchqa", kb_size=120, val_size=10_000)


# ---- HotpotQA -----------------------------------------------------------------------------------------------------
@needs_hotpot
def test_hotpot_file_corpus():
    ds = load_hotpot_file(str(HOTPOT))
    assert (len(ds.train), len(ds.held_out), len(ds.docs)) == (90, 10, 991)  # the spec's counts
    assert len({(d.title, d.text) for d in ds.docs}) == 991
    records = json.loads(HOTPOT.read_text())
    q0 = next(q for q in ds.train + ds.held_out if q.question == records[0]["question"])
    assert q0.answers == ("yes",) and q0.support == ("Scott Derrickson", "Ed Wood")
    doc = next(d for d in ds.docs if d.title == "Scott Derrickson")
    assert doc.content.startswith("Scott Derrickson\nScott Derrickson (born July 16, 1966) is an American director")


@needs_hotpot
def test_hotpot_original_layout_gives_the_same_dataset():
    records = json.loads(HOTPOT.read_text())
    original = [
        {
            **r,
            "supporting_facts": [
                [t, s] for t, s in zip(r["supporting_facts"]["title"], r["supporting_facts"]["sent_id"])
            ],
            "context": [[t, s] for t, s in zip(r["context"]["title"], r["context"]["sentences"])],
        }
        for r in records
    ]
    a = records_to_dataset(records, "k", "n", None, "x")
    b = records_to_dataset(original, "k", "n", None, "x")
    assert a == b


def test_hotpot_errors(tmp_path):
    with pytest.raises(ragen.ConfigError, match="hotpot_file: source='hotpot' needs"):
        load_hotpot_file(None)
    with pytest.raises(ragen.ConfigError, match="does not exist"):
        load_hotpot_file(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"question": "q?", "answer": "a"}]))
    with pytest.raises(ragen.ConfigError, match="record 0 is not in HotpotQA format"):
        load_hotpot_file(str(bad))
    bad.write_text("{not json")
    with pytest.raises(ragen.ConfigError, match="is not JSON"):
        load_hotpot_file(str(bad))


@needs_hotpot
def test_hf_parquet_reader(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    from ragen_searchqa.hotpot import read_parquet_records

    records = json.loads(HOTPOT.read_text())
    pq.write_table(pa.Table.from_pylist(records[:60]), tmp_path / "train-00000-of-00002.parquet")
    pq.write_table(pa.Table.from_pylist(records[60:]), tmp_path / "train-00001-of-00002.parquet")
    rows = read_parquet_records(sorted(tmp_path.glob("*.parquet")), limit=80)
    assert len(rows) == 80 and rows[79]["question"] == records[79]["question"]
    assert records_to_dataset(rows, "k", "n", None, "x") == records_to_dataset(records[:80], "k", "n", None, "x")


def test_hf_offline_is_a_clear_error(monkeypatch):
    hub = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    with pytest.raises(DatasetUnavailableError) as info:
        ragen.make_env("searchqa-hf", hf_dataset="hotpotqa/not-a-cached-dataset")
    message = str(info.value)
    assert "\n" not in message and issubclass(DatasetUnavailableError, ragen.RagenError)
    assert message.startswith("searchqa-hf: the Hugging Face dataset hotpotqa/not-a-cached-dataset cannot be loaded "
                              "(HF_HUB_OFFLINE is set and it is not cached; ")
    assert message.endswith(
        "use the offline variants 'searchqa' (procedural KB) or 'searchqa-hotpot' with hotpot_file=PATH"
    )


def test_hf_offline_cli_prints_one_line():
    proc = subprocess.run(ragen_cmd("play", "searchqa-hf"), env={**os.environ, "HF_HUB_OFFLINE": "1"},
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("Error: searchqa-hf: the Hugging Face dataset hotpotqa/hotpot_qa cannot be loaded")


# ---- the server API -----------------------------------------------------------------------------------------------
def test_health_and_retrieve_schema(thread_server):
    url = thread_server.url
    assert url.startswith("http://127.0.0.1:")
    assert get(url + "/health") == (200, {"status": "ok", "num_docs": 64, "index": "bm25s"})
    status, out = post(url + "/retrieve", {"query": "alpha", "top_k": 3})
    assert status == 200 and list(out) == ["results"]
    results = out["results"]
    assert [set(r) for r in results] == [{"id", "content", "score"}] * 3
    scores = [r["score"] for r in results]
    assert scores == sorted(scores, reverse=True) and all(s > 0 for s in scores)
    assert {r["id"] for r in results} == {"d1", "d2", "d3"}
    assert next(r for r in results if r["id"] == "d2")["content"] == "Other\ndelta epsilon alpha alpha"


def test_ties_break_by_id(thread_server):
    _, out = post(thread_server.url + "/retrieve", {"query": "gamma", "top_k": 5})
    assert [r["id"] for r in out["results"]] == ["d1", "d3"]  # identical documents: id order
    assert out["results"][0]["score"] == out["results"][1]["score"]
    _, out = post(thread_server.url + "/retrieve", {"query": "common word", "top_k": 50})
    ids = [r["id"] for r in out["results"]]
    assert len(ids) == 50 and ids == sorted(ids)  # 60 equal scores: the first 50 ids


def test_top_k_default_and_no_match(thread_server):
    _, out = post(thread_server.url + "/retrieve", {"query": "common"})
    assert len(out["results"]) == 5
    for query in ("the of and", "unmatchedword"):  # stopwords only / unknown term: nothing scores
        assert post(thread_server.url + "/retrieve", {"query": query}) == (200, {"results": []})


@pytest.mark.parametrize("body, fragment", [
    (b"{not json", "malformed JSON"),
    (b"\xff\xfe", "malformed JSON"),
    (b"[1, 2]", "JSON object"),
    (b'"alpha"', "JSON object"),
    (b"{}", "query: must be a non-empty string"),
    (b'{"query": ""}', "query: must be a non-empty string"),
    (b'{"query": 5}', "query: must be a non-empty string"),
    (b'{"query": null}', "query: must be a non-empty string"),
    (json.dumps({"query": "x" * 2001}).encode(), "query: at most 2000 characters"),
    (b'{"query": "alpha", "top_k": 0}', "top_k"),
    (b'{"query": "alpha", "top_k": 51}', "top_k"),
    (b'{"query": "alpha", "top_k": "5"}', "top_k"),
    (b'{"query": "alpha", "top_k": true}', "top_k"),
    (b'{"query": "alpha", "top_k": 2.5}', "top_k"),
])
def test_bad_requests_are_400_with_json(thread_server, body, fragment):
    status, out = post(thread_server.url + "/retrieve", body)
    assert status == 400 and fragment in out["error"]


def test_http_level_errors_are_json(thread_server):
    url, port = thread_server.url, thread_server.server_address[1]
    assert get(url + "/nope")[0] == 404 and "no route" in get(url + "/nope")[1]["error"]
    assert post(url + "/nope", {"query": "a"})[0] == 404
    assert get(url + "/retrieve")[0] == 405
    assert post(url + "/health", {})[0] == 405
    status, out = raw_http(port, b"PUT /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    assert status == 405 and "not allowed" in out["error"]
    status, out = raw_http(port, b"POST /retrieve HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 411 and "Content-Length" in out["error"]
    status, out = raw_http(port, b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n")
    assert status == 413
    status, out = raw_http(port, b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n")
    assert status == 400
    status, out = raw_http(port, b"GARBAGE\r\n\r\n")
    assert status == 400 and "error" in out
    status, out = raw_http(port, b"BREW /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 405 and "error" in out
    assert get(url + "/health")[0] == 200  # still serving


def raw_reply(port, data: bytes) -> tuple[int, dict[str, str], bytes]:
    """(status, lower-cased headers, body) of the reply to raw bytes."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict((k.strip().lower(), v.strip()) for k, _, v in (line.partition(":") for line in lines[1:]))
    return int(lines[0].split()[1]), headers, body


@pytest.mark.parametrize("method", ["OPTIONS", "HEAD", "TRACE", "PUT", "DELETE", "PATCH", "CONNECT", "BREW"])
def test_unsupported_methods_are_405_with_allow(thread_server, method):
    """A regression: OPTIONS/HEAD/TRACE were answered 501."""
    port = thread_server.server_address[1]
    for path, allow in (("/retrieve", "POST"), ("/health", "GET")):
        status, headers, body = raw_reply(port, f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert status == 405 and headers["allow"] == allow, (method, path, status)
        assert (body == b"") == (method == "HEAD")  # a HEAD reply has no body
    status, _, _ = raw_reply(port, f"{method} /nope HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert status == 404


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize("body", [
    _nested(100_000),
    b'{"query": ' + _nested(100_000) + b"}",
    b'{"query": "alpha", "top_k": ' + b"9" * 5000 + b"}",
    b'{"query": "alpha", "top_k": 1e999}',
    b'{"query": "\\ud800"}',
    b"\x00" * 1000,
    b"{" * 50_000,
    b'{"query": "alpha"' + b', "x": 1' * 50_000 + b"}",
])
def test_no_5xx_on_malformed_bodies(thread_server, body):
    """A 100k-deep JSON array made the server drop the connection."""
    status, _, reply = raw_reply(
        thread_server.server_address[1],
        b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body,
    )
    assert 200 <= status < 500, (status, reply[:200])
    assert "error" in json.loads(reply) or "results" in json.loads(reply)
    assert get(thread_server.url + "/health")[0] == 200


def _hammer(url, queries, n=1000):
    """n clients connect at once (a barrier releases them together); every 10th sends broken JSON.
    Returns the (status, body) of each, in order."""
    barrier, out, errors = threading.Barrier(n), [None] * n, []

    def client(i):
        body = {"query": queries[i % len(queries)], "top_k": 1} if i % 10 else b"{broken"
        try:
            barrier.wait(timeout=120)
            out[i] = post(url + "/retrieve", body, timeout=120)
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(repr(exc))

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert not errors, errors[:3]
    for i, (status, body) in enumerate(out):
        if i % 10 == 0:
            assert status == 400 and "malformed JSON" in body["error"]
    assert get(url + "/health")[0] == 200
    return out


def test_thousand_concurrent_requests(thread_server):
    out = _hammer(thread_server.url, [f"tag{i}" for i in range(60)])
    for i, (status, body) in enumerate(out):
        if i % 10:
            assert status == 200 and body["results"][0]["id"] == f"x{i % 60:02d}", (i, status, body)


def test_thousand_concurrent_requests_on_the_env_server(env):
    """The same against the subprocess server the env started (the one rollouts use)."""
    docs = env.dataset.docs[::7]
    out = _hammer(env.retriever_url, [d.title for d in docs])
    for i, (status, body) in enumerate(out):
        if i % 10:
            assert status == 200 and body["results"][0]["id"] == docs[i % len(docs)].id, (i, body)
    env.reset(seed=0)
    assert env.step(f"search[{env.question.support[0]}]")[4]["action_is_valid"]


def test_title_field_weighting():
    """score = BM25(content) + title_weight * BM25(title); weight 0 is plain bm25s over title + text."""
    import bm25s
    import numpy as np

    docs = [
        Doc("a", "Roald Dahl", "Roald Dahl was a British novelist, short story writer, poet and screenwriter."),
        Doc("b", "The Best of Roald Dahl", "The Best of Roald Dahl is a collection of short stories by Roald Dahl."),
    ]
    docs += [Doc(f"f{i}", f"Filler {i}", f"unrelated text about topic{i} and more words") for i in range(20)]
    s0, s1, s2 = (BM25Index(docs, title_weight=w).scores("Roald Dahl") for w in (0, 1, 2))
    direct = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
    index0 = BM25Index(docs, title_weight=0)
    direct.index(index0.tokenize([d.content for d in docs]), show_progress=False)
    assert np.allclose(s0, direct.get_scores(index0.tokenize(["Roald Dahl"])[0]))
    assert np.allclose(s2 - s0, 2 * (s1 - s0)) and (s1 - s0)[:2].min() > 0 and np.all((s1 - s0)[2:] == 0)
    assert [d.id for d, _ in BM25Index(docs, title_weight=0).search("Roald Dahl", 2)] == ["b", "a"]  # repetitions win
    assert [d.id for d, _ in BM25Index(docs, title_weight=2).search("Roald Dahl", 2)] == ["a", "b"]  # exact title wins
    assert index0.stemming and [d.id for d, _ in index0.search("novelists", 1)] == ["a"]  # stemmed match


# ---- the env's server: subprocess on loopback, shared, stopped by close --------------------------------------------
def _small_key():
    return next(k for k in running_servers() if k.startswith("synthetic/k7n120"))


def test_server_is_shared_and_stopped_by_the_last_close():
    a = ragen.make_env("searchqa", **SMALL_KB)
    b = ragen.make_env("searchqa", **SMALL_KB)
    try:
        url, pid = a.retriever_url, a.server_pid
        assert url.startswith("http://127.0.0.1:") and url == b.retriever_url and pid == b.server_pid
        assert running_servers()[_small_key()] == (url, pid, 2)
        assert pid != os.getpid() and get(url + "/health")[1]["num_docs"] == 120
        other = ragen.make_env("searchqa", kb_size=120, kb_seed=8)  # another corpus: another server
        assert other.retriever_url != url
        other.close()
        a.close()
        assert get(url + "/health")[0] == 200  # b still holds it
        b.reset(seed=1)
        b.step("search[" + b.question.support[0] + "]")
        assert b.last_results
    finally:
        a.close()
        b.close()
    assert not any(k.startswith("synthetic/k7n120") for k in running_servers())
    assert process_gone(pid) and port_refuses(url)


def test_crashed_server_is_restarted():
    e = ragen.make_env("searchqa", **SMALL_KB)
    try:
        e.reset(seed=3)
        old_url, old_pid = e.retriever_url, e.server_pid
        os.kill(old_pid, 9)
        assert process_gone(old_pid)
        obs, *_ = e.step(f"search[{e.question.support[0]}]")
        assert e.server_pid != old_pid and e.retriever_url != old_url
        assert e.question.support[0] in obs
        new_url, new_pid = e.retriever_url, e.server_pid
    finally:
        e.close()
    assert process_gone(new_pid) and port_refuses(new_url)


def test_no_orphan_server_when_the_process_dies():
    """The trainer dies without close(): its server stops (it watches its stdin) and deletes its corpus folder."""
    code = ("import os, ragen\n"
            "e = ragen.make_env('searchqa', kb_size=120, kb_seed=9)\n"
            "print(e.server_pid, e.retriever_url, e._lease._server.workdir, flush=True)\n"
            "os._exit(0)  # no close(), no atexit\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    pid, url, workdir = proc.stdout.split()
    assert process_gone(int(pid), wait=15) and port_refuses(url)
    deadline = time.monotonic() + 10
    while Path(workdir).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(workdir).exists()


def test_external_retriever_url(thread_server):
    kb = build_kb(0, 120)
    server = RetrievalServer(BM25Index(kb.docs), "127.0.0.1", 0)
    server.start_in_thread()
    try:
        before = set(running_servers())
        e = ragen.make_env("searchqa", kb_size=120, retriever_url=server.url)
        assert set(running_servers()) == before and e.server_pid is None  # nothing started
        e.reset(seed=0)
        e.step(f"search[{e.question.support[0]}]")
        assert e.last_results[0]["content"].startswith(e.question.support[0])
        e.close()
        assert get(server.url + "/health")[0] == 200  # close() leaves a server it did not start alone
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(ragen.ConfigError, match="retriever_url: retrieval server .* unreachable"):
        ragen.make_env("searchqa", retriever_url=server.url)  # now closed
    with pytest.raises(ragen.ConfigError, match="retriever_url"):
        ragen.make_env("searchqa", retriever_url="localhost:80")


def test_client_reports_http_errors(thread_server):
    client = RetrieverClient(thread_server.url)
    with pytest.raises(RetrieverError, match="HTTP 400 top_k"):
        client.retrieve("alpha", top_k=99)


def test_user_corpus_file(tmp_path):
    kb = build_kb(0, 120)
    path = tmp_path / "corpus.jsonl"
    write_corpus(kb.docs[:50], path)
    assert read_corpus(path) == list(kb.docs[:50])
    e = ragen.make_env("searchqa", kb_size=120, corpus_file=str(path))
    try:
        assert get(e.retriever_url + "/health")[1]["num_docs"] == 50
    finally:
        e.close()
    path.write_text('{"id": 1, "title": "a", "text": "b"}\n{"id": 1, "title": "c", "text": "d"}\n')
    with pytest.raises(ragen.ConfigError, match="corpus_file: .*duplicate id '1'"):
        ragen.make_env("searchqa", corpus_file=str(path))
    path.write_text("not json\n")
    with pytest.raises(ragen.ConfigError, match="corpus_file: .*:1: expected"):
        ragen.make_env("searchqa", corpus_file=str(path))


def test_standalone_server_cli(tmp_path):
    kb = build_kb(0, 120)
    write_corpus(kb.docs, tmp_path / "c.jsonl")
    proc = subprocess.Popen([sys.executable, "-m", "ragen_searchqa.server", "--corpus", str(tmp_path / "c.jsonl"),
                             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = json.loads(proc.stdout.readline())
        assert ready["event"] == "ready" and ready["num_docs"] == 120 and ready["url"].startswith("http://127.0.0.1:")
        assert get(ready["url"] + "/health") == (200, {"status": "ok", "num_docs": 120, "index": "bm25s"})
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    bad = subprocess.run([sys.executable, "-m", "ragen_searchqa.server", "--corpus", str(tmp_path / "none.jsonl")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "cannot load the corpus" in bad.stderr


# ---- the env: observations, rewards, budget, seeding --------------------------------------------------------------
def test_reset_observation_and_task_id(env):
    obs, info = env.reset(seed=10003)
    q = env.question
    assert obs == f"Question: {q.question}\n{ACTIONS_LINE}"
    assert info["task_id"] == f"searchqa/synthetic/k0n2000/{q.qid}" and info["split"] == "train"
    assert env.render() == obs


def test_search_observation_format(env):
    env.reset(seed=10004)
    query = env.question.support[0]
    obs, reward, term, trunc, info = env.step(f"search[{query}]")
    assert (reward, term, trunc) == (0.0, False, False)
    assert info == {"success": False, "action_is_valid": True, "action_is_effective": True, "em": 0.0, "f1": 0.0,
                    "num_searches": 1}
    head, rest = obs.split("\n", 1)
    assert head == f"Search results for '{query}':" and obs.endswith(f"\n\n{ACTIONS_LINE}")
    hits = env.last_results
    assert len(hits) == 5 and hits[0]["content"].split("\n")[0] == query
    assert rest.startswith(f"[Document 1] (ID: {hits[0]['id']}, Score: {hits[0]['score']:.3f})\n{hits[0]['content']}")
    assert rest.count("[Document ") == 5 and "[Document 5] (ID: " in rest


def test_stopword_search_finds_nothing(env):
    env.reset(seed=1)
    obs, *_ = env.step("search[the of and]")
    assert obs == f"Search results for 'the of and':\nNo relevant documents found for the query.\n\n{ACTIONS_LINE}"


def test_finish_rewards(env):
    env.reset(seed=10005)
    gold = env.question.answers[0]
    obs, reward, term, trunc, info = env.step(f"finish[{gold.upper()}.]")
    assert (reward, term, trunc) == (1.0, True, False) and info["success"] and info["em"] == 1.0
    assert obs == f"Your answer: {gold.upper()}.. Reward: 1.00"
    with pytest.raises(RuntimeError):
        env.step("finish[x]")
    env.reset(seed=10005)
    obs, reward, term, trunc, info = env.step("finish[Nowhere Land]")
    assert (reward, term, info["success"], info["em"], info["f1"]) == (0.0, True, False, 0.0, 0.0)
    assert info["action_is_valid"]


def test_fallback_answer(env):
    env.reset(seed=10006)
    gold = env.question.answers[0]
    assert env.validate_action(f"I am sure the answer is {gold}.")
    obs, reward, term, trunc, info = env.step(f"I am sure the answer is {gold}.")
    assert (reward, term, info["action_is_valid"], info["em"]) == (1.0, True, False, 1.0)
    assert obs == f"Your answer (extracted): {gold}. Reward: 1.00"


def test_invalid_actions_change_nothing():
    e = ragen.make_env("searchqa", kb_size=2000, fallback_answer=False)
    try:
        obs0, _ = e.reset(seed=10007)
        for text in ("", "search[]", "hello there", "finish Paris", "search[" + "y" * 2001 + "]"):
            assert not e.validate_action(text)
            obs, reward, term, trunc, info = e.step(text)
            assert (reward, term, trunc) == (0.0, False, False)
            assert info["action_is_valid"] is False and info["action_is_effective"] is False
            assert obs.startswith("Invalid action: ") and obs.endswith(ACTIONS_LINE) and e.searches == []
        assert e.validate_action("search[x]") and e.validate_action("finish[x]")
    finally:
        e.close()


def test_max_steps_truncates_with_zero_reward():
    e = ragen.make_env("searchqa", max_steps=3)
    try:
        e.reset(seed=5)
        assert e.step("search[alpha]")[3] is False
        assert e.step("search[]")[3] is False
        obs, reward, term, trunc, info = e.step("search[beta]")
        assert (reward, term, trunc, info["success"]) == (0.0, False, True, False)
        assert obs.endswith(MAX_STEPS_TEXT)
        with pytest.raises(RuntimeError):
            e.step("finish[x]")
    finally:
        e.close()


def test_seeding_and_splits(env):
    other = ragen.make_env("searchqa")
    try:
        for seed in (0, 1, 10000, 123):
            assert env.reset(seed=seed) == other.reset(seed=seed)
        assert env.reset(seed=7, options={"rollout_index": 3})[0] == env.reset(seed=7)[0]
        n_train, n_held = len(env.dataset.train), len(env.dataset.held_out)
        assert env.reset(seed=5)[0] == env.reset(seed=5 + n_train)[0]  # index = seed mod |split|
        train_ids = {env.reset(seed=s)[1]["task_id"] for s in range(200)}
        val_ids = {env.reset(seed=s, options={"split": "val"})[1]["task_id"] for s in range(n_held)}
        assert len(val_ids) == n_held and not train_ids & val_ids
        assert env.reset(seed=3, options={"split": "test"})[0] == env.reset(seed=3, options={"split": "val"})[0]
        assert env.reset(seed=99, options={"task_index": 4})[1]["task_index"] == 4
        with pytest.raises(ragen.ConfigError, match="task_index"):
            env.reset(seed=0, options={"task_index": n_train})
        with pytest.raises(ragen.ConfigError, match="unknown reset options"):
            env.reset(seed=0, options={"level": 2})
        kinds = {env.reset(seed=10000 + s)[1]["task_id"].split("/")[3] for s in range(16)}
        assert len(kinds) >= 4  # consecutive training seeds mix the templates
    finally:
        other.close()


@pytest.mark.parametrize("options, key", [
    ({"source": "wiki"}, "source"), ({"kb_size": 10}, "kb_size"), ({"top_k": 0}, "top_k"), ({"top_k": 51}, "top_k"),
    ({"max_steps": 0}, "max_steps"), ({"f1_threshold": 1.5}, "f1_threshold"), ({"title_weight": -1}, "title_weight"),
    ({"val_size": -1}, "val_size"), ({"retriever_url": "ftp://x"}, "retriever_url"),
    ({"server_start_timeout": 0}, "server_start_timeout"), ({"max_doc_chars": 0}, "max_doc_chars"),
])
def test_bad_config_is_a_config_error(options, key):
    with pytest.raises(ragen.ConfigError, match=key):
        ragen.make_env("searchqa", **options)


def test_variants_and_instructions():
    listed = {c.name: c.dist for c in ragen.list_envs()}
    assert {n: listed.get(n) for n in ("searchqa", "searchqa-hotpot", "searchqa-hf")} == dict.fromkeys(
        ("searchqa", "searchqa-hotpot", "searchqa-hf"), "ragen-searchqa")
    e = ragen.make_env("searchqa", top_k=3, max_steps=7)
    try:
        cfg = e.config
        assert (cfg.max_turns, cfg.max_actions_per_turn, cfg.max_actions_per_episode, cfg.max_tokens) == (5, 1, 10, 300)
        assert "returns the 3 documents" in e.instructions and "after 7 actions" in e.instructions
        assert "search[query]" in e.instructions and "finish[answer]" in e.instructions and "<think>" in e.instructions
        assert e.action_names is None and e.symbol_legend is None and e.deterministic and e.procedural
    finally:
        e.close()


# ---- the expert -----------------------------------------------------------------------------------------------------
def test_expert_solves_synthetic_episodes_with_real_retrieval(env):
    """200 train and 50 val episodes: each expert search returns its gold document, the answer is in the retrieved
    text of the second hop, and the expert's answer is an exact match."""
    by_title = {d.title: d for d in env.dataset.docs}
    for split, seeds in (("train", range(10_000, 10_200)), ("val", range(123, 173))):
        for seed in seeds:
            ep, searches, info = play_expert(env, seed, split=split)
            q = env.question
            assert ep.success and info["em"] == 1.0 and ep.actions_used == 3, (seed, q)
            assert [s for s, _ in searches] == list(q.support)
            for title, results in searches:
                assert by_title[title].id in [r["id"] for r in results[:5]], (seed, title)
            if q.kind != "company-founded-earlier":
                assert q.answers[0] in by_title[q.support[1]].content


@needs_hotpot
def test_hotpot_gold_titles_in_top5_and_expert_em(hotpot_env):
    """All 100 questions: a search for each gold title returns the gold paragraph in the top 5; expert EM = 1.0."""
    ds = hotpot_env.dataset
    records = {r["question"]: r for r in json.loads(HOTPOT.read_text())}
    doc_id = {(d.title, d.text): d.id for d in ds.docs}
    ems = []
    for split, items in (("train", ds.train), ("val", ds.held_out)):
        for i in range(len(items)):
            ep, searches, info = play_expert(hotpot_env, task_index=i, split=split)
            rec = records[hotpot_env.question.question]
            context = {t: "".join(s) for t, s in zip(rec["context"]["title"], rec["context"]["sentences"])}
            for title, results in searches:
                assert doc_id[(title, context[title])] in [r["id"] for r in results[:5]], (rec["question"], title)
            assert len(searches) == len(set(rec["supporting_facts"]["title"]))
            ems.append(info["em"])
    assert len(ems) == 100 and sum(ems) == 100


def test_expert_respects_a_small_budget():
    e = ragen.make_env("searchqa", max_turns=2)
    try:
        ep, searches, info = play_expert(e, 10_001)
        assert ep.success and len(searches) == 1 and ep.actions_used == 2
        assert "So the answer is" not in e.expert.rationale(e)  # episode over: no plan
    finally:
        e.close()


def test_expert_rationale_follows_the_hops(env):
    env.reset(seed=10_010)
    q = env.question
    assert q.support[0] in env.expert.rationale(env)
    env.step(env.expert.next_actions(env, 1)[0])
    assert q.hops[0] in env.expert.rationale(env) and q.support[1] in env.expert.rationale(env)
    env.step(env.expert.next_actions(env, 1)[0])
    assert env.expert.rationale(env).endswith(f"So the answer is {q.answers[0]}.")
    assert env.expert.next_actions(env, 5) == [f"finish[{q.answers[0]}]"]


# ---- the env contract ---------------------------------------------------------------------------------------------
@pytest.mark.filterwarnings(NO_SPEC_WARNING)
def test_ragen_check_env_searchqa(env):
    checks = check_env("searchqa")
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    assert any(c.name == "expert" and c.detail == "expert solved 20/20 episodes" for c in checks)


@needs_hotpot
@pytest.mark.filterwarnings(NO_SPEC_WARNING)
def test_ragen_check_env_hotpot(hotpot_env):
    checks = check_env("searchqa-hotpot", hotpot_file=str(HOTPOT))
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]


@pytest.mark.filterwarnings(NO_SPEC_WARNING)
@pytest.mark.parametrize("name", ["searchqa", "searchqa-hotpot"])
def test_gymnasium_check_env(name):
    if name == "searchqa-hotpot" and not HOTPOT.is_file():
        pytest.skip(f"shared HotpotQA data not found at {HOTPOT}")
    e = ragen.make_env(name, **({"hotpot_file": str(HOTPOT)} if name == "searchqa-hotpot" else SMALL_KB))
    url, pid = e.retriever_url, e.server_pid
    gym_checker.check_env(e, skip_close_check=False)
    e.close()
    if not any(k.startswith(("synthetic/k7n120", "hotpot/")) for k in running_servers()):
        assert process_gone(pid) and port_refuses(url)


def test_close_is_idempotent_and_releases_once():
    a = ragen.make_env("searchqa", **SMALL_KB)
    b = ragen.make_env("searchqa", **SMALL_KB)
    url, pid = a.retriever_url, a.server_pid
    a.close()
    a.close()  # must not release b's reference
    assert running_servers()[_small_key()][2] == 1 and get(url + "/health")[0] == 200
    b.close()
    assert process_gone(pid) and port_refuses(url)


# ---- training smoke test ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_two_step_training_run(tmp_path):
    _, rows = run_two_steps("searchqa", tmp_path)
    steps = [r for r in rows if "rollout/success" in r]
    assert len(steps) == 2
    assert all("rollout/searchqa/success" in r for r in steps)
