"""The package's structure: imports flow one way, and importing a module changes no global state.

The layers are read from ``solo_bayesncl.LAYERS`` (the one declared table): a module imports only
from its own sub-package and from those listed before it, inside a layer too. Read with ``ast``,
so function-level imports count too.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import solo_bayesncl

PACKAGE = Path(__file__).resolve().parents[1] / "solo_bayesncl"
ORDER = [name for _, packages in solo_bayesncl.LAYERS for name in packages]
COMMANDS = "cli"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every ``solo_bayesncl`` module a file imports, at any level of nesting."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{a.name}" for a in node.names)
    return {m for m in found if m == "solo_bayesncl" or m.startswith("solo_bayesncl.")}


def _area(module: str) -> str:
    """The sub-package of a module; a ``__main__`` module is a command."""
    parts = module.split(".")
    if parts[-1] == "__main__":
        return COMMANDS
    return parts[1] if len(parts) > 1 else ""


def _rank(area: str, order: list[str]) -> int:
    return order.index(area)


def _violations(order: list[str] | None = None) -> list[str]:
    order = ORDER if order is None else order
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        here = _area(module)
        if not here:
            continue  # the package's __init__ re-exports from every layer
        if here not in order:
            found.append(f"{module} is in no layer of solo_bayesncl.LAYERS")
            continue
        for imported in sorted(_imports(path)):
            area = _area(imported)
            if area in order and _rank(area, order) > _rank(here, order):
                found.append(f"{module} imports {imported}")
    return found


def test_every_sub_package_is_in_the_declared_table_and_nothing_is_loose_at_the_root():
    packages = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    assert sorted(ORDER) == packages
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert loose == []


def test_imports_never_run_up_a_layer_nor_to_a_later_package_of_the_same_layer():
    assert _violations() == []


def test_the_layer_check_sees_function_level_relative_and_same_layer_imports(tmp_path, monkeypatch):
    fake = tmp_path / "solo_bayesncl"
    for name in ("core", "metrics", "io", "config", "zoo"):
        (fake / name).mkdir(parents=True)
        (fake / name / "__init__.py").write_text("")
    (fake / "metrics" / "bad.py").write_text("def f():\n    from solo_bayesncl.zoo import load\n")
    (fake / "core" / "gates.py").write_text("from ..metrics import sparsity\n")
    (fake / "io" / "files.py").write_text("from solo_bayesncl.config import runtime\n")
    (fake / "zoo" / "__main__.py").write_text("from solo_bayesncl.cli import zoo\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    assert _violations(["core", "metrics", "io", "config", "zoo", "cli"]) == [
        "solo_bayesncl.core.gates imports solo_bayesncl.metrics",
        "solo_bayesncl.core.gates imports solo_bayesncl.metrics.sparsity",
        "solo_bayesncl.io.files imports solo_bayesncl.config",
        "solo_bayesncl.io.files imports solo_bayesncl.config.runtime",
        "solo_bayesncl.metrics.bad imports solo_bayesncl.zoo",
        "solo_bayesncl.metrics.bad imports solo_bayesncl.zoo.load",
    ]


OPTIONAL = {"solo", "lightning", "nvidia", "sklearn", "selenium", "wandb", "timm"}
"""The optional host (solo-learn and what it brings: Lightning, scikit-learn, timm) and the
optional extras (DALI, selenium, wandb): what the package docstring allows inside functions."""
BACKEND_NEUTRAL = {
    "matplotlib.pyplot",
    "kornia.augmentation",
    "kornia.enhance",
    "torch.distributed.nn.functional",
}
"""Imported inside the functions that use them, so that importing the library leaves global state
alone: matplotlib's backend, the warning filters kornia and torch.distributed.nn change."""


def _top_level_imports(tree: ast.Module) -> set[str]:
    """Modules imported when a module is imported (its body, and ``if``/``try`` blocks there)."""
    found: set[str] = set()
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
        elif isinstance(node, ast.If | ast.Try):
            stack.extend(node.body + node.orelse + getattr(node, "handlers", []))
        elif isinstance(node, ast.ExceptHandler):
            stack.extend(node.body)
    return found


