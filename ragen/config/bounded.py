"""The bounded reader: every byte ragen takes from a place it does not control (a server's answer, a frame, a JSON
file in a run or model folder, plugin metadata) goes through here before it is used.

A read has a size cap, a wall-clock deadline for the whole read (not per socket read: a peer sending one byte every
few seconds still fails at the deadline), a nesting depth for JSON, and for files: regular files only (no
``/dev/zero``, no FIFO) and, given a folder, no symbolic link pointing out of it. Every failure is one
``BoundedReadError`` line naming the source (docs/security.md lists every boundary and its caps).
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ragen.errors import RagenError

#: bytes of one JSON file in a run or model folder (a model record, a checkpoint's ``latest``, run.json...)
MAX_FILE_BYTES = 16 << 20
#: bytes of one JSONL log of a run folder (metrics.jsonl, trajectories.jsonl) read back by resume, plot and report
MAX_JSONL_BYTES = 4 << 30
#: nesting levels of one JSON document: deeper is refused before the parser (or any code walking it) recurses
MAX_JSON_DEPTH = 64
#: characters of a peer's text (an error message, a reason) kept for a log line
MAX_LOGGED_CHARS = 300

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)  # unrolled: linear, no backtracking per char
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069]+")


class BoundedReadError(RagenError):
    """Bytes from outside that are too large, too slow, too deep, not a regular file or not the JSON expected."""


def clip(text: Any, limit: int = MAX_LOGGED_CHARS) -> str:
    """``text`` for a log line: control and escape characters (a terminal escape sequence, newlines) replaced by one
    space each run, at most ``limit`` characters."""
    flat = _CONTROL.sub(" ", str(text)).strip()
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def json_depth_over(data: bytes, max_depth: int) -> bool:
    """Whether the JSON text ``data`` nests deeper than ``max_depth`` (strings are skipped; linear-time passes in C,
    never a recursion)."""
    brackets = _STRING.sub(b"", data).translate(None, bytes(c for c in range(256) if c not in b"[]{}"))
    for _ in range(max_depth):
        if not brackets:
            return False
        inner = brackets.replace(b"[]", b"").replace(b"{}", b"")
        if inner == brackets:  # only unmatched brackets left: not JSON (the parser says where), deep if many
            return len(brackets) > max_depth
        brackets = inner
    return bool(brackets)


def parse_json(data: bytes | str, *, source: str, max_bytes: int = MAX_FILE_BYTES,
               max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``data`` as JSON: at most ``max_bytes``, nested at most ``max_depth`` levels, no NaN/Infinity, no integer past
    Python's digit limit; anything else is one ``BoundedReadError`` naming ``source``."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if len(raw) > max_bytes:
        raise BoundedReadError(f"{source}: {len(raw)} bytes, over the {max_bytes}-byte cap")
    if json_depth_over(raw, max_depth):
        raise BoundedReadError(f"{source}: JSON nested deeper than {max_depth} levels")
    try:
        return json.loads(raw, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, NaN, an integer of > 4,300 digits
        raise BoundedReadError(f"{source}: not valid JSON ({clip(exc, 120)})") from None


def read_file(path: str | os.PathLike, *, source: str | None = None, max_bytes: int = MAX_FILE_BYTES,
              inside: str | os.PathLike | None = None) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes``; a device (``/dev/zero``), a FIFO, a folder, a
    file over the cap, or (given ``inside``) a path whose symbolic links lead out of that folder is refused with
    one line. A missing file raises ``FileNotFoundError`` (callers decide what absence means)."""
    path = Path(path)
    source = source or str(path)
    if inside is not None:
        root = Path(inside).resolve()
        real = path.resolve()
        if real != root and root not in real.parents:
            raise BoundedReadError(f"{source}: leads out of {str(root)!r} (a symbolic link); refused")
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; the type is checked on the open descriptor
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise BoundedReadError(f"{source}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BoundedReadError(f"{source}: not a regular file (a device, FIFO or folder); refused")
        if info.st_size > max_bytes:
            raise BoundedReadError(f"{source}: {info.st_size} bytes, over the {max_bytes}-byte cap")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise BoundedReadError(f"{source}: over the {max_bytes}-byte cap")
    return data


def check_regular_file(path: str | os.PathLike, *, source: str | None = None, max_bytes: int) -> None:
    """Refuse, with one line, a ``path`` that is no regular file (a device, a FIFO) or is over ``max_bytes``, before
    another library reads it whole (a model folder's ``config.json`` or ``tokenizer.json`` read by transformers)."""
    path = Path(path)
    source = source or str(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise BoundedReadError(f"{source}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    try:
        info = os.fstat(fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(info.st_mode):
        raise BoundedReadError(f"{source}: not a regular file (a device, FIFO or folder); refused")
    if info.st_size > max_bytes:
        raise BoundedReadError(f"{source}: {info.st_size} bytes, over the {max_bytes}-byte cap")


def read_json_file(path: str | os.PathLike, *, source: str | None = None, max_bytes: int = MAX_FILE_BYTES,
                   max_depth: int = MAX_JSON_DEPTH, inside: str | os.PathLike | None = None) -> Any:
    """``read_file`` then ``parse_json``: one JSON file from a folder ragen does not control."""
    source = source or str(path)
    return parse_json(read_file(path, source=source, max_bytes=max_bytes, inside=inside), source=source,
                      max_bytes=max_bytes, max_depth=max_depth)


def read_stream(read1: Callable[[int], bytes], *, source: str, max_bytes: int, deadline: float,
                chunk: int = 1 << 16) -> bytes:
    """Everything ``read1`` yields until it returns ``b""``: at most ``max_bytes`` in all, done before ``deadline``
    (a ``time.monotonic()`` value) for the whole read. ``read1`` must return what is available (one socket read),
    so a peer trickling bytes is stopped at the deadline, not fed a fresh time-out per byte."""
    parts: list[bytes] = []
    total = 0
    while True:
        if time.monotonic() > deadline:
            raise BoundedReadError(f"{source}: the answer did not arrive whole before its deadline")
        data = read1(chunk)
        if not data:
            return b"".join(parts)
        total += len(data)
        if total > max_bytes:
            raise BoundedReadError(f"{source}: the answer is over the {max_bytes}-byte cap")
        parts.append(data)
