"""Third-party plugins found through their entry points, with no change to the core; broken ones isolated."""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, ragen_cmd

FIXTURES = ROOT / "tests" / "fixture_plugins"


def pip_install_target(target, *paths):
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(target), *map(str, paths)]
    subprocess.run(cmd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    target = tmp_path_factory.mktemp("site")
    pip_install_target(target, FIXTURES / "ragen-tinyenv", FIXTURES / "ragen-broken", FIXTURES / "ragen-tinyclash")
    return target


def run(site, *args, check=False):
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run(ragen_cmd(*args), capture_output=True, text=True, env=env, check=check)


def test_tiny_plugin_discovered(site):
    data = json.loads(run(site, "plugins", "--json", check=True).stdout)
    plugins = {p["distribution"]: p for p in data["plugins"]}
    assert plugins["ragen-tinyenv"]["components"] == {"env": ["tiny-coin"]}
    assert plugins["ragen-tinyenv"]["version"] == "0.0.1"
    assert "ragen-algos" in plugins
    out = run(site, "check-env", "tiny-coin", check=True).stdout
    assert "tiny-coin: all 6 checks passed" in out


def test_broken_plugin_listed_others_work(site):
    res = run(site, "plugins", "--json", check=True)
    broken = {b["distribution"]: b["error"] for b in json.loads(res.stdout)["broken"]}
    assert "ragen_broken needs a library that is not installed" in broken["ragen-broken"]
    human = run(site, "plugins", check=True).stdout
    assert "BROKEN ragen-broken 0.0.1: import failed: ImportError" in human
    envs = run(site, "envs")
    assert envs.returncode == 0 and "tiny-coin" in envs.stdout
    assert "warning: ragen plugin 'ragen-broken' is broken" in envs.stderr


def test_duplicate_env_name_refuses_only_that_component(site):
    """Two installed plugins register `tiny-coin`: the first keeps it, the clash is listed, and everything else of the
    second plugin (another env, a parser) works."""
    data = json.loads(run(site, "plugins", "--json", check=True).stdout)
    plugins = {p["distribution"]: p for p in data["plugins"]}
    assert plugins["ragen-tinyclash"]["components"] == {"env": ["tiny-coin-flipped"], "parser": ["shout"]}
    assert plugins["ragen-tinyenv"]["components"] == {"env": ["tiny-coin"]}
    assert data["clashes"] == [{"kind": "env", "name": "tiny-coin", "kept": "ragen-tinyenv", "refused": "ragen-tinyclash"}]
    assert not any(b["distribution"] == "ragen-tinyclash" for b in data["broken"])
    human = run(site, "plugins", check=True).stdout
    assert "CLASH env 'tiny-coin': registered by 'ragen-tinyenv' (used) and 'ragen-tinyclash' (refused)" in human
    checked = run(site, "check-env", "tiny-coin-flipped", check=True)
    assert "tiny-coin-flipped: all 6 checks passed" in checked.stdout
    assert "warning: ragen plugin 'ragen-tinyclash': env 'tiny-coin' is registered by both 'ragen-tinyenv' and " \
           "'ragen-tinyclash'" in checked.stderr  # a command that uses the env registry says so
    envs = json.loads(run(site, "envs", "--json", check=True).stdout)
    assert {e["name"]: e["distribution"] for e in envs}["tiny-coin"] == "ragen-tinyenv"


def test_new_env_scaffold_installs_and_passes(tmp_path):
    res = subprocess.run(ragen_cmd("new-env", "foo", "--dir", str(tmp_path)), capture_output=True, text=True, check=True)
    pkg = tmp_path / "ragen-foo"
    assert pkg.is_dir() and "created" in res.stdout
    target = tmp_path / "site"
    pip_install_target(target, pkg)
    out = run(target, "check-env", "foo", check=True).stdout
    assert "foo: all 6 checks passed" in out
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(pkg / "tests")],
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(target)}, cwd=tmp_path)
    assert tests.returncode == 0, tests.stdout[-2000:]
    again = subprocess.run(ragen_cmd("new-env", "foo", "--dir", str(tmp_path)), capture_output=True, text=True)
    assert again.returncode == 1 and again.stderr.strip().count("\n") == 0 and "already exists" in again.stderr


def test_new_env_bad_name(tmp_path):
    res = subprocess.run(ragen_cmd("new-env", "Foo Bar", "--dir", str(tmp_path)), capture_output=True, text=True)
    assert res.returncode != 0 and res.stderr.startswith("Error: env name 'Foo Bar'") and "Traceback" not in res.stderr
