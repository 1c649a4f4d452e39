"""The product shell as a user meets it: every declared command runs from any folder (from the
source tree and from a built wheel), shipped configs are found without the checkout, precision
follows the machine without a warning, runs are named after their dataset, input errors are one
line, third-party noise is filtered in the commands only."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
import venv
import warnings
import zipfile
from pathlib import Path

import pytest
from helpers import REPO, compose

solo = pytest.mark.solo


def _console_scripts() -> dict[str, str]:
    """``name -> module:function`` as declared in pyproject.toml's ``[project.scripts]``."""
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts, "pyproject.toml declares no console scripts"
    return dict(scripts)


CONSOLE_SCRIPTS = _console_scripts()


def _env_without_checkout() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HYDRA_FULL_ERROR")}


@pytest.mark.parametrize("name", sorted(CONSOLE_SCRIPTS))
def test_every_console_script_answers_help_from_another_folder(name, tmp_path):
    # what the installed wrapper does: import module, call function with sys.argv
    module, function = CONSOLE_SCRIPTS[name].split(":")
    code = (
        "import importlib, sys\n"
        f"sys.argv = [{name!r}, '--help']\n"
        f"sys.exit(getattr(importlib.import_module({module!r}), {function!r})())\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**_env_without_checkout(), "PYTHONPATH": str(REPO)},
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage" in proc.stdout.lower() or "powered by hydra" in proc.stdout.lower()
    assert not list(tmp_path.iterdir()), "--help wrote files into the current folder"


def test_main_scripts_are_thin_wrappers():
    for script, target in (
        ("main_pretrain.py", "solo_bayesncl.cli.pretrain"),
        ("main_linear.py", "solo_bayesncl.cli.linear"),
        ("main_knn.py", "solo_bayesncl.cli.knn"),
    ):
        assert CONSOLE_SCRIPTS[f"solo-bayesncl-{script[5:-3]}"] == f"{target}:main"
        tree = ast.parse((REPO / script).read_text())
        defined = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)]
        assert not defined, f"{script} defines {defined[0].name}: it should only call {target}.main"
        # through run_main, so that a Ctrl-C while torch and solo-learn load is one line too
        assert f'run_main("{target}", ' in (REPO / script).read_text()


def test_relative_config_path_is_read_from_the_shipped_configs(tmp_path):
    # README: --config-path scripts/pretrain/imagenet-100, run from a folder that has no scripts/
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "main_pretrain.py"),
            "--config-path",
            "scripts/pretrain/imagenet-100",
            "--config-name",
            "bayesncl.yaml",
            "--cfg",
            "job",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**_env_without_checkout(), "PYTHONPATH": str(REPO)},
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "dataset: imagenet100" in proc.stdout


def test_linear_config_folder_is_found_by_folder_names_not_substrings(tmp_path):
    from solo_bayesncl.config.shipped import config_root, linear_dir_for, resolve_config_dir

    # a user's tree whose absolute path says "pretrain" elsewhere too
    mine = tmp_path / "pretrain-experiments" / "configs"
    (mine / "pretrain" / "small").mkdir(parents=True)
    (mine / "linear" / "small").mkdir(parents=True)
    assert linear_dir_for(mine / "pretrain" / "small") == mine / "linear" / "small"
    # the same folder, whether reached through the checkout's scripts/ link or the package
    assert linear_dir_for(resolve_config_dir("scripts/pretrain/imagenet-100")).resolve() == (
        config_root() / "linear" / "imagenet-100"
    )
    with pytest.raises(FileNotFoundError, match="no shipped linear config group 'small'"):
        linear_dir_for(tmp_path / "elsewhere" / "small")


def test_preset_config_dir_resolves_from_any_folder(tmp_path, monkeypatch):
    from solo_bayesncl.benchmark.presets import load_preset
    from solo_bayesncl.config.shipped import config_root

    monkeypatch.chdir(tmp_path)
    for name in ("cpu", "cifar100", "imagenet100"):
        preset = load_preset(name)
        assert preset.config_dir.parent == config_root() / "pretrain"
        assert (preset.config_dir / "bayesncl.yaml").is_file()


