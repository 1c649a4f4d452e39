"""The shipped configs run under upstream solo-learn's own ``main_pretrain.py`` and
``main_linear.py``: the Hydra callback every shipped config declares registers ``bayesncl`` and
``ncl`` before the task runs, and refuses, naming the override, a config upstream's scripts would
read differently.

The runs of upstream's real scripts need a solo-learn checkout: set ``SOLO_LEARN_SRC`` to its
folder (the one holding ``main_pretrain.py``); without it they skip, saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from helpers import REPO, compose, image_folder_overrides, untrained_checkpoint

from solo_bayesncl.config.upstream import UpstreamScripts, upstream_problems

SHIPPED = sorted(
    p.relative_to(REPO)
    for kind in ("pretrain", "linear")
    for p in (REPO / "scripts" / kind).glob("*/*.yaml")
)
UPSTREAM_CPU = ["accelerator=cpu", "devices='1'", "precision=32"]
"""What upstream's scripts need on the CPU instead of the shipped ``auto`` values."""
SECONDS_LONG = [
    "data.num_workers=0",
    "optimizer.batch_size=8",
    "max_epochs=1",
    "++limit_train_batches=2",
    "++limit_val_batches=1",
    "++num_sanity_val_steps=0",
]


def _task(cfg) -> None:
    """A task function of this package (its module is ``tests...``, renamed below)."""


def _foreign_task(cfg) -> None:
    """A task function of another script, as upstream's ``main_pretrain.main``."""


_task.__module__ = "solo_bayesncl.cli.pretrain"
_foreign_task.__module__ = "__main__"


@pytest.mark.parametrize("path", SHIPPED, ids=str)
def test_every_shipped_config_declares_the_callback(path):
    callbacks = yaml.safe_load((REPO / path).read_text())["hydra"]["callbacks"]
    assert callbacks == {
        "solo_bayesncl": {"_target_": f"{UpstreamScripts.__module__}.UpstreamScripts"}
    }


@pytest.mark.solo
def test_the_callback_registers_the_methods(monkeypatch):
    import solo.methods

    for name in ("bayesncl", "ncl"):
        monkeypatch.delitem(solo.methods.METHODS, name, raising=False)
    cfg = compose("scripts/pretrain/cifar", "bayesncl.yaml")
    UpstreamScripts().on_job_start(config=cfg, task_function=_task)
    from solo_bayesncl.methods import NCL, BayesNCL

    assert solo.methods.METHODS["bayesncl"] is BayesNCL
    assert solo.methods.METHODS["ncl"] is NCL


@pytest.mark.solo
def test_the_callback_refuses_for_another_script_what_it_reads_differently(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["/somewhere/main_pretrain.py"])
    cfg = compose("scripts/pretrain/cifar", "bayesncl.yaml")
    with pytest.raises(SystemExit) as stop:
        UpstreamScripts().on_job_start(config=cfg, task_function=_foreign_task)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("main_pretrain.py: error: under upstream solo-learn's script")
    assert err.count("\n") == 1
    assert "devices='auto'" in err and "devices=[0]" in err
    assert "precision=auto" in err and "precision=16-mixed" in err
    # this package's own entry point: the same config is not refused
    UpstreamScripts().on_job_start(config=cfg, task_function=_task)


