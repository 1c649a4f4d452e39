"""What the tests share besides fixtures: composing the shipped configs, the overrides that make
a run seconds long on a folder of images, a few training steps of a model laid out as pretraining
lays it out, a tiny checkpoint, a tiny benchmark preset and a fake benchmark result. Imported as ``from helpers import ...`` (``tests/`` is on the path through
``conftest.py``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")


TINY_FASHION_MNIST = [
    "data.dataset=fashion-mnist",
    "data.fraction=0.01",
    "data.val_fraction=0.02",
    "max_epochs=1",
    "optimizer.batch_size=32",
    "data.num_workers=0",
    "accelerator=cpu",
]
"""Overrides of a one-epoch CPU pretraining on 1% of Fashion-MNIST (600 training images)."""


def run_command(args: list[str], timeout: float = 900) -> subprocess.CompletedProcess:
    """Runs ``python ARGS`` in the checkout, as a user would from its root; output captured."""
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


def signals_at_default() -> None:
    """A child's ``preexec_fn``: SIGINT and SIGTERM at their default disposition, whatever the
    test process inherited. A shell starts a background job (``nohup make test &``) with SIGINT
    ignored, a child inherits that, and Python installs its KeyboardInterrupt handler only where
    SIGINT is not ignored at start-up: without this reset, a test's Ctrl-C would never arrive."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)


def signal_after(
    command: list[str],
    pattern: str,
    root: Path,
    signum: int,
    *,
    group: bool = False,
    children: bool = False,
    env: dict[str, str] | None = None,
    cwd: Path = REPO,
    timeout: float = 900,  # a guard against a run that hangs, not a measure of speed
) -> tuple[int, str, str]:
    """Starts ``command`` with its signals at their defaults (:func:`signals_at_default`), sends
    ``signum`` once a file matching ``pattern`` exists under ``root`` (``group``: to its whole
    process group, as a terminal's Ctrl-C reaches every process of a job; ``children``: only to
    the processes it started, not to itself); returns the finished process's (status, stdout,
    stderr)."""
    proc = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=group,
        preexec_fn=signals_at_default,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if list(root.glob(pattern)):
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended before it could be signalled"
    if children:
        started = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        assert started, "the command started no process"
        for pid in started:
            os.kill(int(pid), signum)
    else:
        (os.killpg if group else os.kill)(proc.pid, signum)
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def image_folder_overrides(image_folder: Path) -> list[str]:
    """The overrides that point a shipped config at a ``train/`` + ``val/`` image folder."""
    return [
        "data.dataset=custom",
        f"data.train_path={image_folder / 'train'}",
        f"data.val_path={image_folder / 'val'}",
    ]


