"""The README's Quickstart is the two commands CI runs, the set-up installs every plugin in the repository, the
long-form install the README keeps for some plugins is the line the set-up script runs, and every other ``ragen``
command the README shows parses and names components that exist."""

import re

from conftest import ROOT


def install_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith('pip install -c constraints.txt -e ".[test]"'))


def quickstart_commands(readme: str) -> list[str]:
    """The commands of the first ``sh`` block under "## Quickstart"."""
    section = readme.split("## Quickstart\n", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def ci_commands() -> list[str]:
    return [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]


def test_readme_quickstart_is_two_commands_and_ci_runs_exactly_them_in_order():
    setup, tests = quickstart_commands((ROOT / "README.md").read_text())
    assert (setup, tests) == ("bash scripts/install.sh", ".venv/bin/python -m pytest")
    ci = ci_commands()
    assert setup in ci and tests in ci and ci.index(setup) < ci.index(tests)
    assert not any("pip install" in line and "ragen-sokoban" in line for line in ci)  # no second, diverging install


def test_the_setup_script_runs_the_readme_long_form_install_with_every_plugin():
    readme = install_line((ROOT / "README.md").read_text())
    assert readme == install_line((ROOT / "scripts" / "install.sh").read_text())
    listed = set(re.findall(r"-e \"?(plugins/ragen-[\w-]+)", readme))
    present = {f"plugins/{p.name}" for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").is_file()}
    assert listed == present, present ^ listed


def test_the_setup_script_names_pytorchs_cpu_index_and_falls_back_to_the_default_one():
    script = (ROOT / "scripts" / "install.sh").read_text()
    assert "https://download.pytorch.org/whl/cpu" in script
    assert "cannot be reached; torch comes from the default index" in script
    assert "https://download.pytorch.org/whl/cpu" in (ROOT / "README.md").read_text()


def test_the_readme_names_every_registered_env_variant_and_every_config_section():
    import attrs

    from ragen.config import RunConfig
    from ragen.plugins.loader import get_registry

    readme = (ROOT / "README.md").read_text()
    # the repository's own packages only: other tests register fixture envs in the same process (tiny-coin, ...)
    ours = {"ragen"} | {p.name for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").is_file()}
    assert [c.name for c in get_registry("env") if c.dist in ours and f"`{c.name}`" not in readme] == []
    section = readme.split("### Configuration\n", 1)[1].strip().split("\n\n")[0]
    assert [f.name for f in attrs.fields(RunConfig) if f"`{f.name}`" not in section] == []


def shown_ragen_commands(readme: str) -> list[list[str]]:
    """The argument lists of every ``ragen`` (or ``.venv/bin/ragen``) line in the README's ``sh`` blocks."""
    import shlex

    commands = []
    for block in re.findall(r"```sh\n(.*?)```", readme, re.S):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words and words[0] in ("ragen", ".venv/bin/ragen"):
                commands.append(words[1:])
    return commands


def test_every_ragen_command_the_readme_shows_parses_and_names_real_components(monkeypatch):
    """Each command is parsed by the real CLI (the subcommand, its options and their types), its env and algorithm
    names are registered, its --config file exists and its section.key=value overrides build a RunConfig. Nothing is
    run: the runs themselves are the CLI and training tests'. ``myenv`` is the plugin skeleton the README creates."""
    import click

    from ragen.cli import cli
    from ragen.config.load import load_config
    from ragen.plugins.loader import get_registry

    monkeypatch.chdir(ROOT)
    envs = {c.name for c in get_registry("env")} | {"myenv"}
    algos = {c.name for c in get_registry("algorithm")}
    commands = shown_ragen_commands((ROOT / "README.md").read_text())
    assert len(commands) >= 15 and {c[0] for c in commands} >= {"run", "sft", "eval", "envs", "play", "new-env"}
    root = click.Context(cli, info_name="ragen")
    for args in commands:
        name, rest = args[0], args[1:]
        assert name in cli.commands, f"ragen {name}: no such command"
        with cli.commands[name].make_context(name, list(rest), parent=root) as ctx:
            params = ctx.params
        shown = " ".join(args)
        for env in filter(None, (params.get("env_name") or "").split(",")):
            assert env in envs, f"ragen {shown}: unknown env {env!r}"
        if name in ("play", "check-env", "serve-env") or (name == "envs" and params.get("name")):
            assert params["name"] in envs, f"ragen {shown}: unknown env {params['name']!r}"
        if params.get("algo_name"):
            assert params["algo_name"] in algos, f"ragen {shown}: unknown algorithm {params['algo_name']!r}"
        if params.get("config_path"):
            assert params["config_path"].is_file(), f"ragen {shown}: no file {params['config_path']}"
        if "overrides" in params:
            load_config(params.get("config_path"), list(params["overrides"]))


def test_the_readme_stays_a_users_guide():
    """At most 150 lines; measurements, diagnoses and history live in docs/benchmarks.md, which it links."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150, "move detail to docs/ (docs/running.md, docs/benchmarks.md)"
    assert "(docs/benchmarks.md" in readme.split("## Benchmarks\n", 1)[1]