@pytest.mark.parametrize(
    ("config_dir", "name"),
    [
        ("scripts/pretrain/cifar", "bayesncl.yaml"),
        ("scripts/pretrain/imagenet-100", "ncl.yaml"),
        ("scripts/linear/cifar", "linear.yaml"),
        ("scripts/linear/imagenet-100", "linear.yaml"),
        ("scripts/linear/cifar", "linear_sgd.yaml"),
        ("scripts/linear/imagenet-100", "linear_sgd.yaml"),
    ],
)
def test_precision_follows_the_machine_without_a_warning(config_dir, name, monkeypatch):
    import torch

    from solo_bayesncl.config.runtime import resolve_runtime

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = resolve_runtime(compose(config_dir, name, ["accelerator=cpu"]))
    assert cfg.precision == "32"
    assert not [w for w in caught if "precision" in str(w.message)], caught[0].message

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert resolve_runtime(compose(config_dir, name)).precision == "16-mixed"
    explicit = compose(config_dir, name, ["precision=bf16-mixed"])
    assert resolve_runtime(explicit).precision == "bf16-mixed"


def test_explicit_half_precision_on_cpu_still_warns():
    from omegaconf import OmegaConf

    from solo_bayesncl.config.runtime import resolve_runtime

    with pytest.warns(UserWarning, match="precision=16-mixed is not supported on CPU"):
        cfg = resolve_runtime(OmegaConf.create({"accelerator": "cpu", "precision": "16-mixed"}))
    assert cfg.precision == "32"


