"""The ``ragen`` command group: one-line errors and a non-zero exit for every core error (``--debug``: traceback)."""

from __future__ import annotations

import gc
import sys
import warnings

import click

from ragen.errors import Interrupted, RagenError


class _Group(click.Group):
    """A group whose errors are one line: ``Error: ...`` and exit 1 (2 for usage errors)."""

    def main(self, args=None, **kwargs):
        args = list(sys.argv[1:] if args is None else args)
        debug = "--debug" in args
        _install_warning_printer()
        try:
            return super().main(args=args, standalone_mode=False, **kwargs)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted.", err=True)
            sys.exit(1)
        except click.ClickException as exc:
            if debug:
                raise
            click.echo(f"Error: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        except Interrupted as exc:  # a first Ctrl-C, handled: what was saved and how to go on, not an error
            click.echo(str(exc), err=True)
            sys.exit(130)
        except RagenError as exc:
            if debug:
                raise
            click.echo(f"Error: {exc}", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            click.echo("Interrupted.", err=True)
            sys.exit(130)

    def resolve_command(self, ctx, args):
        from ragen.errors import did_you_mean

        name = args[0] if args else None
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            raise click.UsageError(f"no such command {name!r}{did_you_mean(name, self.list_commands(ctx))}")
        return super().resolve_command(ctx, args)


def _install_warning_printer() -> None:
    def show(message, category, filename, lineno, file=None, line=None):
        click.echo(f"warning: {message}", err=True)

    warnings.showwarning = show


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.version_option(package_name="ragen")
def cli(debug: bool) -> None:
    """ragen: multi-turn RL (StarPO) for LLM agents."""


#: set by a command that only printed what it read (a listing): ``main`` then freezes the process's objects at exit
_only_printed = False


def only_printed() -> None:
    """Mark this command as one that only prints what it reads (``plugins``, ``envs``, ``algos``)."""
    global _only_printed
    _only_printed = True


def main() -> None:
    try:
        cli.main(prog_name="ragen")
    finally:
        if _only_printed:
            # Python's last cyclic collections at exit walk every object of every module loaded (about 600 with the
            # plugins): 50 ms of a 0.4 s listing. A command that only printed holds no file or process that only a
            # collection would close, so its objects are frozen out of them. Here, not in the command: an in-process
            # caller (click's CliRunner in tests) goes on running and needs its collector whole.
            gc.freeze()
