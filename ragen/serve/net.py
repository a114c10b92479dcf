"""What the servers and their clients share on the wire: the token's variable, the longest action, loopback, the
caps on what a client accepts from a server, and one bounded HTTP GET."""

from __future__ import annotations

import functools
import http.client
import ipaddress
import re
import socket
import threading
import time
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlparse, urlunparse

from ragen.config.bounded import BoundedReadError, clip, parse_json, read_stream

#: the environment variable holding the shared token, read by ``ragen serve-env`` and by every client (``remote``,
#: the ``openenv`` plugin): a token on the command line would be visible to every user in ``ps``
TOKEN_ENV = "RAGEN_ENV_TOKEN"
#: characters of one action (or answer) a server accepts; longer is refused before the env sees it
MAX_ACTION_CHARS = 100_000
#: bytes of one answer (an HTTP body, a WebSocket message) a client accepts from an env server
MAX_ANSWER_BYTES = 8 << 20
#: characters of one observation a client accepts by default (the ``max_observation_chars`` option of the clients)
MAX_OBSERVATION_CHARS = 100_000
#: action names a client accepts from a server, and characters of one
MAX_ACTION_NAMES, MAX_ACTION_NAME_CHARS = 1_000, 200
#: the largest reward (in absolute value) a client accepts from a server: past it a number is an overflow, not a score
MAX_ABS_REWARD = 1e6
#: bytes of an answer's status line and headers a client reads (http.client alone allows 100 lines of 64 KiB each),
#: and of a request's head the OpenEnv server takes (ragen/serve/openenv.py)
MAX_HEADER_BYTES = 64 << 10

#: URL query keys whose values are secrets (``?token=...``)
_SECRET_QUERY = re.compile(r"(^|_)(token|key|api_?key|password|passwd|secret|auth|access_token|sig|signature)$",
                           re.I)
REDACTED = "<redacted>"


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost`` or a loopback address)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def redact_url(url: str) -> str:
    """``url`` fit to print or record: a password or user in its userinfo and the value of a secret-named query key
    (``token=``, ``key=``, ``api_key=``...) replaced by ``<redacted>``; anything that is no URL comes back as is."""
    try:
        parsed = urlparse(url)
    except ValueError:
        return url
    if not parsed.scheme or not parsed.netloc:
        return url
    netloc = parsed.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rpartition('@')[2]}"
    query = parsed.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(_SECRET_QUERY.search(k) for k, _ in pairs):
            query = urlencode([(k, REDACTED if _SECRET_QUERY.search(k) else v) for k, v in pairs], safe="<>")
    return urlunparse(parsed._replace(netloc=netloc, query=query))


def http_base(url: str) -> str:
    """``url`` without userinfo, query and fragment: what requests go to (a token travels in a header, never in a
    URL that a proxy or a log keeps)."""
    parsed = urlparse(url)
    return urlunparse(parsed._replace(netloc=parsed.netloc.rpartition("@")[2], query="", fragment=""))


class HeadTooLarge(http.client.HTTPException):
    """An answer's status line and headers are over ``MAX_HEADER_BYTES``."""


class _HeadLimited:
    """The response's file while its status line and headers are read: ``readline`` stops past the cap; everything
    else is the file's own."""

    def __init__(self, fp: Any, cap: int):
        self._fp, self._left, self._cap = fp, cap, cap

    def readline(self, limit: int = -1) -> bytes:
        line = self._fp.readline(self._left + 1 if limit is None or limit < 0 else min(limit, self._left + 1))
        self._left -= len(line)
        if self._left < 0:
            raise HeadTooLarge(f"the status line and headers are over the {self._cap}-byte cap")
        return line

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fp, name)


class CappedResponse(http.client.HTTPResponse):
    """http.client's response, reading at most ``MAX_HEADER_BYTES`` of status line and headers (``begin``); the body
    is read from the plain file, bounded by its reader (``read_stream``)."""

    def begin(self) -> None:
        fp = self.fp
        self.fp = _HeadLimited(fp, MAX_HEADER_BYTES)
        try:
            super().begin()
        finally:
            if self.fp is not None:
                self.fp = fp