@solo
def test_fashion_mnist_run_is_named_after_it():
    from solo_bayesncl.data.fashion_mnist import fashion_mnist_root
    from solo_bayesncl.training.pretrain import prepare_pretrain

    if not (fashion_mnist_root() / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip("Debian's dataset-fashion-mnist is not installed")
    cfg = compose(
        "scripts/pretrain/cifar", "bayesncl.yaml", ["data.dataset=fashion-mnist", "accelerator=cpu"]
    )
    assert prepare_pretrain(cfg).solo.name == "bayesncl-fashion-mnist"


@solo
def test_missing_dataset_is_one_line_and_exit_2(tmp_path):
    empty = tmp_path / "no-data"
    empty.mkdir()
    proc = subprocess.run(
        [sys.executable, str(REPO / "main_pretrain.py"), "data.dataset=fashion-mnist"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={
            **_env_without_checkout(),
            "PYTHONPATH": str(REPO),
            "SOLO_BAYESNCL_FASHION_MNIST": str(empty),
        },
        timeout=900,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("main_pretrain.py: error: Fashion-MNIST file")
    assert str(empty) in lines[0] and "SOLO_BAYESNCL_FASHION_MNIST" in lines[0]
    assert "Traceback" not in proc.stderr and "HYDRA_FULL_ERROR" not in proc.stderr


@pytest.mark.long
@solo
def test_entry_points_filter_the_known_third_party_warnings_and_the_library_does_not():
    code = (
        "import warnings, sys\n"
        "import torch, torchvision  # their own imports change the filters; the library's must not\n"
        "before = list(warnings.filters)\n"
        "import solo_bayesncl, solo_bayesncl.cli.pretrain, solo_bayesncl.training.pretrain\n"
        "assert warnings.filters == before, 'importing the library changed warning filters'\n"
        "if sys.argv[1] == 'quiet':\n"
        "    from solo_bayesncl.host.availability import quiet_third_party_warnings\n"
        "    quiet_third_party_warnings()\n"
        "import solo.methods, lightning.pytorch\n"
    )
    noisy = ("pkg_resources is deprecated", "Importing from timm", "Overwriting", "custom_fwd")
    for mode, expect_noise in (("loud", True), ("quiet", False)):
        proc = subprocess.run(
            [sys.executable, "-c", code, mode],
            capture_output=True,
            text=True,
            env={**_env_without_checkout(), "PYTHONPATH": str(REPO)},
            timeout=900,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        found = [n for n in noisy if n in proc.stderr]
        assert bool(found) == expect_noise, (mode, found, proc.stderr[-2000:])


def test_no_references_to_documents_outside_the_repository():
    # the method is explained in docs/method.md, not in a document users do not have
    unshipped_doc = "design".upper()  # the name of a team document that is not in the repository
    offenders = []
    files = [
        *REPO.glob("*.md"),
        *REPO.glob("*.py"),
        *REPO.glob("docs/**/*.md"),
        *REPO.glob("zoo/*"),
    ]
    files += [*REPO.glob("solo_bayesncl/**/*.py"), *REPO.glob("microbenchmarks/*.py")]
    files += [*REPO.glob("results/**/*.md"), *REPO.glob("scripts/**/*.yaml")]
    for path in files:
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if unshipped_doc in line:
                offenders.append(f"{path.relative_to(REPO)}:{i}")
    assert not offenders, offenders
    assert (REPO / "docs" / "method.md").is_file()


def _copy_source(dest: Path) -> Path:
    """The files a wheel is built from, without build leftovers of the checkout."""
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, dest / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    shutil.copytree(REPO / "solo_bayesncl", dest / "solo_bayesncl", ignore=ignore)
    return dest


@pytest.mark.long
@pytest.mark.slow
def test_wheel_ships_the_configs_and_its_commands_run_from_another_folder(tmp_path):
    (tmp_path / "src").mkdir()
    src = _copy_source(tmp_path / "src")
    dist = tmp_path / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
        + [str(src), "-w", str(dist)],
        capture_output=True,
        text=True,
        env=_env_without_checkout(),
        timeout=900,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = dist.glob("solo_bayesncl-*.whl")
    configs = REPO / "solo_bayesncl" / "configs"
    shipped = {str(p.relative_to(configs)) for p in configs.rglob("*.yaml")}
    assert len(shipped) > 20, shipped
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    missing = {f for f in shipped if f"solo_bayesncl/configs/{f}" not in names}
    assert not missing, f"yaml files not in the wheel: {sorted(missing)}"
    assert {f"solo_bayesncl/benchmark/presets/{p}.yaml" for p in ("cpu", "cifar100")} <= names
    assert "solo_bayesncl/zoo/manifest.json" in names  # the top-level zoo/manifest.json

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    py, bindir = env_dir / "bin" / "python", env_dir / "bin"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps"]
        + [str(wheel)],
        capture_output=True,
        text=True,
        env=_env_without_checkout(),
        timeout=900,
    )
    assert install.returncode == 0, install.stderr[-3000:]

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**_env_without_checkout(), "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}

    def run(*args: str) -> str:
        proc = subprocess.run(
            list(args), capture_output=True, text=True, cwd=elsewhere, env=env, timeout=300
        )
        assert proc.returncode == 0, f"{args}: {proc.stderr[-3000:]}"
        return proc.stdout

    where = run(str(py), "-c", "import solo_bayesncl; print(solo_bayesncl.__file__)")
    assert where.startswith(str(env_dir)), where
    manifest = run(
        str(py), "-c", "from solo_bayesncl.zoo import manifest; print(manifest.PROJECT_MANIFEST)"
    )
    assert manifest.strip().endswith("solo_bayesncl/zoo/manifest.json"), manifest
    assert manifest.startswith(str(env_dir)), manifest
    for name in CONSOLE_SCRIPTS:
        run(str(bindir / name), "--help")
    job = run(str(bindir / "solo-bayesncl-pretrain"), "--cfg", "job", "data.dataset=fashion-mnist")
    assert "method: bayesncl" in job and "dataset: fashion-mnist" in job
    job = run(
        str(bindir / "solo-bayesncl-pretrain"),
        "--config-path",
        "scripts/pretrain/imagenet-100",
        "--config-name",
        "ncl.yaml",
        "--cfg",
        "job",
    )
    assert "method: ncl" in job and "dataset: imagenet100" in job
    assert "linear-cifar100" in run(str(bindir / "solo-bayesncl-linear"), "--cfg", "job")
    dirs = run(
        str(py),
        "-c",
        "from solo_bayesncl.benchmark.presets import load_preset\n"
        "from solo_bayesncl.config.shipped import config_root, linear_dir_for\n"
        "p = load_preset('cpu'); print(config_root()); print(p.config_dir);"
        " print(linear_dir_for(p.config_dir))",
    ).split()
    packaged = str(env_dir)
    assert all(d.startswith(packaged) for d in dirs), dirs
    assert dirs[0].endswith(os.path.join("solo_bayesncl", "configs"))
    assert not list(elsewhere.iterdir()), "a command wrote files into the current folder"