def test_the_shipped_defaults_need_devices_and_precision_only():
    cfg = compose("scripts/pretrain/cifar", "bayesncl.yaml")
    problems = upstream_problems(cfg)
    assert [p.partition("=")[0] for p in problems] == ["devices", "precision"]
    assert upstream_problems(compose("scripts/pretrain/cifar", "bayesncl.yaml", UPSTREAM_CPU)) == []
    gpu = ["devices=[0]", "precision=16-mixed"]
    for name in ("bayesncl.yaml", "ncl.yaml", "simclr.yaml", "mocov2plus.yaml"):
        for group in ("cifar", "imagenet-100"):
            assert upstream_problems(compose(f"scripts/pretrain/{group}", name, gpu)) == []


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            ["data.dataset=fashion-mnist"],
            "data.dataset='fashion-mnist' is this package's own; upstream's script reads "
            "cifar10, cifar100, stl10, imagenet, imagenet100, custom (custom: an image folder)",
        ),
        (
            ["devices=[0,1]"],
            "optimizer.batch_size_scope=global: upstream's script reads optimizer.batch_size=256 "
            "per device, a global batch of 256 x 2; give optimizer.batch_size=128 "
            "optimizer.batch_size_scope=per_device",
        ),
        (
            ["devices=2"],
            "devices=2: upstream's script multiplies the learning rate by len(devices); give the "
            "GPU ids, devices=[0] (or [0,1], ...), or on the CPU accelerator=cpu devices='1'",
        ),
        (
            ["interpretability.enabled=True"],
            "interpretability.enabled=True: upstream's script has no interpretability callback; "
            "give interpretability.enabled=False or run this package's command",
        ),
        (
            ["data.val_fraction=0.1"],
            "data.val_fraction=0.1: upstream's script validates on the whole validation set; "
            "give data.val_fraction=-1 or run this package's command",
        ),
        (
            ["data.dataset=custom", "+backbone.small_stem=True"],
            "backbone.small_stem=True: upstream's script gives ResNets the small stem on cifar10 "
            "and cifar100 only; drop the key",
        ),
    ],
)
def test_each_key_upstream_reads_differently_is_named_with_its_override(overrides, expected):
    gpu = ["devices=[0]", "precision=16-mixed"]
    cfg = compose("scripts/pretrain/cifar", "bayesncl.yaml", [*gpu, *overrides])
    assert upstream_problems(cfg) == [expected]


def test_linear_configs_name_the_checkpoints_backbone(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "args.json").write_text(json.dumps({"backbone": {"name": "resnet50"}}))
    ckpt = tmp_path / "run" / "last.ckpt"
    for group in ("cifar", "imagenet-100"):
        cfg = compose(
            f"scripts/linear/{group}",
            "linear.yaml",
            [f"pretrained_feature_extractor='{ckpt}'", *UPSTREAM_CPU],
        )
        assert upstream_problems(cfg) == [
            "backbone.name is missing: upstream's main_linear.py builds the backbone from it "
            "(this package's command reads the checkpoint's args.json); give "
            "+backbone.name=resnet50 (the checkpoint's)",
            "probe=standard: upstream's script always uses solo-learn's classification "
            "transforms; give probe=official or run this package's command",
        ]
        fixed = compose(
            f"scripts/linear/{group}",
            "linear.yaml",
            [
                f"pretrained_feature_extractor='{ckpt}'",
                *UPSTREAM_CPU,
                "+backbone.name=resnet50",
                "probe=official",
            ],
        )
        assert upstream_problems(fixed) == []


_LIKE_UPSTREAM = """
import hydra
from solo.methods import METHODS  # at the top, as upstream's main_pretrain.py


@hydra.main(version_base="1.2")
def main(cfg):
    print("registered:", "bayesncl" in METHODS and "ncl" in METHODS, flush=True)


if __name__ == "__main__":
    main()
"""


