"""``ragen new-env NAME``: write a working env plugin package from the templates in ``ragen/envs/templates``."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

from ragen.errors import ConfigError

_NAME = re.compile(r"^[a-z][a-z0-9-]{0,40}$")


def scaffold(name: str, directory: Path) -> Path:
    """Create ``directory/ragen-NAME`` with pyproject, README, the env module and a test; return its path."""
    if not _NAME.match(name):
        raise ConfigError(f"env name {name!r}: use lower-case letters, digits and '-', starting with a letter")
    module = "ragen_" + name.replace("-", "_")
    cls = "".join(part.capitalize() for part in name.split("-")) + "Env"
    root = Path(directory) / f"ragen-{name}"
    if root.exists():
        raise ConfigError(f"{root} already exists; choose another name or --dir")
    subst = {"{{name}}": name, "{{module}}": module, "{{cls}}": cls}
    template = resources.files("ragen.envs") / "templates" / "env_plugin"
    for src, rel in _walk(template, ""):
        rel = rel.replace("__module__", module).replace(".tmpl", "")
        text = src.read_text()
        for key, value in subst.items():
            text = text.replace(key, value)
        dest = root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
    return root


def _walk(node, prefix):
    for child in node.iterdir():
        rel = f"{prefix}{child.name}"
        if child.is_dir():
            yield from _walk(child, rel + "/")
        else:
            yield child, rel
