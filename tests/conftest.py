"""Shared fixtures: a small real-image folder and Hydra composition of the shipped configs."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")


def _fashion_images(n: int) -> tuple[np.ndarray, np.ndarray]:
    with gzip.open(FASHION_MNIST / "t10k-images-idx3-ubyte.gz", "rb") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
    with gzip.open(FASHION_MNIST / "t10k-labels-idx1-ubyte.gz", "rb") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    return images[:n], labels[:n]


@pytest.fixture(scope="session")
def image_folder(tmp_path_factory) -> Path:
    """``root/{train,val}/<class>/<i>.png``: 6 classes of real images (solo-learn's linear probe reports top-5) (Fashion-MNIST when the
    Debian package is installed, otherwise seeded class-dependent patterns), 32x32 RGB."""
    from PIL import Image

    root = tmp_path_factory.mktemp("images")
    if (FASHION_MNIST / "t10k-images-idx3-ubyte.gz").is_file():
        images, labels = _fashion_images(2000)
    else:
        rng = np.random.default_rng(0)
        labels = rng.integers(0, 10, 2000).astype(np.uint8)
        images = (rng.random((2000, 28, 28)) * 60 + labels[:, None, None] * 19).astype(np.uint8)
    per_class = {"train": 12, "val": 6}
    for split, count in per_class.items():
        for cls in range(6):
            folder = root / split / f"class{cls}"
            folder.mkdir(parents=True)
            picks = np.flatnonzero(labels == cls)
            picks = picks[:count] if split == "train" else picks[-count:]
            for i, idx in enumerate(picks):
                Image.fromarray(images[idx]).convert("RGB").resize((32, 32)).save(
                    folder / f"{i}.png"
                )
    return root


def compose(config_dir: str, name: str, overrides: list[str] | None = None):
    """Composes a shipped config with Hydra, as ``main_*.py --config-path ... --config-name``."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(REPO / config_dir), version_base="1.2"):
        cfg = hydra_compose(config_name=name, overrides=overrides or [])
    OmegaConf.set_struct(cfg, False)
    return cfg


def tiny_pretrain_overrides(image_folder: Path, out_dir: Path) -> list[str]:
    """Overrides that make any shipped pretraining config a seconds-long CPU run."""
    return [
        "data.dataset=custom",
        f"data.train_path={image_folder / 'train'}",
        f"data.val_path={image_folder / 'val'}",
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

    from solo_bayesncl.cli.pretrain import prepare_pretrain_cfg
    from solo_bayesncl.models import build_method

    cfg = prepare_pretrain_cfg(
        compose(
            "scripts/pretrain/cifar",
            config,
            [
                "data.dataset=custom",
                f"data.train_path={image_folder / 'train'}",
                f"data.val_path={image_folder / 'val'}",
                f"method_kwargs.proj_hidden_dim={proj_hidden_dim}",
                f"method_kwargs.proj_output_dim={proj_output_dim}",
                "optimizer.batch_size=8",
                "accelerator=cpu",
            ],
        ),
        check_data=False,
    )
    torch.manual_seed(0)
    model = build_method(cfg)
    if edit is not None:
        with torch.no_grad():
            edit(model)
    folder.mkdir(parents=True)
    path = folder / "last.ckpt"
    torch.save({"state_dict": model.state_dict()}, path)
    (folder / "args.json").write_text(json.dumps(OmegaConf.to_container(cfg, resolve=True)))
    return path
