"""The ``ragen`` command line: the group and its error handling (``group``), one module per family of commands
(``components``, ``train``, ``report``), and what they share (``options``, ``tables``)."""

from ragen.cli import components, report, train  # noqa: F401  (importing them registers their commands)
from ragen.cli.group import cli, main

__all__ = ["cli", "main"]
