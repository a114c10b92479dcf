"""Third-party plugins found through their entry points, with no change to the core; broken ones isolated."""

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import ROOT, ragen_cmd

FIXTURES = ROOT / "tests" / "fixture_plugins"


def pip_install_target(target, *paths):
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        "--target",
        str(target),
        *map(str, paths),
    ]
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
    assert data["clashes"] == [
        {"kind": "env", "name": "tiny-coin", "kept": "ragen-tinyenv", "refused": "ragen-tinyclash"}
    ]
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
    res = subprocess.run(
        ragen_cmd("new-env", "foo", "--dir", str(tmp_path)), capture_output=True, text=True, check=True
    )
    pkg = tmp_path / "ragen-foo"
    assert pkg.is_dir() and "created" in res.stdout
    target = tmp_path / "site"
    pip_install_target(target, pkg)
    out = run(target, "check-env", "foo", check=True).stdout
    assert "foo: all 6 checks passed" in out
    # its own tests, through ragen.testing, but for the training run (the slow test below runs that too)
    tests = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-k",
            "not trains_two_steps",
            str(pkg / "tests"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(target)},
        cwd=tmp_path,
    )
    assert tests.returncode == 0, tests.stdout[-2000:]
    assert "4 passed, 1 deselected" in tests.stdout, tests.stdout[-2000:]
    again = subprocess.run(ragen_cmd("new-env", "foo", "--dir", str(tmp_path)), capture_output=True, text=True)
    assert again.returncode == 1 and again.stderr.strip().count("\n") == 0 and "already exists" in again.stderr


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_an_out_of_tree_plugin_made_by_new_env_passes_its_own_tests_in_a_fresh_venv(tmp_path):
    """`ragen new-env` in a temporary folder; the package pip-installed (a regular install, not editable)
    into a fresh venv that sees ragen and its dependencies through a .pth line (offline and fast, as test_first_run);
    its own tests run there by that venv's pytest from outside both the checkout and the package: the contract
    checks, the `train_two_steps` fixture and the two-step run all come from ragen.testing, the pytest plugin ragen
    installs."""
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run(ragen_cmd("new-env", "hallway", "--dir", str(work)), capture_output=True, text=True, check=True)
    pkg = work / "ragen-hallway"
    assert "conftest" not in {p.stem for p in pkg.rglob("*.py")}

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    ours = sysconfig.get_paths()["purelib"]  # ragen (editable), its dependencies and pytest, as installed here
    Path(site, "reuse-installed.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", PATH=f"{py.parent}{os.pathsep}{env.get('PATH', '')}")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps",
                              "--no-build-isolation", "--no-index", str(pkg)],
                             capture_output=True, text=True, env=env, cwd=work, timeout=300)
    assert install.returncode == 0, install.stderr[-3000:]
    where = subprocess.run([str(py), "-c", "import ragen_hallway, ragen.testing; print(ragen_hallway.__file__)"],
                           capture_output=True, text=True, env=env, cwd=work, check=True).stdout
    assert where.startswith(site), where  # the installed copy, not the folder new-env wrote

    tests = subprocess.run([str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider", str(pkg / "tests")],
                           capture_output=True, text=True, env=env, cwd=work, timeout=840)
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-2000:]
    assert "5 passed" in tests.stdout, tests.stdout[-2000:]  # 2 contract checks, registered, reset options, training


def test_new_env_bad_name(tmp_path):
    res = subprocess.run(ragen_cmd("new-env", "Foo Bar", "--dir", str(tmp_path)), capture_output=True, text=True)
    assert res.returncode != 0 and res.stderr.startswith("Error: env name 'Foo Bar'") and "Traceback" not in res.stderr
