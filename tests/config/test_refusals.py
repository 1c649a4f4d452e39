"""Settings a run cannot honour are refused in one line naming the key and what is allowed, when the
config is resolved and before any model is built: a strategy the CPU cannot run, compiling without
the C++ compiler inductor uses, a probe asked of a switched-off callback, a batch larger than each
process's share of the data, and a misspelt key of a section solo-learn reads. The shipped configs
declare every key the README sets without ``++``."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("solo", reason="needs upstream solo-learn installed")

import solo.methods  # noqa: E402,F401  (solo-learn first, then the plugin's methods)
from helpers import REPO, compose, image_folder_overrides  # noqa: E402

from solo_bayesncl.config import runtime  # noqa: E402
from solo_bayesncl.training.pretrain import prepare_pretrain  # noqa: E402

PRETRAIN_CONFIGS = sorted(
    (group, path.name)
    for group in ("cifar", "imagenet-100")
    for path in (REPO / "scripts" / "pretrain" / group).glob("*.yaml")
)
LINEAR_CONFIGS = sorted(
    (group, path.name)
    for group in ("cifar", "imagenet-100")
    for path in (REPO / "scripts" / "linear" / group).glob("*.yaml")
)


def _prepare(extra: list[str], image_folder: Path, check_data: bool = False):
    cfg = compose(
        "scripts/pretrain/cifar",
        "bayesncl.yaml",
        [
            *image_folder_overrides(image_folder),
            "method_kwargs.proj_hidden_dim=16",
            "method_kwargs.proj_output_dim=16",
            "optimizer.batch_size=8",
            "accelerator=cpu",
            "wandb.enabled=False",
            *extra,
        ],
    )
    return prepare_pretrain(cfg, check_data=check_data).solo


def _refused(extra: list[str], image_folder: Path, check_data: bool = False) -> str:
    with pytest.raises(ValueError) as err:
        _prepare(extra, image_folder, check_data)
    message = str(err.value)
    assert "\n" not in message
    return message


# ------------------------------------------------------------------------------------ strategy


@pytest.mark.parametrize(
    "strategy", ["ddp_spawn", "fsdp", "deepspeed", "ddp_spawn_find_unused_parameters_true"]
)
def test_a_strategy_the_cpu_cannot_run_is_refused_naming_what_it_can(strategy, image_folder):
    message = _refused(
        [f"strategy={strategy}", "devices=2", "optimizer.batch_size=16"], image_folder
    )
    assert message.startswith(
        f"strategy={strategy!r} cannot run on the CPU; allowed there: auto, ddp"
    )


@pytest.mark.parametrize("strategy", ["auto", "ddp", "ddp_find_unused_parameters_true"])
def test_the_strategies_the_cpu_runs_are_kept(strategy, image_folder):
    cfg = _prepare([f"strategy={strategy}", "devices=2", "optimizer.batch_size=16"], image_folder)
    assert cfg.strategy == ("ddp" if strategy == "auto" else strategy)


# ---------------------------------------------------------------------------- C++ compiler


def test_compiling_without_the_compiler_inductor_would_call_is_refused_before_training(
    image_folder, monkeypatch, tmp_path
):
    # inductor calls $CXX (else g++) and nothing else: a g++ on the path does not stand in for it
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    message = _refused(["++performance.compile=True"], image_folder)
    assert message.startswith("performance.compile=True: torch.compile needs a C++ compiler")
    assert "no-such-compiler" in message and "performance.compile=False" in message


def test_compiling_with_no_compiler_on_the_path_is_refused(image_folder, monkeypatch, tmp_path):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no g++, c++ or clang++
    message = _refused(["++performance.compile=True"], image_folder)
    assert "install g++" in message and "performance.compile=False" in message


def test_the_compiler_looked_up_is_the_one_inductor_uses(monkeypatch, tmp_path):
    tool = tmp_path / "my-cxx"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("CXX", str(tool))
    assert runtime.cpp_compiler() == str(tool)
    monkeypatch.delenv("CXX")
    monkeypatch.setenv("PATH", str(tmp_path))
    (tmp_path / "c++").write_text("#!/bin/sh\n")
    (tmp_path / "c++").chmod(0o755)
    assert runtime.cpp_compiler() is None  # inductor looks for g++, not c++


# ---------------------------------------------------------------- checkpoint.time_interval_s


@pytest.mark.parametrize(("group", "name"), PRETRAIN_CONFIGS)
def test_every_shipped_pretrain_config_takes_the_readmes_interval_override(group, name):
    cfg = compose(f"scripts/pretrain/{group}", name, ["checkpoint.time_interval_s=0"])
    assert cfg.checkpoint.time_interval_s == 0
    default = compose(f"scripts/pretrain/{group}", name)
    assert default.checkpoint.time_interval_s == 60  # DEFAULT_CHECKPOINT_INTERVAL_S


@pytest.mark.parametrize(("group", "name"), LINEAR_CONFIGS)
def test_every_shipped_linear_config_takes_the_interval_override(group, name):
    cfg = compose(f"scripts/linear/{group}", name, ["checkpoint.time_interval_s=0"])
    assert cfg.checkpoint.time_interval_s == 0


# ------------------------------------------------------------------- interpretability.probe


def test_a_probe_asked_of_the_switched_off_callback_is_refused(image_folder):
    message = _refused(
        ["++interpretability.probe=True", "++interpretability.enabled=False"], image_folder
    )
    assert message == (
        "interpretability.probe=True needs interpretability.enabled=True (the probe runs in "
        "the interpretability callback); set interpretability.enabled=True, or remove "
        "interpretability.probe"
    )


def test_a_probe_with_the_callback_on_is_accepted(image_folder):
    cfg = _prepare(
        ["++interpretability.probe=True", "++interpretability.enabled=True"], image_folder
    )
    assert cfg.interpretability.probe is True


# ------------------------------------------------------------------- batch and data share


def test_a_per_process_batch_larger_than_its_share_of_an_image_folder_is_refused(image_folder):
    # 72 training images over 2 processes: 36 each, fewer than a per-process batch of 64
    message = _refused(["devices=2", "optimizer.batch_size=128"], image_folder, check_data=True)
    assert message.startswith("data.fraction=-1 keeps 72 of the 72 training images")
    assert "optimizer.batch_size=128 over all devices" in message


def test_a_batch_within_the_share_of_an_image_folder_is_accepted(image_folder):
    cfg = _prepare(["devices=2", "optimizer.batch_size=64"], image_folder, check_data=True)
    assert cfg.optimizer.batch_size == 32


# --------------------------------------------------------------- keys of solo-learn's sections


@pytest.mark.parametrize(
    ("override", "section"),
    [
        ("++optimizer.lr_decay=0.1", "optimizer"),
        ("++scheduler.warmup_epoch=3", "scheduler"),
        ("++backbone.nme=resnet50", "backbone"),
        ("++wandb.projet=x", "wandb"),
        ("++auto_resume.max_hour=2", "auto_resume"),
    ],
)
def test_a_misspelt_key_of_a_section_solo_learn_reads_is_refused(override, section, image_folder):
    key = override.lstrip("+").split("=")[0].split(".")[1]
    message = _refused([override], image_folder)
    assert message.startswith(f"{section} has unknown key(s) {key}; known keys: ")
