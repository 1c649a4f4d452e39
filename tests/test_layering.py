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
