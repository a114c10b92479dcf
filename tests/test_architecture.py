"""The core's layout holds (docs/architecture.md): every import follows the layer rule, and no module of the core or
of a plugin in this repository imports itself back through others (function-level imports included: a cycle held
together by a late import is still a cycle)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "ragen"

#: a package imports only packages of a lower rank; equal ranks are peers that never import each other
RANK = {"errors": 0, "log": 0, "config": 1, "contract": 2, "plugins": 3, "envs": 4, "serve": 5, "rollout": 6,
        "models": 6, "train": 7, "warmstart": 8, "runs": 9, "cli": 10, "testing": 10}
#: the public face and the entry point sit above everything
FACES = {"ragen", "ragen.__main__"}
#: what `contract` (the plugin surface) may import from the core
CONTRACT_MAY_IMPORT = {"ragen.config.fields", "ragen.errors"}
MAX_TOP_LEVEL_MODULES = 4


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules_under(pkg_dir: Path) -> dict[str, Path]:
    return {module_name(p, pkg_dir.parent): p for p in pkg_dir.rglob("*.py")}


def imports_of(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that ``path`` imports anywhere in its body (``from a import b`` names the module
    ``a.b`` where that is a module, else ``a``)."""
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                pkg = pkg[: len(pkg) - node.level + 1]
                base = ".".join(pkg + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:  # `import a.b.c` of a module: the longest known prefix
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def graph(pkg_dir: Path) -> dict[str, set[str]]:
    known = modules_under(pkg_dir)
    return {name: imports_of(path, name, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp.append(member)
                    if member == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def layer_violations(edges: dict[str, set[str]]) -> list[str]:
    bad = []
    for src, targets in sorted(edges.items()):
        if src in FACES:
            continue
        src_layer = layer(src)
        assert src_layer in RANK, f"{src}: a module outside the layers of docs/architecture.md (add it to RANK)"
        for dst in sorted(targets):
            dst_layer = layer(dst)
            if dst_layer == src_layer:
                continue
            if dst in FACES:
                bad.append(f"{src} imports the public face {dst} (import the defining module)")
            elif src_layer == "contract" and dst not in CONTRACT_MAY_IMPORT:
                bad.append(f"{src} (contract) imports {dst}: contract imports only config.fields and errors")
            elif RANK[dst_layer] >= RANK[src_layer]:
                bad.append(f"{src} ({src_layer}, rank {RANK[src_layer]}) imports {dst} "
                           f"({dst_layer}, rank {RANK[dst_layer]})")
    return bad


def test_the_core_follows_the_layer_rule():
    assert layer_violations(graph(CORE)) == []


def test_the_core_has_no_import_cycle():
    assert cycles(graph(CORE)) == []


def test_few_modules_sit_directly_under_ragen():
    top = sorted(p.name for p in CORE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


PLUGIN_PACKAGES = sorted(p.parent for p in ROOT.glob("plugins/*/*/__init__.py") if "tests" not in p.parts)


@pytest.mark.parametrize("pkg", PLUGIN_PACKAGES, ids=[p.name for p in PLUGIN_PACKAGES])
def test_no_plugin_has_an_import_cycle(pkg):
    assert cycles(graph(pkg)) == []


# ---- the checker itself finds what it must find ------------------------------------------------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / "ragen" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path / "ragen"


def test_the_checker_finds_a_cycle_made_of_function_level_imports(tmp_path):
    core = _tree(tmp_path, {"__init__.py": "", "plugins/__init__.py": "", "serve/__init__.py": "",
                            "plugins/loader.py": "def f():\n    from ragen.serve import remote\n",
                            "serve/remote.py": "from ragen.plugins.loader import f\n"})
    assert cycles(graph(core)) == [["ragen.plugins.loader", "ragen.serve.remote"]]


def test_the_checker_finds_back_edges(tmp_path):
    core = _tree(tmp_path, {"__init__.py": "", "rollout/__init__.py": "", "train/__init__.py": "",
                            "contract/__init__.py": "", "plugins/__init__.py": "",
                            "rollout/runner.py": "from ragen.train import losses\n", "train/losses.py": "",
                            "contract/env.py": "from ragen.plugins import loader\n", "plugins/loader.py": ""})
    bad = layer_violations(graph(core))
    assert len(bad) == 2
    assert any("ragen.rollout.runner (rollout" in b and "ragen.train.losses" in b for b in bad)
    assert any("contract imports only" in b for b in bad)


def test_the_trainer_stays_one_screen_of_phases():
    """The step reads top to bottom (docs/architecture.md): building, log-probs, the update and checkpoints live in
    their own modules, so the Trainer class and its step stay short and the step's module imports few others."""
    path = CORE / "train" / "trainer.py"
    tree = ast.parse(path.read_text())
    [trainer] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Trainer"]
    [step] = [n for n in trainer.body if isinstance(n, ast.FunctionDef) and n.name == "step"]
    assert trainer.end_lineno - trainer.lineno + 1 <= 250
    assert step.end_lineno - step.lineno + 1 <= 70
    assert len(graph(CORE)["ragen.train.trainer"]) <= 10, sorted(graph(CORE)["ragen.train.trainer"])
