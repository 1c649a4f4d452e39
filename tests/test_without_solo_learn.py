"""On a new machine without upstream solo-learn (CI cannot reach GitHub), the suite still collects
and runs: every module that only solo-learn brings (Lightning, timm, wandb, ...) is hidden from a
subprocess, which must collect every test without an error."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from helpers import REPO

from solo_bayesncl.host.availability import solo_learn_available


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement(line: str) -> tuple[str, tuple[str, ...], str]:
    """``name[extra,...] ... ; marker`` -> (name, extras, marker)."""
    spec, _, marker = line.partition(";")
    match = re.match(r"\s*([A-Za-z0-9_.\-]+)\s*(\[[^\]]*\])?", spec)
    assert match, line
    extras = tuple(e.strip() for e in (match.group(2) or "[]")[1:-1].split(",") if e.strip())
    return match.group(1), extras, marker.strip()


def _closure(requirements: list[str]) -> set[str]:
    """The installed distributions these requirement lines pull in, transitively."""
    from packaging.markers import Marker

    seen: set[str] = set()
    todo = list(requirements)
    while todo:
        name, extras, marker = _requirement(todo.pop())
        if _key(name) in seen:
            continue
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        seen.add(_key(name))
        for line in requires:
            _, _, sub_marker = _requirement(line)
            if sub_marker and not any(
                Marker(sub_marker).evaluate({"extra": extra}) for extra in (*extras, "")
            ):
                continue
            todo.append(line)
    return seen


def modules_only_solo_learn_brings() -> list[str]:
    """Top-level modules of the distributions solo-learn pulls in and this project does not."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    ours = _closure(project["dependencies"] + project["optional-dependencies"]["test"])
    theirs = _closure(["solo-learn"]) - ours
    return sorted(
        module
        for module, dists in metadata.packages_distributions().items()
        if module.isidentifier()
        and not module.startswith("_")
        and module != "tests"
        and any(_key(d) in theirs for d in dists)
    )


@pytest.mark.skipif(
    not solo_learn_available(),
    reason="solo-learn is not installed: this suite's own collection is the check",
)
def test_the_suite_collects_without_what_solo_learn_brings(tmp_path: Path):
    hidden = modules_only_solo_learn_brings()
    assert {"solo", "lightning", "timm"} <= set(hidden)
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in hidden)
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path), "HOME": str(tmp_path)},
    )
    errors = [line for line in result.stdout.splitlines() if line.startswith("ERROR ")]
    assert result.returncode == 0 and not errors, "\n".join(errors) or result.stdout[-3000:]
