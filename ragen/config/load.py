"""Loading a ``RunConfig``: YAML/TOML files, ``section.key=value`` overrides, and the generated docs/config.md."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import attrs
import yaml

from ragen.config import bounded
from ragen.config.fields import shown
from ragen.config.schema import RunConfig
from ragen.config.structure import converter, structure
from ragen.errors import ConfigError


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last one silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise ValueError(f"key {key!r} is given twice (line {key_node.start_mark.line + 1})")
            if isinstance(key, (str, int, float, bool)):
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    """YAML as ``yaml.safe_load`` reads it, but a duplicate key is a ``ValueError`` and so is an integer of more digits
    than Python converts (4,300); callers turn both into a one-line ``ConfigError``."""
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass


def read_file(path: str | Path) -> dict:
    """Read a YAML or TOML config file into a dict."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        # bounded: a run folder's config.yaml is data (a resume, `ragen doctor`, the report read it back)
        text = bounded.read_file(path, source=f"config file {str(path)!r}").decode("utf-8")
    except bounded.BoundedReadError as exc:
        raise ConfigError(str(exc)) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {str(path)!r} is not UTF-8 text (byte {exc.start}); give a YAML or TOML file"
        ) from None
    if "\0" in text:
        raise ConfigError(f"config file {str(path)!r} is binary (it holds NUL bytes); give a YAML or TOML file")
    kind = path.suffix.lstrip(".") or "YAML"
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else load_yaml(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError, ValueError) as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid {kind}: {_one_line(exc)}") from None
    except RecursionError:  # the YAML parser recurses per nesting level
        raise ConfigError(f"config file {str(path)!r}: nested more than Python's recursion limit allows") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r}: expected a mapping at the top level")
    _check_depth(data, f"config file {str(path)!r}")
    return data


MAX_DEPTH = 32  # a run config nests 3-4 levels; env options a few more


def _check_depth(data: Any, where: str) -> None:
    """Refuse absurd nesting up front (iteratively), before the recursive merge and structuring see it."""
    stack = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ConfigError(f"{where}: nested deeper than {MAX_DEPTH} levels")
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``section.key=value`` overrides (values parsed as YAML: ``8``, ``true``, ``[8, 8]``)."""
    data = _deepcopy(data)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {item!r}: expected section.key=value")
        try:
            value = load_yaml(raw) if raw.strip() else ""
        except ValueError as exc:  # a number beyond Python's 4,300-digit conversion limit, a duplicate key
            raise ConfigError(f"override {key.strip()}: {_one_line(exc)}") from None
        except yaml.YAMLError:
            value = raw
        except RecursionError:
            raise ConfigError(
                f"override {key.strip()}: value nested more than Python's recursion limit allows"
            ) from None
        _check_depth(value, f"override {key.strip()}")
        node = data
        parts = key.strip().split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override {item!r}: {part} is not a section")
            node = child
        node[parts[-1]] = value
    return data


def load_config(
    path: str | Path | None = None, overrides: list[str] | None = None, base: dict | None = None
) -> RunConfig:
    """Build a ``RunConfig`` from ``base`` < file < overrides."""
    data = _deepcopy(base or {})
    if path is not None:
        data = _merge(data, read_file(path))
    data = apply_overrides(data, list(overrides or []))
    return structure(RunConfig, data)


def to_dict(cfg: Any) -> dict:
    return converter.unstructure(cfg)


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _deepcopy(d: dict) -> dict:
    return {k: _deepcopy(v) if isinstance(v, dict) else v for k, v in d.items()}


def describe(cls: type = RunConfig, prefix: str = "") -> list[tuple[str, Any, str, str]]:
    """(key path, default, doc, allowed values) of every leaf field of a config tree."""
    out = []
    for f in attrs.fields(attrs.resolve_types(cls)):
        path = f"{prefix}{f.name}"
        if isinstance(f.type, type) and attrs.has(f.type):
            out += describe(f.type, path + ".")
        else:
            default = f.default.factory() if isinstance(f.default, attrs.Factory) else f.default  # type: ignore[attr-defined]
            out.append((path, default, f.metadata.get("doc", ""), allowed_text(f)))
    return out


def allowed_text(f: attrs.Attribute) -> str:
    """A field's range or choices as docs/config.md prints them ('' when any value of its type goes)."""
    rng, choices = f.metadata.get("range"), f.metadata.get("choices")
    if rng is not None:
        return str(rng)
    return shown(choices) if choices is not None else ""


def config_markdown() -> str:
    """docs/config.md, generated: `python -m ragen.config > docs/config.md`."""
    lines = [
        "# Run configuration",
        "",
        "Generated by `python -m ragen.config > docs/config.md` (a test checks it is current).",
        "Set values in a YAML/TOML file (`ragen run --config FILE`) or as `section.key=value` arguments.",
        "",
        "| key | default | allowed | meaning |",
        "|---|---|---|---|",
    ]
    for path, default, doc, allowed in describe():
        lines.append(f"| `{path}` | `{default!r}` | {allowed.replace('|', '/')} | {doc} |")
    return "\n".join(lines) + "\n"
