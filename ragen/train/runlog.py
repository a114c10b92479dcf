"""Run outputs: the run folder, metrics.jsonl, trajectories.jsonl, wandb.

A run folder is data (docs/security.md): every file is written in the folder itself, never through a symbolic link
(appends open with ``O_NOFOLLOW``; rewrites go to a new file renamed over the old one), and secrets (an env's
``token``, any ``*password*``/``*secret*``/``*api_key*`` key) never reach ``config.yaml``, ``run.json`` or wandb."""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml

from ragen.log import log
from ragen.serve.net import redact_url

#: config keys whose values are secrets: written as REDACTED (a remote env takes its token from $RAGEN_ENV_TOKEN)
SECRET_KEY = re.compile(r"(^|_)(token|password|passwd|secret|api_?key|credentials?)$", re.I)  # not max_tokens
REDACTED = "<redacted>"


def redact(data: Any) -> Any:
    """``data`` with every secret-named key's text replaced (secrets are strings: a number such as a shaper's
    ``per_token`` cost stays, and an empty value stays empty: nothing to hide), and the credentials of every URL in
    it (``http://user:pass@host``, ``?token=...``: ``ragen.serve.net.redact_url``)."""
    if isinstance(data, dict):
        return {k: (REDACTED if isinstance(k, str) and SECRET_KEY.search(k) and isinstance(v, str) and v else redact(v))
                for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(redact(v) for v in data)
    if isinstance(data, str) and "://" in data:
        return redact_url(data)
    return data


def unredact(data):
    """A saved config with its redacted secrets emptied, so each one falls back to its environment variable (a remote
    env's token to ``$RAGEN_ENV_TOKEN``) instead of being sent as the literal placeholder."""
    if isinstance(data, dict):
        return {k: ("" if v == REDACTED else unredact(v)) for k, v in data.items()}
    if isinstance(data, list):
        return [unredact(v) for v in data]
    return data


def saved_config(run_dir: Path) -> dict:
    """A run folder's config.yaml as config data a ``RunConfig`` is loaded from (a resume, ``ragen doctor``): secrets
    emptied (``unredact``), and a folder written before ``rollout.prompt`` existed gets the full frame it saw."""
    from ragen.config import read_file

    data = unredact(read_file(Path(run_dir) / "config.yaml"))
    if isinstance(data.get("rollout"), dict):
        data["rollout"].setdefault("prompt", "full")
    return data


def redact_command(argv: list[str]) -> str:
    """A command line fit to record (``run.json``): the value of every secret-named override (``KEY=VALUE`` with
    KEY's last part a secret name, as in ``env.options.token=...``) or option (``--token X``, ``--api-key=X``), and
    the credentials of every URL, replaced by ``<redacted>``."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        key, eq, value = arg.partition("=")
        name = key.lstrip("-").rsplit(".", 1)[-1].replace("-", "_")
        if eq and value and SECRET_KEY.search(name):
            out.append(f"{key}={REDACTED}")
        elif arg.startswith("-") and not eq and SECRET_KEY.search(name):
            out.append(arg)
            hide_next = True
        elif eq and "://" in value:
            out.append(f"{key}={redact_url(value)}")
        else:
            out.append(redact_url(arg) if "://" in arg else arg)
    return " ".join(out)


def _refuse_link(path: Path) -> None:
    if path.is_symlink():
        from ragen.errors import RagenError

        raise RagenError(
            f"run folder file {str(path)!r} is a symbolic link; ragen writes run files only inside the run "
            "folder (a run folder is data: docs/security.md)"
        )


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``: a new file in the same folder renamed over it, so a symbolic link at ``path`` is
    replaced, never written through, and a crash leaves the old file or the new one, not half of either."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def append_lines(path: Path, lines: list[str]) -> None:
    """Append ``lines`` to ``path`` in the run folder; a symbolic link there is refused, not followed."""
    _refuse_link(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError:
        _refuse_link(path)  # a link created between the check and the open
        raise
    with os.fdopen(fd, "a") as f:
        f.write("".join(line + "\n" for line in lines))


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):
        return value.item()
    return value


#: the run folder's JSONL files, each row with the ``step`` it belongs to
APPENDED_JSONL = ("metrics.jsonl", "trajectories.jsonl", "val_trajectories.jsonl", "paired_trajectories.jsonl")


def _lines_up_to(path: Path, step: int) -> list[str]:
    """The lines of a JSONL file whose row's step is <= ``step``; undecodable lines (a torn last line after kill -9)
    are dropped with a warning instead of failing the resume."""
    from ragen.config.bounded import MAX_JSONL_BYTES, read_file

    keep = []
    text = read_file(path, max_bytes=MAX_JSONL_BYTES, inside=path.parent).decode("utf-8", "replace")
    for number, line in enumerate(text.splitlines(), 1):
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            row = None
        if not isinstance(row, dict):
            log.warning(
                "jsonl_line_dropped",
                file=str(path),
                line=number,
                reason="torn or not a JSON row (an interrupted write)",
            )
            continue
        if row.get("step", 0) <= step:
            keep.append(line)
    return keep


class RunWriter:
    """Writes the run folder; one instance per run, append-only so a resumed run continues its files."""

    def __init__(
        self,
        run_dir: Path,
        config: dict,
        *,
        wandb: bool = False,
        wandb_project: str = "ragen",
        resume: bool = False,
        info: dict | None = None,
    ):
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        config = redact(config)
        if not resume:  # a resumed run keeps the files of the run it continues (ragen/train/provenance.py)
            write_atomic(self.dir / "config.yaml", yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
            if info is not None:
                write_atomic(self.dir / "run.json", json.dumps(redact(info), indent=2, default=str) + "\n")
        self._wandb = None
        if wandb:
            import wandb as wandb_lib  # imported only when asked for

            self._wandb = wandb_lib.init(project=wandb_project, dir=str(self.dir), config=config, name=self.dir.name,
                                         resume="allow")

    def metrics(self, step: int, values: dict[str, Any]) -> None:
        row = {"step": step, **{k: _clean(v) for k, v in sorted(values.items())}}
        append_lines(self.dir / "metrics.jsonl", [json.dumps(row)])
        if self._wandb is not None:
            self._wandb.log({k: v for k, v in row.items() if isinstance(v, (int, float))}, step=step)

    def trajectories(self, name: str, rows: list[dict]) -> None:
        if not rows:
            return
        append_lines(self.dir / name, [json.dumps(row) for row in rows])
        if self._wandb is not None and name == "val_trajectories.jsonl":
            self._wandb.log({"val/generations": generations_table(rows)}, step=rows[0]["step"])

    def truncate_after(self, step: int) -> None:
        """On resume: drop the rows of steps after the checkpoint from every JSONL file the run appends to (the resumed
        run writes them again), and any line a kill left torn (with a warning)."""
        for name in APPENDED_JSONL:
            path = self.dir / name
            if path.is_symlink():
                _refuse_link(path)
            if path.exists():
                write_atomic(path, "".join(line + "\n" for line in _lines_up_to(path, step)))

    def close(self) -> None:
        if self._wandb is not None:
            self._wandb.finish()


#: columns of the wandb ``val/generations`` table, one row per validation trajectory
GENERATION_COLUMNS = ("step", "env", "seed", "member", "success", "score", "reward", "num_turns", "end", "turns")


def generations_table(rows: list[dict]):
    """Validation trajectories (``to_dict`` rows with their step) as a wandb Table: the turn texts and rewards."""
    import wandb as wandb_lib

    def turns(row: dict) -> str:
        return "\n\n".join(f"[turn {i + 1}] reward {t['reward']}, penalty {t['penalty']}, actions {t['executed']}\n"
                            f"{t['response_text']}" for i, t in enumerate(row["turns"]))

    data = [[r["step"], r["env_name"], r["seed"], r["rollout_index"], r["success"], r["score"], r["reward"],
             r["num_turns"], r["truncation_reason"] or ("success" if r["success"] else "done"), turns(r)] for r in rows]
    return wandb_lib.Table(columns=list(GENERATION_COLUMNS), data=data)


class NullWriter:
    """What a non-zero data-parallel rank writes: nothing (rank 0 owns the run folder's files)."""

    def metrics(self, step: int, values: dict[str, Any]) -> None:
        pass

    def trajectories(self, name: str, rows: list[dict]) -> None:
        pass

    def truncate_after(self, step: int) -> None:
        pass

    def close(self) -> None:
        pass
