"""Packaging: the wheel's package list agrees with the tree, the configs and the manifest exist
once (the top-level folders of solo-learn's layout are links to the package's files), and an
editable install prints nothing from setuptools."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tomllib
import venv

import pytest
from helpers import REPO
from setuptools import find_packages

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def test_the_declared_packages_are_exactly_the_packages_of_the_tree():
    declared = set(PYPROJECT["tool"]["setuptools"]["packages"])
    found = set(find_packages(str(REPO), include=["solo_bayesncl", "solo_bayesncl.*"]))
    assert declared == found, (
        f"pyproject.toml lists {sorted(declared - found)} that are not packages and misses "
        f"{sorted(found - declared)}"
    )


@pytest.mark.parametrize(
    ("top_level", "in_package"),
    [
        ("scripts/pretrain", "solo_bayesncl/configs/pretrain"),
        ("scripts/linear", "solo_bayesncl/configs/linear"),
        ("zoo/manifest.json", "solo_bayesncl/zoo/manifest.json"),
    ],
)
def test_solo_learns_layout_shows_the_shipped_files_themselves(top_level, in_package):
    link = REPO / top_level
    assert link.is_symlink(), f"{top_level} should be a link to {in_package}, not a copy"
    assert link.resolve() == (REPO / in_package).resolve()


@pytest.mark.slow
def test_an_editable_install_prints_nothing_from_setuptools(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy2(REPO / "pyproject.toml", src)
    shutil.copy2(REPO / "README.md", src)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    shutil.copytree(REPO / "solo_bayesncl", src / "solo_bayesncl", ignore=ignore)
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    # the new environment builds with this interpreter's packages (setuptools among them)
    (site,) = env_dir.glob("lib/python*/site-packages")
    (site / "outer.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(env_dir / "bin" / "python"), "install"]
        + ["--no-deps", "--no-build-isolation", "-e", str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    output = install.stdout + install.stderr
    noise = [
        line
        for line in output.splitlines()
        if "Warning" in line or "setuptools" in line or line.strip().startswith("!!")
    ]
    assert not noise, "\n".join(noise[:20])