def compose(config_dir: str, name: str, overrides: list[str] | None = None):
    """Composes a shipped config with Hydra, as ``main_*.py --config-path ... --config-name``."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(REPO / config_dir), version_base="1.2"):
        cfg = hydra_compose(config_name=name, overrides=overrides or [])
    OmegaConf.set_struct(cfg, False)
    return cfg


def small_bayesncl_cfg(image_folder: Path, extra: list[str] | None = None):
    """BayesNCL's shipped CIFAR config on the ``image_folder`` fixture at 32 px (the ImageNet
    stem: 2 x 2 maps in ``layer3``, 1 x 1 in ``layer4``), a 64/32 projector, batches of 8, on the
    CPU, checked as pretraining checks it; ``extra`` overrides last."""
    from solo_bayesncl.training.pretrain import prepare_pretrain

    overrides = [
        *image_folder_overrides(image_folder),
        "method_kwargs.proj_hidden_dim=64",
        "method_kwargs.proj_output_dim=32",
        "optimizer.batch_size=8",
        "accelerator=cpu",
        *(extra or []),
    ]
    return prepare_pretrain(
        compose("scripts/pretrain/cifar", "bayesncl.yaml", overrides), check_data=False
    ).solo


def tiny_pretrain_overrides(image_folder: Path, out_dir: Path) -> list[str]:
    """Overrides that make any shipped pretraining config a seconds-long CPU run."""
    return [
        *image_folder_overrides(image_folder),
        "data.num_workers=0",
        "optimizer.batch_size=8",
        "method_kwargs.proj_hidden_dim=64",
        "method_kwargs.proj_output_dim=32",
        "max_epochs=1",
        f"checkpoint.dir={out_dir}",
        "auto_resume.enabled=False",
        "accelerator=cpu",
        "devices=1",
    ]


def untrained_checkpoint(
    folder: Path,
    config: str,
    image_folder: Path,
    proj_hidden_dim: int,
    proj_output_dim: int,
    edit=None,
) -> Path:
    """A solo-learn-layout checkpoint (``last.ckpt`` + ``args.json``) of an untrained model of a
    shipped CIFAR config on ``image_folder`` (seed 0); ``edit(model)`` may change its weights
    first. Needs solo-learn."""
    import json

    import torch
    from omegaconf import OmegaConf

    from solo_bayesncl.training.pretrain import prepare_pretrain

    cfg = prepare_pretrain(
        compose(
            "scripts/pretrain/cifar",
            config,
            [
                *image_folder_overrides(image_folder),
                f"method_kwargs.proj_hidden_dim={proj_hidden_dim}",
                f"method_kwargs.proj_output_dim={proj_output_dim}",
                "optimizer.batch_size=8",
                "accelerator=cpu",
            ],
        ),
        check_data=False,
    ).solo
    torch.manual_seed(0)
    model = method_of(cfg)
    if edit is not None:
        with torch.no_grad():
            edit(model)
    folder.mkdir(parents=True)
    path = folder / "last.ckpt"
    torch.save({"state_dict": model.state_dict()}, path)
    (folder / "args.json").write_text(json.dumps(OmegaConf.to_container(cfg, resolve=True)))
    return path


def tiny_preset_file(
    path: Path,
    data: Path,
    out_dir: str | Path,
    *,
    methods: tuple[str, ...] = ("bayesncl",),
    max_epochs: int = 1,
    extra_overrides: tuple[str, ...] = (),
    **keys,
) -> Path:
    """Writes to ``path`` a benchmark preset of seconds-long CPU runs on ``data`` (a folder with
    ``train/`` and ``val/``); ``keys`` add or replace top-level preset keys. Returns ``path``."""
    preset = {
        "name": "tiny",
        "config_dir": str(REPO / "scripts/pretrain/cifar"),
        "methods": list(methods),
        "seeds": [5],
        "overrides": [
            *image_folder_overrides(data),
            "data.num_workers=0",
            "optimizer.batch_size=8",
            "method_kwargs.proj_hidden_dim=32",
            "method_kwargs.proj_output_dim=16",
            f"max_epochs={max_epochs}",
            *extra_overrides,
            "accelerator=cpu",
        ],
        "linear": {"max_epochs": 1, "batch_size": 8, "lr": 0.1},
        "knn": {"k": 3},
        "report": {"num_workers": 0, "batch_size": 16, "top_dims": 4},
        "out_dir": str(out_dir),
        **keys,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(preset, sort_keys=False))
    return path


def fake_result(method: str, seed: int, gain: float, linear: float = 80.0, variant=None, **extra):
    """A benchmark ``result.json`` payload with known values (consistency 0.3 + gain beside a
    shuffled baseline of 0.3), for the table and plot tests."""
    result = {
        "method": method,
        "seed": seed,
        "linear_top1": linear,
        "knn_top1": linear - 1.0,
        "seconds_per_epoch": 10.0,
        "peak_memory_mb": 1000.0,
        "metrics": {
            "semantic_consistency": 0.3 + gain,
            "semantic_consistency_shuffled": 0.3,
            "semantic_consistency_gain": gain,
            "semantic_entropy_freq": 1.5,
            "active_dims": 100.0,
            "sparsity": 0.5,
            "effective_rank": 40.0,
            "retrieval_p@1": 0.7,
        },
        **extra,
    }
    if variant:
        result["variant"] = variant
    return result


def real_image_batch(image_folder: Path, size: int = 8):
    """A solo-learn training batch ``(indexes, [view, flipped view], targets)`` of ``size`` real
    32 px images from the ``image_folder`` fixture's ``train/``, normalised to [-1, 1]."""
    import torch
    from PIL import Image
    from torchvision import transforms

    to_tensor = transforms.Compose(
        [transforms.ToTensor(), transforms.Normalize([0.5] * 3, [0.5] * 3)]
    )
    files = sorted((image_folder / "train").rglob("*.png"))[::4][:size]
    x1 = torch.stack([to_tensor(Image.open(f)) for f in files])
    return torch.arange(size), [x1, torch.flip(x1, dims=[3])], torch.arange(size) % 6


