"""The two commands of a new machine: ``make benchmark`` and ``make test`` set everything up
through ``scripts/setup.sh``, which reuses what an earlier call installed."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys

import pytest
from helpers import REPO


def _make_dry_run(target: str) -> str:
    return subprocess.run(
        ["make", "-n", "--no-print-directory", target, "PYTHON=python3"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_each_command_sets_up_first_then_runs_its_job():
    benchmark = _make_dry_run("benchmark").splitlines()
    assert "scripts/setup.sh" in benchmark[0] and "--tests" not in benchmark[0]
    assert benchmark[-1] == ".venv/bin/python -m solo_bayesncl.benchmark --preset cpu"
    test = _make_dry_run("test").splitlines()
    assert "scripts/setup.sh --tests" in test[0]
    lint = ".venv/bin/python -m ruff check ."
    pytest_ = ".venv/bin/python -m pytest -q -rs -n auto --maxprocesses 4 --dist loadfile"
    assert test[1:] == [lint, f'{pytest_} -m "not long"']
    every = _make_dry_run("test-all").splitlines()
    assert "scripts/setup.sh --tests" in every[0]
    assert every[1:] == [lint, pytest_]


def test_the_long_tier_is_a_registered_marker_the_suite_uses():
    config = (REPO / "pyproject.toml").read_text()
    assert '"long: ' in config  # registered: a mistyped marker would warn
    marked = [
        p for p in (REPO / "tests").rglob("test_*.py") if "@pytest.mark.long" in p.read_text()
    ]
    assert REPO / "tests/integration/test_benchmark_interrupt.py" in marked


def test_the_ci_script_runs_the_readme_test_command():
    assert "\nmake test\n" in (REPO / ".ci/run").read_text()
    assert "make test" in (REPO / "README.md").read_text()


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_setup_in_a_clean_clone_installs_once_then_reuses_everything(tmp_path):
    """A clone of this repository, set up twice into a fresh venv that sees this interpreter's
    packages (torch and solo-learn are not downloaded again): the first call installs the
    package, the second finds everything in place and installs nothing."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    env = {**os.environ, "VENV": str(tmp_path / "venv"), "PYTHON": sys.executable}
    env.pop("PYTHONPATH", None)  # the venv's own install of the clone, not this checkout
    wheel = REPO.parent / "shared" / "wheels" / "solo_learn-1.0.6-py3-none-any.whl"
    if "SOLO_LEARN_SRC" not in env and wheel.is_file():
        env["SOLO_LEARN_SRC"] = str(wheel)  # the new venv sees the system's packages, not ours

    def setup() -> str:
        done = subprocess.run(
            ["bash", "scripts/setup.sh"], cwd=clone, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    first = setup()
    assert "creating the virtual environment" in first
    assert "installing solo-bayesncl from this folder" in first
    second = setup()
    assert "reusing the virtual environment" in second
    assert "installing" not in second, second
    assert "solo-bayesncl present" in second
    imported = subprocess.run(
        [
            str(tmp_path / "venv/bin/python"),
            "-c",
            "import solo_bayesncl; print(solo_bayesncl.__file__)",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert imported.stdout.strip().startswith(str(clone))


def _setup_with_stand_ins(
    tmp_path, python: str, env_extra: dict[str, str] | None = None, succeeds: bool = True
) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run a copy of setup.sh whose interpreter, ``dpkg`` and ``nvidia-smi`` are stand-ins: the
    interpreter records what it is asked and runs the bash ``python`` body given; every Debian
    package is present and there is no GPU. ``env_extra`` is added to its environment; unless
    ``succeeds`` is False it must exit 0. Returns the run and the interpreter's calls."""
    folder = tmp_path / "project"
    (folder / "scripts").mkdir(parents=True)
    for name in ("scripts/setup.sh", "pyproject.toml"):
        shutil.copy(REPO / name, folder / name)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.log"
    stand_ins = {
        "python": f'echo "$*" >> {calls}\n' + python,
        "dpkg": "exit 0\n",  # every Debian package present
        "nvidia-smi": "exit 1\n",  # no GPU
    }
    for name, body in stand_ins.items():
        (bin_dir / name).write_text("#!/usr/bin/env bash\n" + body)
        (bin_dir / name).chmod(0o755)
    # what the caller's environment says of solo-learn (CI exports both) is not the stand-in's
    inherited = {
        k: v for k, v in os.environ.items() if k not in ("SOLO_LEARN_SRC", "REQUIRE_SOLO_LEARN")
    }
    env = {**inherited, "PATH": f"{bin_dir}:{os.environ['PATH']}", "VENV": ""}
    env["PYTHON"] = str(bin_dir / "python")
    env.update(env_extra or {})
    done = subprocess.run(
        ["bash", "scripts/setup.sh"], cwd=folder, env=env, capture_output=True, text=True
    )
    if succeeds:
        assert done.returncode == 0, done.stdout + done.stderr
    return done, calls.read_text().splitlines() if calls.exists() else []


def test_an_unreachable_pytorch_index_is_tried_once_before_pypi(tmp_path):
    """Where PyTorch's CPU index cannot be reached (only a PyPI mirror), setup tries it once and
    falls back to PyPI, instead of pip's five retries per package."""
    done, calls = _setup_with_stand_ins(
        tmp_path, 'case "$*" in *"import torch"*|*download.pytorch.org*) exit 1 ;; esac\n'
    )
    installs = [line for line in calls if "pip install" in line]
    torch_installs = [line for line in installs if "torch==" in line]
    assert len(torch_installs) == 2, installs
    assert "download.pytorch.org" in torch_installs[0] and "--retries 0" in torch_installs[0]
    assert "download.pytorch.org" not in torch_installs[1]  # PyPI
    assert "installing PyTorch from PyPI instead" in done.stdout
    # PyPI's wheel is announced as what it is, not as the few-hundred-MB CPU one
    fallback = next(line for line in done.stdout.splitlines() if "from PyPI instead" in line)
    assert "CUDA build" in fallback and "~6 GB" in fallback


def test_the_summary_names_the_pytorch_build_and_its_size(tmp_path):
    """The CPU index is unreachable, so PyPI's CUDA build is installed: the last line says so,
    with the size measured on disk (the torch folder and the NVIDIA libraries beside it), not the
    "few hundred MB" the CPU attempt announced."""
    site = tmp_path / "site-packages"
    (site / "torch").mkdir(parents=True)
    (site / "nvidia" / "cublas").mkdir(parents=True)
    (site / "torch" / "lib.so").write_bytes(b"\0" * (2 << 20))  # 2 MiB
    (site / "nvidia" / "cublas" / "lib.so").write_bytes(b"\0" * (3 << 20))  # 3 MiB
    build = f"2.14.1+cu128\n12.8\n{site / 'torch'}\n{site / 'nvidia'}"
    done, _ = _setup_with_stand_ins(
        tmp_path,
        'case "$*" in\n'
        f'  *torch.version.cuda*) printf "%s\\n" "{build}" ;;\n'
        "  *SOLO_LEARN_AVAILABLE*) echo True ;;\n"
        '  *"import torch"*|*download.pytorch.org*) exit 1 ;;\n'
        "esac\n",
    )
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("== setup: done; PyTorch 2.14.1+cu128"), last
    assert "the CUDA 12.8 build" in last and "CPU" not in last, last
    assert "5 MB on disk" in last, last  # 2 MiB + 3 MiB, as du measures them
    assert last.endswith("solo-learn available: True"), last


def test_the_summary_names_a_cpu_build(tmp_path):
    """A CPU build (``torch.version.cuda`` is None) without NVIDIA libraries: its own folder only."""
    torch_dir = tmp_path / "site-packages" / "torch"
    torch_dir.mkdir(parents=True)
    (torch_dir / "lib.so").write_bytes(b"\0" * (4 << 20))  # 4 MiB
    build = f"2.14.1+cpu\n\n{torch_dir}"
    done, _ = _setup_with_stand_ins(
        tmp_path,
        'case "$*" in\n'
        f'  *torch.version.cuda*) printf "%s\\n" "{build}" ;;\n'
        '  *"import torch"*) exit 1 ;;\n'
        "esac\n",
    )
    last = done.stdout.strip().splitlines()[-1]
    assert "PyTorch 2.14.1+cpu, the CPU build, 4 MB on disk" in last, last
    assert "CUDA" not in last, last


@pytest.mark.parametrize("present", [False, True])
def test_a_solo_learn_src_that_is_not_solo_learn_is_refused_before_anything_is_installed(
    tmp_path, present
):
    """``SOLO_LEARN_SRC`` naming a folder without solo-learn's ``setup.py`` and ``solo/`` package
    ends in one line naming it and a non-zero exit, before any install, also when a solo-learn is
    already installed."""
    other = tmp_path / "not-solo"
    other.mkdir()
    (other / "setup.py").write_text("from setuptools import setup\nsetup(name='other')\n")
    body = 'case "$*" in *"import importlib.metadata"*) exit 0 ;; esac\n' if present else ""
    done, calls = _setup_with_stand_ins(
        tmp_path, body, {"SOLO_LEARN_SRC": str(other)}, succeeds=False
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "setup: done" not in done.stdout
    line = (done.stdout + done.stderr).strip().splitlines()[-1]
    assert line == (
        f"== setup: SOLO_LEARN_SRC={other} is neither a solo-learn wheel nor a solo-learn "
        "checkout (no solo/__init__.py beside a setup.py or pyproject.toml); point it at a clone "
        "of https://github.com/vturrisi/solo-learn or a wheel built from one, or unset it"
    ), line
    assert not [c for c in calls if "pip install" in c]


def test_a_solo_learn_src_checkout_is_installed(tmp_path):
    src = tmp_path / "solo-learn"
    (src / "solo").mkdir(parents=True)
    (src / "solo" / "__init__.py").write_text("")
    (src / "setup.py").write_text("")
    _, calls = _setup_with_stand_ins(
        tmp_path,
        'case "$*" in *"import torch"*|*importlib.metadata*) exit 1 ;; esac\n',
        {"SOLO_LEARN_SRC": str(src)},
    )
    assert any("pip install" in c and c.endswith(str(src)) for c in calls), calls


PINNED_WHEEL_SHA256 = "10cba871cdc24fdfa947849bf98f04652e0f6b15f908b0a2d9e2486a78ac8212"
NOT_INSTALLED = 'case "$*" in *"import torch"*|*importlib.metadata*) exit 1 ;; esac\n'


def test_a_solo_learn_wheel_is_installed_and_its_digest_named(tmp_path):
    wheel = tmp_path / "solo_learn-1.0.6-py3-none-any.whl"
    wheel.write_bytes(b"a wheel of one's own build")
    done, calls = _setup_with_stand_ins(tmp_path, NOT_INSTALLED, {"SOLO_LEARN_SRC": str(wheel)})
    installs = [c for c in calls if "pip install" in c and c.endswith(str(wheel))]
    assert len(installs) == 1 and "--no-build-isolation" not in installs[0], calls
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert (
        f"== setup: installing solo-learn from the wheel {wheel} (sha256 {digest}: a build of "
        f"your own, not the pinned {PINNED_WHEEL_SHA256})"
    ) in done.stdout.splitlines()


def test_the_setup_script_pins_the_digest_of_the_wheel_ci_installs():
    # the same digest as the wheel's own README beside the checkout, where CI has one
    assert (
        f"SOLO_LEARN_WHEEL_SHA256={PINNED_WHEEL_SHA256}" in (REPO / "scripts/setup.sh").read_text()
    )
    beside = REPO.parent / "shared" / "wheels" / "solo_learn-1.0.6-py3-none-any.whl"
    if beside.is_file():
        assert hashlib.sha256(beside.read_bytes()).hexdigest() == PINNED_WHEEL_SHA256


def test_a_file_that_is_not_a_solo_learn_wheel_is_refused_before_anything_is_installed(tmp_path):
    other = tmp_path / "solo_learn-1.0.2-py3-none-any.whl"
    other.write_bytes(b"")
    done, calls = _setup_with_stand_ins(
        tmp_path, NOT_INSTALLED, {"SOLO_LEARN_SRC": str(other)}, succeeds=False
    )
    assert done.returncode == 2, done.stdout + done.stderr
    line = (done.stdout + done.stderr).strip().splitlines()[-1]
    assert line == (
        f"== setup: SOLO_LEARN_SRC={other} is a file but not a solo-learn 1.0.6 wheel "
        "(solo_learn-1.0.6-py3-none-any.whl); give that wheel or a solo-learn source tree, or "
        "unset it"
    ), line
    assert not [c for c in calls if "pip install" in c]


def test_ci_fails_the_setup_when_solo_learn_cannot_be_installed(tmp_path):
    """REQUIRE_SOLO_LEARN=1 (CI) turns "solo-learn could not be installed" from a note into a
    failure, so the suite never runs outside its host unnoticed."""
    body = NOT_INSTALLED + 'case "$*" in *SOLO_LEARN_AVAILABLE*) echo False ;; esac\n'
    wheel = tmp_path / "solo_learn-1.0.6-py3-none-any.whl"
    wheel.write_bytes(b"")
    env = {"SOLO_LEARN_SRC": str(wheel), "REQUIRE_SOLO_LEARN": "1"}
    done, _ = _setup_with_stand_ins(tmp_path, body, env, succeeds=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "setup: done" not in done.stdout
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "== setup: solo-learn is required (REQUIRE_SOLO_LEARN=1) but could not be installed"
        )
    )
    assert "REQUIRE_SOLO_LEARN=1" in (REPO / ".ci/run").read_text()


@pytest.mark.parametrize("github", ["unreachable", "reachable"])
def test_ci_installs_solo_learn_from_the_wheel_beside_the_checkout_when_github_is_unreachable(
    tmp_path, github
):
    project = tmp_path / "clone"
    (project / ".ci").mkdir(parents=True)
    shutil.copy(REPO / ".ci/run", project / ".ci/run")
    wheel = tmp_path / "shared" / "wheels" / "solo_learn-1.0.6-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    wheel.write_bytes(b"")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_ins = {
        "git": "exit 128\n" if github == "unreachable" else "exit 0\n",
        "make": 'echo "make $* SOLO_LEARN_SRC=${SOLO_LEARN_SRC:-} REQUIRE=$REQUIRE_SOLO_LEARN"\n',
    }
    for name, body in stand_ins.items():
        (bin_dir / name).write_text("#!/usr/bin/env bash\n" + body)
        (bin_dir / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "SOLO_LEARN_SRC"}
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    done = subprocess.run(
        ["bash", ".ci/run"], cwd=project, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    source = str(wheel) if github == "unreachable" else ""
    assert done.stdout.splitlines()[-1] == f"make test SOLO_LEARN_SRC={source} REQUIRE=1"
