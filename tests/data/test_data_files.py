"""Bad data files are named, not half-read: IDX headers and image/label counts of Fashion-MNIST,
truncated or corrupt ``.gz`` and ``features.npz``, and checkpoints whose weights and config do
not belong together, each in one line."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import image_folder_overrides

from solo_bayesncl.data.fashion_mnist import FashionMNIST, read_idx


def _idx(path: Path, array: np.ndarray, ndim: int | None = None) -> Path:
    """Writes ``array`` (uint8) as a gzipped IDX file, with ``ndim`` in the header if given."""
    header = bytes([0, 0, 8, ndim or array.ndim]) + b"".join(
        int(d).to_bytes(4, "big") for d in array.shape
    )
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())
    return path


def _split(root: Path, split: str, n_images: int, n_labels: int) -> None:
    stem = {"train": "train", "val": "t10k"}[split]
    rng = np.random.default_rng(0)
    _idx(root / f"{stem}-images-idx3-ubyte.gz", rng.integers(0, 255, (n_images, 28, 28)))
    _idx(root / f"{stem}-labels-idx1-ubyte.gz", rng.integers(0, 10, n_labels))


def test_consistent_files_load(tmp_path):
    _split(tmp_path, "train", 12, 12)
    data = FashionMNIST("train", root=tmp_path)
    assert len(data) == 12 and data[3][0].size == (28, 28)


def test_labels_of_another_split_are_refused(tmp_path):
    """The train labels replaced by the test labels: 10,000 labels for 60,000 images."""
    _split(tmp_path, "train", 60, 10)
    with pytest.raises(ValueError) as err:
        FashionMNIST("train", root=tmp_path)
    assert str(err.value) == (
        f"{tmp_path / 'train-labels-idx1-ubyte.gz'} holds 10 labels but "
        f"{tmp_path / 'train-images-idx3-ubyte.gz'} holds 60 images; the two files are not one "
        "split"
    )


def test_idx_headers_are_checked(tmp_path):
    images = _idx(tmp_path / "i.gz", np.zeros((4, 28, 28)))
    with pytest.raises(ValueError, match=r"i.gz: an IDX file of 3 dimension\(s\), expected 1"):
        read_idx(images, ndim=1)
    _split(tmp_path, "val", 5, 5)
    _idx(tmp_path / "t10k-images-idx3-ubyte.gz", np.zeros((5, 32, 32)))
    with pytest.raises(ValueError, match=r"images of 32x32 pixels, expected 28x28"):
        FashionMNIST("val", root=tmp_path)
    _idx(tmp_path / "t10k-images-idx3-ubyte.gz", np.zeros((5, 28, 28)))
    _idx(tmp_path / "t10k-labels-idx1-ubyte.gz", np.full(5, 12))
    with pytest.raises(ValueError, match=r"label 12 outside 0..9"):
        FashionMNIST("val", root=tmp_path)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "flipped"])
def test_truncated_or_corrupt_gz_names_the_file(tmp_path, damage):
    path = _idx(tmp_path / "t10k-images-idx3-ubyte.gz", np.ones((50, 28, 28)))
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(b"this is not gzip data at all")
    else:
        path.write_bytes(data[:20] + bytes(b ^ 0xFF for b in data[20:40]) + data[40:])
    with pytest.raises(ValueError) as err:
        read_idx(path)
    message = str(err.value)
    assert message.startswith(f"{path}: cannot be read (") and "truncated or corrupt" in message


# ---------------------------------------------------------------- features.npz


def _bundle(folder: Path) -> Path:
    from solo_bayesncl.dashboard.bundle import write_feature_bundle

    rng = np.random.default_rng(0)
    write_feature_bundle(
        folder,
        features=rng.random((60, 16), dtype=np.float32),
        labels=np.arange(60) % 3,
        class_names=["a", "b", "c"],
        thumbnails=rng.integers(0, 255, (60, 8, 8, 3), dtype=np.uint8),
    )
    return folder / "features.npz"


@pytest.mark.parametrize("damage", ["truncated", "garbage", "corrupt"])
def test_broken_features_npz_names_the_file_in_one_line(tmp_path, capsys, damage):
    from solo_bayesncl.cli.dashboard import main

    npz = _bundle(tmp_path / "report")
    data = npz.read_bytes()
    if damage == "truncated":
        npz.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        npz.write_bytes(b"garbage, not a zip")
    else:  # compressed member bytes damaged, the zip directory intact
        npz.write_bytes(data[:200] + bytes(len(data) // 3) + data[200 + len(data) // 3 :])
    assert main([str(tmp_path / "report"), "--out", str(tmp_path / "site")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {npz}: ") and err.count("\n") == 1
    assert "truncated or corrupt" in err and "pickled" not in err


# ---------------------------------------------------------------- checkpoints


def _ncl_weights_with_bayesncl_config(image_folder: Path, folder: Path) -> Path:
    pytest.importorskip("solo", reason="needs upstream solo-learn installed")
    import solo.methods  # noqa: F401
    from helpers import compose, method_of
    from omegaconf import OmegaConf

    from solo_bayesncl.training.pretrain import prepare_pretrain

    def cfg_of(name: str):
        return prepare_pretrain(
            compose(
                "scripts/pretrain/cifar",
                name,
                [
                    *image_folder_overrides(image_folder),
                    "method_kwargs.proj_hidden_dim=16",
                    "method_kwargs.proj_output_dim=16",
                    "accelerator=cpu",
                ],
            ),
            check_data=False,
        ).solo

    folder.mkdir()
    path = folder / "last.ckpt"
    torch.save({"state_dict": method_of(cfg_of("ncl.yaml")).state_dict()}, path)
    bayes = OmegaConf.to_container(cfg_of("bayesncl.yaml"))
    (folder / "args.json").write_text(json.dumps(bayes))
    return path


def test_ncl_weights_with_a_bayesncl_config_name_the_missing_keys(image_folder, tmp_path, capsys):
    from solo_bayesncl.cli.knn import main
    from solo_bayesncl.io.checkpoints import CheckpointError, load_checkpoint, load_method

    ckpt = _ncl_weights_with_bayesncl_config(image_folder, tmp_path / "run")
    with pytest.raises(CheckpointError) as err:
        load_method(load_checkpoint(ckpt))
    assert str(err.value) == (
        f"{ckpt}: its weights do not match the bayesncl model its config describes (missing "
        "gating_head.* (4)); is the args.json beside it from another run?"
    )
    with pytest.raises(SystemExit, match="2"):
        main([str(ckpt), "--num-workers", "0"])
    assert capsys.readouterr().err == f"solo-bayesncl-knn: error: {err.value}\n"


@pytest.mark.solo
def test_knn_on_a_corrupt_checkpoint_is_one_line(tmp_path, capsys):
    from solo_bayesncl.cli.knn import main

    (tmp_path / "run").mkdir()
    ckpt = tmp_path / "run" / "last.ckpt"
    ckpt.write_bytes(b"PK\x03\x04 truncated")
    (tmp_path / "run" / "args.json").write_text("{}")
    with pytest.raises(SystemExit, match="2"):
        main([str(ckpt)])
    err = capsys.readouterr().err
    assert err.startswith(f"solo-bayesncl-knn: error: {ckpt}: not a readable PyTorch checkpoint (")
    assert err.count("\n") == 1