class Watchdog:
    """Shuts the socket of one request down at its deadline: a peer trickling bytes, or silent, loses the
    connection at the deadline of the whole exchange, whatever the per-read time-out. ``start=False``: the clock
    starts when the first socket is attached (a request waiting for a free connection of a pool is not late yet);
    ``deadline`` is then the ``time.monotonic()`` value it fires at."""

    def __init__(self, seconds: float, start: bool = True):
        self.fired = False
        self.seconds = seconds
        self.deadline: float | None = None
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._cancelled = False
        if start:
            self._start()

    def _start(self) -> None:
        self.deadline = time.monotonic() + self.seconds
        self._timer = threading.Timer(self.seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def attach(self, sock: socket.socket) -> None:
        with self._lock:
            self._sock = sock
            if self._timer is None and not self._cancelled:
                self._start()
            if self.fired:
                self._shut()

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            self._shut()

    def _shut(self) -> None:
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cancel(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._cancelled = True  # a late attach starts no clock


def _watched(base: type, watchdog: Watchdog) -> Any:
    class Watched(base):
        response_class = CappedResponse

        def connect(self) -> None:
            super().connect()
            watchdog.attach(self.sock)

    return Watched


def get_bounded(url: str, *, headers: dict, timeout_s: float, source: str, max_bytes: int = MAX_ANSWER_BYTES,
                use_proxy: bool = True) -> tuple[int, Any]:
    """``GET url``: ``(status, JSON body or None)`` within ``timeout_s`` for the whole exchange (connect, headers,
    body), at most ``MAX_HEADER_BYTES`` of status line and headers and ``max_bytes`` of body, JSON nested at most
    ``MAX_JSON_DEPTH`` levels. A lost, slow, oversize or malformed answer is one ``BoundedReadError`` naming
    ``source``; a non-JSON error body reads as None."""
    import urllib.error
    import urllib.request

    watchdog = Watchdog(timeout_s)
    deadline = time.monotonic() + timeout_s

    class Http(urllib.request.HTTPHandler):
        def do_open(self, http_class, req, **kw):
            return super().do_open(_watched(http_class, watchdog), req, **kw)

    class Https(urllib.request.HTTPSHandler):
        def do_open(self, http_class, req, **kw):
            return super().do_open(_watched(http_class, watchdog), req, **kw)

    handlers: list[Any] = [Http(), Https()]
    if not use_proxy:
        handlers.append(urllib.request.ProxyHandler({}))
    opener = urllib.request.build_opener(*handlers)
    request = urllib.request.Request(url, headers=headers)
    try:
        try:
            resp = opener.open(request, timeout=timeout_s)
            status = resp.status
        except urllib.error.HTTPError as exc:  # a 4xx/5xx: its body may say why
            resp, status = exc, exc.code
        with resp:
            raw = read_stream(functools.partial(_read1, resp), source=source, max_bytes=max_bytes,
                              deadline=deadline)
    except BoundedReadError:
        raise
    except HeadTooLarge as exc:
        raise BoundedReadError(f"{source}: {exc}") from None
    except (OSError, http.client.HTTPException, ValueError) as exc:  # refused, reset, DNS, time-out, torn body
        if watchdog.fired:
            raise BoundedReadError(f"{source}: no whole answer within {timeout_s:g} s") from None
        raise BoundedReadError(f"{source}: {type(exc).__name__}: {clip(exc, 200)}") from None
    finally:
        watchdog.cancel()
    if watchdog.fired:
        raise BoundedReadError(f"{source}: no whole answer within {timeout_s:g} s")
    if status >= 400:
        try:
            return status, parse_json(raw, source=source, max_bytes=max_bytes)
        except BoundedReadError:
            return status, None
    return status, parse_json(raw, source=source, max_bytes=max_bytes)


def _read1(resp: Any, n: int) -> bytes:
    """One read of what is available (``read1``), never "wait for n bytes" (``read``), so the deadline is checked
    between the trickled bytes."""
    read1 = getattr(resp, "read1", None)
    return read1(n) if read1 is not None else resp.read(n)
