"""Console output of ragen: structlog events (snake_case names, key=value) and the tqdm progress bar they share
stderr with. The one logging mechanism of the core; plugin authors' warnings go through ``warnings``."""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(level: int = logging.INFO) -> None:
    """structlog to stderr, key=value, snake_case event names; library progress bars off (ours is the one)."""
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:
        pass
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="%H:%M:%S"),
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=BarSafeStderr()),
        cache_logger_on_first_use=False,
    )


log = structlog.get_logger("ragen")


def progress(total: int, initial: int, enabled: bool, desc: str = "train", unit: str = "step", leave: bool = True):
    """A tqdm bar on stderr (rate and ETA); ``leave=False`` for a phase inside another bar's step (validation)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, disable=not enabled, desc=desc, unit=unit, dynamic_ncols=True,
                file=sys.stderr, leave=leave)


class BarSafeStderr:
    """stderr for log lines: each whole line goes out through ``tqdm.write``, which lifts any progress bar, prints the
    line and redraws the bar, so log events never land in the middle of a bar."""

    def __init__(self) -> None:
        self._pending = ""

    def write(self, text: str) -> int:
        from tqdm import tqdm

        self._pending += text
        while "\n" in self._pending:
            line, self._pending = self._pending.split("\n", 1)
            tqdm.write(line, file=sys.stderr)
        return len(text)

    def flush(self) -> None:
        sys.stderr.flush()
