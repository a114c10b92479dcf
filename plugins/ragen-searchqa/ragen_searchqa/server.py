"""The retrieval server: a stdlib ``ThreadingHTTPServer`` over a BM25 index.

API (JSON in and out; every error is JSON ``{"error": message}`` with a 4xx status):

* ``POST /retrieve`` ``{"query": str, "top_k": int}`` -> ``{"results": [{"id", "content", "score"}]}``, sorted by
  score, ties by id. ``top_k`` defaults to 5, at most 50; the query is a non-empty string of at most 2,000
  characters. Bad JSON, a wrong type or an out-of-range value -> 400; no ``Content-Length`` -> 411; a body over
  1 MiB -> 413. Any other method -> 405 with ``Allow``; an unknown path -> 404. No input gets a 5xx.
* ``GET /health`` -> ``{"status": "ok", "num_docs": N, "index": "bm25s"}``.

Standalone: ``python -m ragen_searchqa.server --corpus corpus.jsonl --port 8000`` (a JSONL corpus of ``{id, title,
text}``; ``--hotpot FILE`` indexes the paragraphs of a HotpotQA JSON file instead). When started by the env it
binds 127.0.0.1 on port 0, prints one JSON line ``{"event": "ready", "url": ..., ...}`` on stdout once it serves,
and (``--watch-stdin``) stops when its stdin closes, so it never outlives the process that started it; if that
process died (EOF without a ``stop`` line) it also deletes ``--owned-dir``, the temporary folder of its corpus.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ragen_searchqa.data import Doc, read_corpus
from ragen_searchqa.index import BM25Index
from ragen_searchqa.limits import MAX_QUERY_CHARS, MAX_TOP_K

DEFAULT_TOP_K = 5
MAX_BODY_BYTES = 1 << 20
ROUTE_METHODS = {"/health": "GET", "/retrieve": "POST"}  #: the Allow header of a 405


class BadRequest(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def parse_retrieve_request(body: bytes) -> tuple[str, int]:
    """``(query, top_k)`` from a ``/retrieve`` body, or ``BadRequest(400, why)``."""
    try:
        payload = json.loads(body.decode("utf-8"))
    except RecursionError:  # e.g. a 100k-deep array: Python's parser recurses per level
        raise BadRequest(400, "malformed JSON: nested too deeply") from None
    except ValueError as exc:  # bad UTF-8, bad JSON, an integer past Python's digit limit
        raise BadRequest(400, f"malformed JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise BadRequest(400, "the body must be a JSON object {\"query\": str, \"top_k\": int}")
    query = payload.get("query")
    if not isinstance(query, str) or not query.strip():
        raise BadRequest(400, "query: must be a non-empty string")
    if len(query) > MAX_QUERY_CHARS:
        raise BadRequest(400, f"query: at most {MAX_QUERY_CHARS} characters, got {len(query)}")
    top_k = payload.get("top_k", DEFAULT_TOP_K)
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
        raise BadRequest(400, f"top_k: must be an integer in [1, {MAX_TOP_K}], got {json.dumps(top_k)}")
    return query, top_k


class RetrievalHandler(BaseHTTPRequestHandler):
    server: RetrievalServer
    protocol_version = "HTTP/1.1"
    server_version = "ragen-searchqa"
    timeout = 60  # a client that stops sending mid-request does not hold a thread forever

    # ---- routes -------------------------------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path == "/health":
            self._json(200, {"status": "ok", "num_docs": len(self.server.index.docs), "index": "bm25s"})
        else:
            self._unsupported_method()

    def do_POST(self) -> None:  # noqa: N802
        if self.path != "/retrieve":
            self._unsupported_method()
            return
        try:
            query, top_k = parse_retrieve_request(self._body())
        except BadRequest as exc:
            self._json(exc.status, {"error": exc.message})
            return
        hits = self.server.index.search(query, top_k)
        self._json(200, {"results": [{"id": d.id, "content": d.content, "score": s} for d, s in hits]})

    def __getattr__(self, name: str):
        """Every other method (PUT, HEAD, OPTIONS, TRACE, BREW, ...) is a 405 naming the route's methods, not
        http.server's 501."""
        if name.startswith("do_"):
            return self._unsupported_method
        raise AttributeError(name)

    def _unsupported_method(self) -> None:
        self.close_connection = True  # a body it may have sent is not read: the connection cannot be reused
        allow = ROUTE_METHODS.get(self.path)
        if allow is None:
            self._json(404, {"error": f"no route {self.path!r}; use POST /retrieve or GET /health"})
        else:
            self._method_not_allowed(allow)

    # ---- plumbing -----------------------------------------------------------------------------------------------
    def _body(self) -> bytes:
        length = self.headers.get("Content-Length")
        if length is None:
            self.close_connection = True
            raise BadRequest(411, "Content-Length is required")
        try:
            n = int(length)
        except ValueError:
            self.close_connection = True
            raise BadRequest(400, f"bad Content-Length {length!r}") from None
        if n < 0 or n > MAX_BODY_BYTES:
            self.close_connection = True  # the body is not read: the connection cannot be reused
            raise BadRequest(413 if n > 0 else 400, f"the body must be 0..{MAX_BODY_BYTES} bytes, got {n}")
        return self.rfile.read(n)

    def _method_not_allowed(self, allow: str) -> None:
        self._json(
            405, {"error": f"method {self.command} not allowed on {self.path}; allowed: {allow}"}, {"Allow": allow}
        )

    def _json(self, status: int, payload: dict, headers: dict | None = None) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own errors (bad request line, unsupported method, ...) as JSON too."""
        self.close_connection = True
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "error"
        if getattr(self, "command", None) is None:
            self.command = ""
        if getattr(self, "request_version", "HTTP/0.9") == "HTTP/0.9":
            self.request_version = "HTTP/1.0"  # an unparsable request line still gets a status line and headers
        self._json(code, {"error": message or phrase})

    def log_message(self, format: str, *args) -> None:  # noqa: A002
        if self.server.verbose:
            super().log_message(format, *args)


class RetrievalServer(ThreadingHTTPServer):
    """A threaded HTTP server holding one index; a deep accept queue absorbs bursts of concurrent clients."""

    daemon_threads = True
    request_queue_size = 1024

    def __init__(self, index: BM25Index, host: str = "127.0.0.1", port: int = 0, verbose: bool = False):
        self.index, self.verbose = index, verbose
        super().__init__((host, port), RetrievalHandler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def start_in_thread(self) -> threading.Thread:
        """Serve from a daemon thread (tests and in-process use); stop with ``shutdown()`` then ``server_close()``."""
        thread = threading.Thread(target=self.serve_forever, name="searchqa-retriever", daemon=True)
        thread.start()
        return thread


def _load_docs(args: argparse.Namespace) -> list[Doc]:
    if args.hotpot:
        from ragen_searchqa.hotpot import load_hotpot_file

        return list(load_hotpot_file(args.hotpot, val_size=0).docs)
    return read_corpus(args.corpus)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ragen_searchqa.server", description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--corpus", help="JSONL corpus of {id, title, text}")
    source.add_argument("--hotpot", help="HotpotQA-format JSON file: index its context paragraphs")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=8000, help="port (0 = a free one, printed in the ready line)")
    parser.add_argument("--title-weight", type=float, default=1.0, help="weight of the title field (0 = content only)")
    parser.add_argument("--watch-stdin", action="store_true", help="stop when stdin closes (used by the env)")
    parser.add_argument("--owned-dir", help="with --watch-stdin: a folder to delete if the parent died (its corpus)")
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    args = parser.parse_args(argv)
    try:
        docs = _load_docs(args)
    except Exception as exc:  # one line for the parent's error message
        print(f"ragen_searchqa.server: cannot load the corpus: {exc}", file=sys.stderr)
        return 2
    server = RetrievalServer(BM25Index(docs, args.title_weight), args.host, args.port, args.verbose)
    if args.watch_stdin:
        threading.Thread(target=_stop_on_eof, args=(server,), daemon=True).start()
    print(json.dumps({"event": "ready", "url": server.url, "port": server.server_address[1], "num_docs": len(docs),
                      "stemming": server.index.stemming}), flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    if args.owned_dir and getattr(server, "parent_died", False):
        # a dead parent cannot delete the folder holding our corpus, so we do (a live one does it itself, and may
        # still need the corpus to restart us)
        shutil.rmtree(args.owned_dir, ignore_errors=True)
    return 0


def _stop_on_eof(server: RetrievalServer) -> None:
    """Stop when stdin closes. A parent stopping us writes ``stop`` first; EOF without it means the parent died."""
    server.parent_died = b"stop" not in sys.stdin.buffer.read()
    server.shutdown()


if __name__ == "__main__":
    sys.exit(main())