def _python(args: list[str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    """``python ARGS`` in ``cwd`` with this checkout's package first on the path."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": path},
    )


@pytest.mark.long
@pytest.mark.solo
def test_a_script_shaped_like_upstreams_finds_the_methods_through_the_shipped_config(tmp_path):
    script = tmp_path / "main_pretrain.py"
    script.write_text(textwrap.dedent(_LIKE_UPSTREAM))
    config = ["--config-path", str(REPO / "scripts/pretrain/cifar"), "--config-name", "bayesncl"]
    ran = _python([str(script), *config, *UPSTREAM_CPU], tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "registered: True" in ran.stdout
    refused = _python([str(script), *config], tmp_path)
    assert refused.returncode == 2
    assert (
        refused.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "main_pretrain.py: error: under upstream solo-learn's script the shipped config needs: "
            "devices='auto'"
        )
    )
    assert "registered:" not in refused.stdout


@pytest.fixture
def upstream_src() -> Path:
    """The solo-learn checkout named by ``SOLO_LEARN_SRC``; skips when unset or without its
    scripts."""
    value = os.environ.get("SOLO_LEARN_SRC")
    if not value:
        pytest.skip(
            "SOLO_LEARN_SRC is unset: set it to a solo-learn checkout (the folder holding "
            "main_pretrain.py) to run upstream's own scripts"
        )
    src = Path(value).expanduser()
    if src.is_file():
        pytest.skip(
            f"SOLO_LEARN_SRC={value} is a wheel, which carries solo-learn's package but not "
            "upstream's scripts: set it to a solo-learn checkout to run them"
        )
    missing = [s for s in ("main_pretrain.py", "main_linear.py") if not (src / s).is_file()]
    if missing:
        pytest.skip(f"SOLO_LEARN_SRC={value} holds no {' or '.join(missing)}")
    return src


@pytest.mark.solo
@pytest.mark.slow
def test_upstream_main_pretrain_trains_a_shipped_config(upstream_src, image_folder, tmp_path):
    out = tmp_path / "trained"
    ran = _python(
        [
            str(upstream_src / "main_pretrain.py"),
            "--config-path",
            str(REPO / "scripts/pretrain/cifar"),
            "--config-name",
            "bayesncl.yaml",
            *image_folder_overrides(image_folder),
            *SECONDS_LONG,
            *UPSTREAM_CPU,
            "method_kwargs.proj_hidden_dim=64",
            "method_kwargs.proj_output_dim=32",
            "auto_resume.enabled=False",
            f"checkpoint.dir={out}",
        ],
        tmp_path,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    (ckpt,) = (out / "bayesncl").glob("*/bayesncl-*-ep=0.ckpt")
    assert json.loads((ckpt.parent / "args.json").read_text())["method"] == "bayesncl"


@pytest.mark.solo
@pytest.mark.slow
def test_upstream_main_linear_trains_a_shipped_linear_config(upstream_src, image_folder, tmp_path):
    ckpt = untrained_checkpoint(tmp_path / "pretrained", "ncl.yaml", image_folder, 64, 32)
    out = tmp_path / "linear"
    ran = _python(
        [
            str(upstream_src / "main_linear.py"),
            "--config-path",
            str(REPO / "scripts/linear/cifar"),
            "--config-name",
            "linear.yaml",
            f"pretrained_feature_extractor='{ckpt}'",
            *image_folder_overrides(image_folder),
            *SECONDS_LONG,
            *UPSTREAM_CPU,
            "+backbone.name=resnet18",
            "probe=official",
            f"checkpoint.dir={out}",
        ],
        tmp_path,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert list((out / "linear").glob("*/linear-*-ep=0.ckpt"))


@pytest.mark.solo
@pytest.mark.parametrize(
    ("config", "override", "start"),
    [
        ("bayesncl.yaml", "method_kwargs.temperature=-1", "method_kwargs.temperature=-1"),
        ("ncl.yaml", "+method_kwargs.gate_threshold=0.3", "method_kwargs has unknown key(s)"),
        ("simclr.yaml", "method_kwargs.temperature=-1", "method_kwargs.temperature=-1"),
    ],
)
def test_the_callback_refuses_a_bad_method_key_for_another_script_in_one_line(
    monkeypatch, capsys, config, override, start
):
    """Upstream's script reaches the method's own check only inside its task, where Hydra shows
    the refusal as a traceback: the callback checks the method's keys first."""
    monkeypatch.setattr(sys, "argv", ["/somewhere/main_pretrain.py"])
    cfg = compose("scripts/pretrain/cifar", config, [*UPSTREAM_CPU, override])
    with pytest.raises(SystemExit) as stop:
        UpstreamScripts().on_job_start(config=cfg, task_function=_foreign_task)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"main_pretrain.py: error: {start}"), err
    assert err.count("\n") == 1


@pytest.mark.solo
def test_upstream_main_pretrain_refuses_a_bad_temperature_in_one_line(upstream_src, tmp_path):
    ran = _python(
        [
            str(upstream_src / "main_pretrain.py"),
            "--config-path",
            str(REPO / "scripts/pretrain/cifar"),
            "--config-name",
            "bayesncl.yaml",
            *UPSTREAM_CPU,
            "method_kwargs.temperature=-1",
            f"checkpoint.dir={tmp_path / 'out'}",
        ],
        tmp_path,
    )
    assert ran.returncode == 2, ran.stderr[-3000:]
    assert "Traceback" not in ran.stderr and "ConfigError" not in ran.stderr
    last = ran.stderr.strip().splitlines()[-1]
    assert last.startswith("main_pretrain.py: error: method_kwargs.temperature=-1 is out of range")
