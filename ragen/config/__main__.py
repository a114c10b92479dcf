"""``python -m ragen.config > docs/config.md``."""

from ragen.config.load import config_markdown

print(config_markdown(), end="")
