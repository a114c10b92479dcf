"""A hostile HTTP server for the client-side bounds: it answers each path with crafted bytes (any size, any JSON,
trickled one chunk at a time), on a free loopback port, in a thread. The `remote` and `openenv` clients are tested
against it through their public path (``ragen.make_env``)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable


class Answer:
    """What a path answers: ``body`` (bytes, or any JSON value), its status, and optionally a trickle (``chunk`` bytes
    every ``every_s`` seconds) or an announced length larger than what is sent; ``head_every_s``: the status line and
    headers are trickled too, one byte every that many seconds; ``head_padding``: that many bytes of extra headers
    (lines of 8,000 bytes) before the body."""

    def __init__(self, body, status=200, chunk=0, every_s=0.0, content_length=None, head_every_s=0.0,
                 head_padding=0):
        self.body = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.status, self.chunk, self.every_s = status, chunk, every_s
        self.head_every_s, self.head_padding = head_every_s, head_padding
        self.content_length = len(self.body) if content_length is None else content_length


class CraftedServer:
    """``answers``: path -> ``Answer`` (or a callable of the request body returning one); unknown paths are 404."""

    def __init__(self, answers: dict[str, Answer | Callable[[bytes], Answer]]):
        self.answers = answers
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stopping = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        try:
            with conn:
                conn.settimeout(30)
                reader = conn.makefile("rb")
                while True:
                    line = reader.readline()
                    if not line:
                        return
                    method, path, _ = line.decode("latin-1").split(" ", 2)
                    length = 0
                    while (header := reader.readline()) not in (b"\r\n", b"\n", b""):
                        name, _, value = header.decode("latin-1").partition(":")
                        if name.strip().lower() == "content-length":
                            length = int(value.strip())
                    body = reader.read(length) if length else b""
                    answer = self.answers.get(path.split("?")[0], Answer({"detail": "Not Found"}, 404))
                    if callable(answer):
                        answer = answer(body)
                    padding = "".join(f"X-Pad-{i}: {'p' * 8000}\r\n"
                                      for i in range(-(-answer.head_padding // 8000)))
                    head = (f"HTTP/1.1 {answer.status} X\r\nContent-Type: application/json\r\n{padding}"
                            f"Content-Length: {answer.content_length}\r\n\r\n").encode()
                    if answer.head_every_s:
                        for i in range(len(head)):
                            if self.stopping.is_set():
                                return
                            conn.sendall(head[i:i + 1])
                            time.sleep(answer.head_every_s)
                    else:
                        conn.sendall(head)
                    if answer.chunk:
                        for i in range(0, len(answer.body), answer.chunk):
                            if self.stopping.is_set():
                                return
                            conn.sendall(answer.body[i:i + answer.chunk])
                            time.sleep(answer.every_s)
                    else:
                        conn.sendall(answer.body)
                    if answer.content_length != len(answer.body):
                        return  # announced more than it sent: the connection ends short
        except (OSError, ValueError):
            return

    def stop(self):
        self.stopping.set()
        self.sock.close()


class HalfSentFlood:
    """The slow-loris side of the attack on a server: ``half`` connections that send a POST's head to ``path`` and half
    its body, ``silent`` that send nothing, and one that trickles a request head one byte every 0.5 s (never idle).
    ``connections`` are all of them, for checking that the server closes each; leaving the block stops the trickle
    and closes what is left."""

    def __init__(self, port: int, path: str, half: int = 150, silent: int = 0):
        self.port, self.path, self.n_half, self.n_silent = port, path, half, silent
        self.stop = threading.Event()
        self.half: list[socket.socket] = []
        self.trickle: socket.socket | None = None

    def __enter__(self) -> HalfSentFlood:
        for i in range(self.n_half + self.n_silent):
            c = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            if i < self.n_half:
                c.sendall(f"POST {self.path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          "Content-Length: 100\r\n\r\n{\"seed\": ".encode())
            self.half.append(c)
        self.trickle = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        threading.Thread(target=self._drip, daemon=True).start()
        return self

    def _drip(self) -> None:
        try:
            for byte in f"POST {self.path} HTTP/1.1\r\nHost: x\r\n".encode() * 10:
                if self.stop.wait(0.5):
                    return
                self.trickle.sendall(bytes([byte]))
        except OSError:
            return  # closed by the server: what the test wants

    @property
    def connections(self) -> list[socket.socket]:
        return [*self.half, self.trickle]

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for c in self.half:
            c.close()
