"""The package's structure: imports flow one way, and importing a module changes no global state.

Layers, lowest first: the host-independent core (``nonneg``, ``gates``, ``losses``,
``distributed``, ``metrics``), the methods, the plugin's library modules (registration, models,
checkpoints, representations, data, config, trainer, runtime), then the commands and tools
(``cli``, ``evaluation``, ``benchmark``, ``zoo``, ``dashboard``). A module imports only from its
own layer or below; read with ``ast``, so function-level imports count too.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "solo_bayesncl"

CORE = {"nonneg", "gates", "losses", "distributed", "metrics"}
METHODS = {"methods"}
TOP = {"cli", "evaluation", "benchmark", "zoo", "dashboard"}


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
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _layer(area: str) -> int:
    if area in CORE:
        return 0
    if area in METHODS:
        return 1
    if area in TOP:
        return 3
    return 2


def _violations() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        here = _layer(_area(module))
        for imported in sorted(_imports(path)):
            area = _area(imported)
            if area and _layer(area) > here:
                found.append(f"{module} imports {imported}")
    return found


def test_imports_never_run_up_a_layer():
    assert _violations() == []


def test_the_layer_check_sees_function_level_and_relative_imports(tmp_path, monkeypatch):
    fake = tmp_path / "solo_bayesncl"
    (fake / "metrics").mkdir(parents=True)
    (fake / "metrics" / "__init__.py").write_text("")
    (fake / "metrics" / "bad.py").write_text("def f():\n    from solo_bayesncl.zoo import load\n")
    (fake / "gates.py").write_text("from .methods import ncl\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    assert _violations() == [
        "solo_bayesncl.gates imports solo_bayesncl.methods",
        "solo_bayesncl.gates imports solo_bayesncl.methods.ncl",
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
