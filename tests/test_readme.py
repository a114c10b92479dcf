"""The README's Quickstart is the two commands CI runs, the set-up installs every plugin in the repository, and the
long-form install the README keeps for some plugins is the line the set-up script runs."""

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