def method_of(cfg):
    """The freshly built method of a prepared pretraining config, as pretraining builds it."""
    from solo_bayesncl.config.settings import run_spec
    from solo_bayesncl.host.models import build_method

    method = run_spec(cfg).method
    return build_method(method.name, cfg, method.small_stem)


def few_training_steps(cfg, batch, steps: int = 3):
    """``steps`` optimisation steps of ``cfg``'s method on one batch, the model seeded and laid
    out as pretraining does (``seed_and_layout``), with its own optimizer and no trainer; returns
    the losses, the gradients of the first step and the model."""
    from solo_bayesncl.config.settings import run_spec
    from solo_bayesncl.training.fit import seed_and_layout

    machine = run_spec(cfg).trainer
    model = seed_and_layout(machine.seed, machine.performance, lambda: method_of(cfg))
    model.log = model.log_dict = lambda *a, **k: None  # no trainer attached
    model.scheduler = "none"
    optimizer = model.configure_optimizers()
    model.train()
    losses, first_grads = [], {}
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss = model.training_step(batch, 0)
        loss.backward()
        if step == 0:
            first_grads = {
                name: p.grad.detach().clone()
                for name, p in model.named_parameters()
                if p.grad is not None
            }
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses, first_grads, model


def assert_same_training_to_rounding(
    first: tuple[list[float], dict], second: tuple[list[float], dict]
) -> None:
    """Two ``few_training_steps`` runs (losses, first gradients) of one computation done in
    another order (kernels, layouts, thread counts): the first step's gradients within 1e-4 of
    their norm and the first two losses within 1e-4; the third within 3e-3, because the
    rounding grows over the steps (batch norm over 8 images, LARS's per-layer rescaling, hard
    gates near their threshold): 2e-7 at the first step, 1e-6 to 1e-5 at the second and up to
    1.5e-3 at the third were measured between such runs on one AVX2 CPU."""
    (first_losses, first_grads), (second_losses, second_grads) = first, second
    assert first_losses[-1] != first_losses[0]  # the steps did train
    assert second_losses[:2] == pytest.approx(first_losses[:2], rel=1e-4)
    assert second_losses == pytest.approx(first_losses, rel=3e-3)
    assert_gradients_close(first_grads, second_grads, rel=1e-4)


def assert_gradients_close(first: dict, second: dict, rel: float) -> None:
    """The same parameters got gradients in both, each pair within ``rel`` of the first's norm
    (plus 1e-7): the same computation up to float rounding."""
    assert first.keys() == second.keys()
    for name, grad in first.items():
        apart = float((grad - second[name]).norm())
        assert apart <= rel * float(grad.norm()) + 1e-7, (
            f"{name}: the first gradients differ by {apart:.2e} (norm {grad.norm():.2e})"
        )


def run_order(**fields):
    """A benchmark run's order (:class:`~solo_bayesncl.benchmark.presets.RunOrder`) with
    ``fields`` and placeholders for the rest."""
    from solo_bayesncl.benchmark.presets import RunOrder
    from solo_bayesncl.evaluation.options import ReportOptions

    values = {
        "method": "ncl",
        "variant": fields.get("method", "ncl"),
        "seed": 1,
        "run_key": "abc",
        "config_dir": "configs",
        "linear_config_dir": "configs",
        "overrides": [],
        "linear": {},
        "knn": {},
        "report": ReportOptions(),
    }
    return RunOrder(**{**values, **fields})
