"""How listings print: padded tables and wrapped lines that fit the terminal unless ``--wide``; JSON helpers."""

from __future__ import annotations

import click

LISTING_WIDTH = 100  #: listings fit this many columns (long cells wrap) unless --wide


_wide = False


def _set_wide(ctx, param, value) -> None:
    global _wide
    _wide = bool(value)


wide_option = click.option("--wide", is_flag=True, expose_value=False, callback=_set_wide,
                            help=f"One line per row, however long (default: fit {LISTING_WIDTH} columns).")


def renamed(row: dict) -> dict:
    """``dist`` -> ``distribution``: every listing's JSON names the providing distribution the same way."""
    return {("distribution" if k == "dist" else k): v for k, v in row.items()}


def vars_of(obj) -> dict:
    import attrs

    return attrs.asdict(obj)


def tuple_as_list(v):
    """A config value for ``--json`` listings: a tuple as a list (what JSON has), anything else as it is."""
    return list(v) if isinstance(v, tuple) else v


def echo_wrapped(text: str, indent: str = "  ") -> None:
    """A free-text listing line, wrapped to ``LISTING_WIDTH`` columns (not with --wide)."""
    import textwrap

    if _wide or len(text) <= LISTING_WIDTH:
        click.echo(text)
    else:
        click.echo(textwrap.fill(text, LISTING_WIDTH, subsequent_indent=indent, break_long_words=False,
                                 break_on_hyphens=False))


def table(header: list[str], rows: list[list[str]]) -> None:
    """Columns padded to their widest cell. Wider than ``LISTING_WIDTH`` (and no --wide): the last column wraps inside
    its own column, or, where the other columns leave it under 24 characters, each row becomes a wrapped record."""
    import textwrap

    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    lead = sum(widths[:-1]) + 2 * (len(widths) - 1)  # where the last column starts
    room = LISTING_WIDTH - lead
    if not _wide and lead + widths[-1] > LISTING_WIDTH and room < 24:
        for row in rows:
            click.echo(str(row[0]))
            click.echo(textwrap.fill(", ".join(f"{h}={v}" for h, v in zip(header[1:], row[1:], strict=False)),
                                     LISTING_WIDTH, initial_indent="  ", subsequent_indent="  ", break_long_words=False,
                                     break_on_hyphens=False))
        return
    if not _wide and lead + widths[-1] > LISTING_WIDTH:
        widths[-1] = room
    for i, row in enumerate([header, *rows]):
        last = str(row[-1])
        lines = textwrap.wrap(last, widths[-1], break_long_words=False) if widths[-1] == room else [last]
        first = [*row[:-1], lines[0] if lines else ""]
        click.echo("  ".join(str(x).ljust(w) for x, w in zip(first, widths, strict=False)).rstrip())
        for more in lines[1:]:
            click.echo(" " * lead + more)
        if i == 0:
            click.echo("  ".join("-" * w for w in widths))
