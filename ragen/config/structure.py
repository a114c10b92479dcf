"""Structuring dicts into config classes: one cattrs converter that rejects unknown keys, strict scalars, and
errors that name the key path (``trainer.steps: expected int, got 'x'``) with a did-you-mean for unknown keys."""

from __future__ import annotations

import math
import re
import typing
from typing import Any, TypeVar

import attrs
import cattrs

from ragen.errors import ConfigError, did_you_mean

T = TypeVar("T")

converter = cattrs.Converter(forbid_extra_keys=True)


def structure(cls: type[T], data: Any, path: str = "") -> T:
    """Structure ``data`` into ``cls``; errors become one ``ConfigError`` naming every bad key path."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path or 'config'}: expected a mapping, got {type(data).__name__}")
    try:
        obj = converter.structure(data, cls)
    except ConfigError as exc:
        raise ConfigError(f"{path}.{exc}" if path else str(exc)) from None
    except cattrs.BaseValidationError as exc:
        inner = _config_error(exc)  # a validator of the class itself said what is wrong: keep its words
        if inner is not None:
            raise ConfigError(f"{path}.{inner}" if path else str(inner)) from None
        own = _own_words(exc)
        if (
            own is not None
        ):  # a plugin config's validator (attrs or __attrs_post_init__): its message, not "invalid value"
            section = ".".join(filter(None, [path, own[0]]))
            raise ConfigError(f"{section or 'config'}: {own[1]}") from None
        raise ConfigError("; ".join(_messages(exc, cls, path, data))) from None
    except (TypeError, ValueError) as exc:  # validators of attrs classes
        raise ConfigError(f"{path or 'config'}: {exc}") from None
    return obj


def _config_error(exc: BaseException, prefix: str = "") -> ConfigError | None:
    """The first ConfigError a section's own validator raised, its key prefixed with the section path that cattrs
    noted on the way up (``trainer.zero_stage: ...``)."""
    if isinstance(exc, ConfigError) or _validator_error(exc):
        return ConfigError(prefix + str(exc)) if prefix else ConfigError(str(exc))
    for sub in getattr(exc, "exceptions", ()):
        names = [note.name for note in getattr(sub, "__notes__", ()) if isinstance(getattr(note, "name", None), str)]
        found = _config_error(sub, prefix + "".join(f"{n}." for n in names[:1]))
        if found is not None:
            return found
    return None


def _own_words(exc: BaseException, section: str = "") -> tuple[str, str] | None:
    """(section path, message) of a ValueError/TypeError a config class's own ``__init__`` raised (attrs validators,
    ``__attrs_post_init__``): cattrs attaches no attribute note to those, unlike a field it could not structure."""
    if type(exc) in (ValueError, TypeError) and not getattr(exc, "__notes__", None):
        return section, str(exc)
    for sub in getattr(exc, "exceptions", ()):
        names = [note.name for note in getattr(sub, "__notes__", ()) if isinstance(getattr(note, "name", None), str)]
        found = _own_words(sub, ".".join(filter(None, [section, *names[:1]])))
        if found is not None:
            return found
    return None


def _validator_error(exc: BaseException) -> bool:
    """An attrs validator's ``ValueError("key: must be ..., got ...")`` (algorithm presets word theirs this way)."""
    return type(exc) is ValueError and bool(re.match(r"\w+: ", str(exc)))


_AT = re.compile(r"^(?P<msg>.*) @ \$(?P<path>.*)$")
_EXTRA = re.compile(r"extra fields found \((?P<keys>[^)]*)\)")


def _messages(exc: cattrs.BaseValidationError, cls: type, path: str, data: dict) -> list[str]:
    out = []
    for line in cattrs.transform_error(exc, path="$", format_exception=_format_exception):
        m = _AT.match(line)
        msg, where = (m["msg"], m["path"]) if m else (line, "")
        where = (path + where) if path else where.lstrip(".")
        extra = _EXTRA.search(msg)
        if extra:
            owner = _class_at(cls, where[len(path):].lstrip(".") if path else where)
            known = [f.name for f in attrs.fields(owner)] if owner is not None and attrs.has(owner) else []
            for key in (k.strip() for k in extra["keys"].split(",")):
                full = f"{where}.{key}" if where else key
                out.append(f"{full}: unknown key{did_you_mean(key, known)}")
            continue
        msg = msg.replace("invalid value for type, expected", "expected")
        found, value = _value_at(data, where[len(path):].lstrip(".") if path else where)
        out.append(f"{where or 'config'}: {msg}" + (f", got {value!r}" if found else ""))
    return out


def _value_at(data: Any, dotted: str) -> tuple[bool, Any]:
    for part in filter(None, dotted.split(".")):
        if not isinstance(data, dict) or part not in data:
            return False, None
        data = data[part]
    return True, data


def _class_at(cls: type, dotted: str) -> type | None:
    for part in filter(None, dotted.split(".")):
        if not attrs.has(cls):
            return None
        fields = {f.name: f for f in attrs.fields(attrs.resolve_types(cls))}
        if part not in fields:
            return None
        cls = fields[part].type
    return cls


def _format_exception(exc: BaseException, type_: Any) -> str:
    return str(exc) if isinstance(exc, BadValue) else cattrs.v.format_exception(exc, type_)


# ---- strict scalars: YAML's `maybe` is not a bool, 1.9 is not an int, nan is not a learning rate ------------------
class BadValue(ValueError):
    """A scalar of the wrong kind; the message says what was expected (the key and value are added around it)."""


#: the largest integer any config field takes (2**53 - 1): the integers a float64 holds exactly. TOML and YAML read
#: arbitrary-size integers (``steps = 99999999999999999999`` was accepted); config values are carried as JSON numbers
#: and into numpy/torch, where such a number overflows or silently rounds. Each field's own range may be tighter.
MAX_INT = 2**53 - 1


def _int(value: Any, _: type) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadValue("expected int")
    if abs(value) > MAX_INT:
        raise BadValue("expected int within -(2**53 - 1) .. 2**53 - 1 (the integers a float64 holds exactly)")
    return value


def _float(value: Any, _: type) -> float:
    if isinstance(value, str):  # YAML reads 1e-5 (no dot) as a string
        try:
            value = float(value)
        except ValueError:
            raise BadValue("expected float") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadValue("expected float")
    if not math.isfinite(value):
        raise BadValue("expected float (finite)")
    return float(value)


def _bool(value: Any, _: type) -> bool:
    if not isinstance(value, bool):
        raise BadValue("expected bool")
    return value


def _str(value: Any, _: type) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):  # a bare 2024 may name a run
        raise BadValue("expected str")
    return str(value)


def _tuple(value: Any, type_: Any) -> tuple:
    """A list for a tuple field: a string or a mapping would become a tuple of its characters or keys."""
    if not isinstance(value, (list, tuple)):
        raise BadValue("expected a list")
    args = typing.get_args(type_)
    if not args:
        return tuple(value)
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(converter.structure(v, args[0]) for v in value)
    if len(value) != len(args):
        raise BadValue(f"expected a list of {len(args)}")
    return tuple(converter.structure(v, t) for v, t in zip(value, args))


for _type, _hook in ((int, _int), (float, _float), (bool, _bool), (str, _str)):
    converter.register_structure_hook(_type, _hook)
converter.register_structure_hook_func(lambda t: t is tuple or typing.get_origin(t) is tuple, _tuple)
