"""Help and messages name the command as the user ran it, and say what a user needs: the shipped
configs by folder, the keys set most often, every kNN option with its default."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import types

import pytest
from helpers import REPO, compose, run_command
from omegaconf import OmegaConf

from solo_bayesncl.cli import linear, pretrain
from solo_bayesncl.cli.invocation import command_name


@pytest.mark.parametrize(
    ("argv0", "main_module", "expected"),
    [
        ("/venv/bin/solo-bayesncl-pretrain", None, "solo-bayesncl-pretrain"),
        ("/checkout/main_pretrain.py", None, "main_pretrain.py"),
        ("main_knn.py", None, "main_knn.py"),
        (
            "/site/solo_bayesncl/benchmark/__main__.py",
            "solo_bayesncl.benchmark.__main__",
            "python -m solo_bayesncl.benchmark",
        ),
        ("/site/pytest/__main__.py", "pytest.__main__", "solo-bayesncl-pretrain"),
        ("-c", None, "solo-bayesncl-pretrain"),
        ("", None, "solo-bayesncl-pretrain"),
    ],
)
def test_the_command_is_named_as_it_was_run(monkeypatch, argv0, main_module, expected):
    monkeypatch.setattr(sys, "argv", [argv0, "--help"])
    if main_module is not None:
        fake = types.ModuleType("__main__")
        fake.__spec__ = types.SimpleNamespace(name=main_module)
        monkeypatch.setitem(sys.modules, "__main__", fake)
    assert command_name("solo-bayesncl-pretrain") == expected


def _module_parsers():
    from solo_bayesncl.cli import benchmark, dashboard, evaluate, knn, zoo

    return {
        "solo-bayesncl-benchmark": lambda: benchmark.build_parser().format_usage(),
        "solo-bayesncl-zoo": lambda: zoo.build_parser().format_usage(),
        "solo-bayesncl-knn": lambda: knn.build_parser().format_usage(),
        "solo-bayesncl-evaluate": lambda: _usage_of(evaluate.parse_args),
        "solo-bayesncl-dashboard": lambda: _usage_of(dashboard.parse_args),
    }


def _usage_of(parse_args) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        parse_args(["--help"])
    return out.getvalue()


@pytest.mark.parametrize("script", sorted(_module_parsers()))
def test_a_console_script_shows_its_own_name_in_usage(monkeypatch, script):
    monkeypatch.setattr(sys, "argv", [f"/venv/bin/{script}", "--help"])
    usage = _module_parsers()[script]()
    assert usage.startswith(f"usage: {script} "), usage
    assert "python -m" not in usage.splitlines()[0]


def test_a_module_shows_python_m_in_usage(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "solo_bayesncl.zoo", "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("usage: python -m solo_bayesncl.zoo "), proc.stdout[:200]


def test_every_knn_option_says_its_default_and_matches_the_library():
    from solo_bayesncl.cli.knn import build_parser
    from solo_bayesncl.evaluation.knn import knn_eval

    parser = build_parser()
    text = parser.format_help()
    options = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    assert {a.dest for a in options} == {
        "dataset",
        "k",
        "temperature",
        "feature",
        "distance",
        "batch_size",
        "num_workers",
        "threads",
        "output",
    }
    for action in options:
        assert action.help and "(default: " in action.help, action.dest
    library = inspect.signature(knn_eval).parameters
    for dest, name in (
        ("temperature", "temperature"),
        ("feature", "feature"),
        ("distance", "distance"),
        ("batch_size", "batch_size"),
        ("num_workers", "num_workers"),
    ):
        default = parser.get_default(dest)
        assert default == library[name].default, dest
        assert f"(default: {default})" in " ".join(text.split()), dest
    assert parser.get_default("k") == list(library["ks"].default)
    assert "(default: 20)" in " ".join(text.split())


def _listed(key: str, cfg) -> bool:
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    # ``leaf in node`` is False for a mandatory ``???`` value; the list of keys holds it
    return node is not None and leaf in list(node)


@pytest.mark.parametrize(
    ("keys", "folder", "name"),
    [
        (pretrain.KEYS, "scripts/pretrain/cifar", "bayesncl.yaml"),
        (linear.KEYS, "scripts/linear/cifar", "linear.yaml"),
    ],
)
def test_every_key_in_help_is_a_key_of_the_default_config(keys, folder, name):
    cfg = compose(folder, name)
    for entry, meaning in keys:
        assert meaning
        for key in entry.split(", "):
            assert _listed(key, cfg), f"{key} (in --help) is not a key of {folder}/{name}"


@pytest.mark.parametrize(
    ("script", "kind", "keys"),
    [("main_pretrain.py", "pretrain", pretrain.KEYS), ("main_linear.py", "linear", linear.KEYS)],
)
def test_help_lists_the_shipped_configs_by_folder_and_the_common_keys(script, kind, keys):
    proc = run_command([script, "--help"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert out.startswith(f"usage: {script} [--config-path FOLDER] [--config-name NAME]")
    lines = out.splitlines()
    for folder in sorted((REPO / "scripts" / kind).iterdir()):
        names = sorted(p.name for p in folder.glob("*.yaml"))
        assert names
        line = next(x for x in lines if x.strip().startswith(f"scripts/{kind}/{folder.name} "))
        assert line.split()[1:] == names
    for entry, _ in keys:
        assert any(x.strip().startswith(entry) for x in lines), entry
    assert all(len(x) <= 100 for x in lines[: lines.index("== Configuration groups ==")])
    assert "== Config ==" in out  # Hydra's help follows: the composed config
    assert "is powered by Hydra" not in out


@pytest.mark.solo
def test_an_input_error_of_main_pretrain_is_prefixed_with_its_name():
    proc = run_command(["main_pretrain.py", "data.fraction=7"])
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "main_pretrain.py: error: data.fraction=7 is out of range; allowed: a number in (0, 1], "
        "or -1 for all the data"
    )


@pytest.mark.solo
def test_an_input_error_of_main_knn_is_prefixed_with_its_name(tmp_path):
    missing = tmp_path / "missing.ckpt"
    proc = run_command(["main_knn.py", str(missing)])
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"main_knn.py: error: checkpoint {missing} does not exist"
    )