def _function_level_imports_without_a_stated_reason() -> list[str]:
    trees = {
        _module_name(p): ast.parse(p.read_text(encoding="utf-8")) for p in PACKAGE.rglob("*.py")
    }
    tops = {name: _top_level_imports(tree) for name, tree in trees.items()}

    def needs_host(module: str, seen: set[str]) -> bool:
        """Whether importing ``module`` imports the optional host (it then waits in a function
        of a module that must import without it)."""
        if module in seen:
            return False
        seen.add(module)
        return any(
            i.split(".")[0] in OPTIONAL or (i.startswith("solo_bayesncl.") and needs_host(i, seen))
            for i in tops.get(module, ())
        )

    found = []
    for name, tree in sorted(trees.items()):
        if _area(name) == COMMANDS:
            continue  # commands import the library inside main: --help answers at once
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Import):
                    imported = [(a.name, [a.name]) for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    module = node.module or ""
                    imported = [(module, [module] + [f"{module}.{a.name}" for a in node.names])]
                else:
                    continue
                for module, loads in imported:
                    if module.split(".")[0] in OPTIONAL or module in BACKEND_NEUTRAL:
                        continue
                    # a module of a package whose __init__ needs the host needs it too
                    parents = {m.rsplit(".", i)[0] for m in loads for i in range(m.count("."))}
                    if any(
                        m.startswith("solo_bayesncl.") and needs_host(m, set())
                        for m in {*loads, *parents}
                    ):
                        continue
                    found.append(f"{name}:{node.lineno} imports {module} inside {function.name}")
    return found


def test_function_level_imports_only_for_the_optional_host_and_fast_commands():
    assert _function_level_imports_without_a_stated_reason() == []


def test_the_function_level_import_check_flags_a_sibling_or_hard_dependency(tmp_path, monkeypatch):
    fake = tmp_path / "solo_bayesncl"
    for name in ("core", "data", "cli"):
        (fake / name).mkdir(parents=True)
        (fake / name / "__init__.py").write_text("")
    (fake / "data" / "hosted.py").write_text("import solo.methods\n")
    (fake / "core" / "a.py").write_text(
        "def f():\n    import torch\n    import solo.utils\n    from solo_bayesncl.data import hosted\n"
        "def g():\n    from solo_bayesncl.core import b\n"
    )
    (fake / "core" / "b.py").write_text("")
    (fake / "cli" / "c.py").write_text("def main():\n    import torch\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    assert _function_level_imports_without_a_stated_reason() == [
        "solo_bayesncl.core.a:2 imports torch inside f",
        "solo_bayesncl.core.a:6 imports solo_bayesncl.core inside g",
    ]


@pytest.mark.parametrize(
    "module", ["solo_bayesncl.evaluation.plots", "solo_bayesncl.benchmark.plots"]
)
def test_importing_the_plot_modules_leaves_the_matplotlib_backend_alone(module):
    pytest.importorskip("matplotlib")
    code = (
        f"import sys, matplotlib, {module}; "
        "print(matplotlib.get_backend().lower(), 'matplotlib.pyplot' in sys.modules)"
    )
    env = {**os.environ, "MPLBACKEND": "svg"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.split() == ["svg", "False"]


def _study_imports(path: Path) -> list[str]:
    """Every import of the study (the top-level ``study`` package) in a file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        found += [
            f"{path.name}:{node.lineno} imports {n}" for n in names if n.split(".")[0] == "study"
        ]
    return found


def test_no_module_of_the_package_imports_the_study():
    """The study (``study/``) imports the package, never the other way round."""
    assert "study" not in ORDER  # the study is not one of the package's layers
    found = [line for path in sorted(PACKAGE.rglob("*.py")) for line in _study_imports(path)]
    assert found == []


def test_the_study_import_check_sees_an_import_of_the_study(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import os\ndef f():\n    from study.budget import main\nimport study\n")
    assert sorted(_study_imports(module)) == ["m.py:3 imports study.budget", "m.py:4 imports study"]


def test_the_wheel_carries_no_study_module_or_study_preset():
    """What setuptools packages (``find_packages`` with ``solo_bayesncl*``, and every file under
    those packages, the shipped presets included) holds nothing of the study."""
    setuptools = pytest.importorskip("setuptools")
    root = PACKAGE.parent
    packages = setuptools.find_packages(where=str(root), include=["solo_bayesncl*"])
    assert "solo_bayesncl.benchmark" in packages
    assert [p for p in packages if "study" in p.split(".")] == []
    files = [
        path.relative_to(root).as_posix()
        for package in packages
        for path in (root / package.replace(".", "/")).iterdir()
        if path.is_file() or path.name == "presets"
    ]
    presets = sorted(p.name for p in (PACKAGE / "benchmark" / "presets").glob("*.yaml"))
    assert presets == ["cifar100.yaml", "cpu.yaml", "imagenet100.yaml"]
    assert [f for f in files if Path(f).name.startswith("study")] == []
