"""The product shell: shipped configs, one CPU epoch of every method through main_pretrain.py,
linear and kNN evaluation of the checkpoint, offline Fashion-MNIST, and the error messages."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, compose, image_folder_overrides, tiny_pretrain_overrides

from solo_bayesncl.host.availability import solo_learn_available

CONFIG_DIRS = ("scripts/pretrain/cifar", "scripts/pretrain/imagenet-100")
METHOD_FILES = ("bayesncl.yaml", "ncl.yaml", "simclr.yaml", "mocov2plus.yaml")
BUDGET_KEYS = (
    "backbone",
    "data.dataset",
    "max_epochs",
    "optimizer.batch_size",
    "augmentations",
    "seed",
    "precision",
    "method_kwargs.proj_hidden_dim",
    "method_kwargs.proj_output_dim",
)
solo = pytest.mark.solo


def _read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("config_dir", CONFIG_DIRS)
def test_four_configs_share_one_budget(config_dir):
    from omegaconf import OmegaConf

    cfgs = [compose(config_dir, name) for name in METHOD_FILES]
    for key in BUDGET_KEYS:
        values = {
            json.dumps(OmegaConf.to_container(OmegaConf.create({"v": OmegaConf.select(c, key)})))
            for c in cfgs
        }
        assert len(values) == 1, f"{key} differs across the four {config_dir} configs: {values}"
    assert [c.method for c in cfgs] == ["bayesncl", "ncl", "simclr", "mocov2plus"]


@solo
@pytest.mark.parametrize("config_dir", CONFIG_DIRS)
@pytest.mark.parametrize("name", METHOD_FILES)
def test_every_config_passes_solo_parse_cfg(config_dir, name, image_folder):
    from solo_bayesncl.training.pretrain import prepare_pretrain

    overrides = [
        f"data.train_path={image_folder / 'train'}",
        f"data.val_path={image_folder / 'val'}",
        "accelerator=cpu",
    ]
    if config_dir.endswith("imagenet-100"):
        overrides.append("data.format=image_folder")  # DALI is optional: tests/data/test_dali.py
    cfg = prepare_pretrain(compose(config_dir, name, overrides), check_data=False).solo
    assert cfg.devices == [0] and cfg.accelerator == "cpu" and cfg.precision == "32"
    assert cfg.data.num_large_crops == 2


@solo
@pytest.mark.slow
@pytest.mark.parametrize("name", METHOD_FILES)
def test_one_cpu_epoch_writes_checkpoint_and_losses(name, image_folder, tmp_path):
    from solo_bayesncl.training.pretrain import pretrain

    cfg = compose("scripts/pretrain/cifar", name, tiny_pretrain_overrides(image_folder, tmp_path))
    pretrain(cfg)
    run_dirs = list((tmp_path / cfg.method).iterdir())
    assert len(run_dirs) == 1
    ckpts = list(run_dirs[0].glob("*.ckpt"))
    assert len(ckpts) == 1 and (run_dirs[0] / "args.json").is_file()
    rows = _read_csv(run_dirs[0] / "metrics.csv")
    columns = set(rows[0])
    assert "train_nce_loss_epoch" in columns or "train_nce_loss_step" in columns
    assert "val_acc1" in columns
    if cfg.method == "bayesncl":
        import torch

        state = torch.load(ckpts[0], map_location="cpu", weights_only=False)["state_dict"]
        assert {k.split(".")[0] for k in state} >= {"backbone", "projector", "gating_head"}
        assert {
            "train_kl_loss_epoch",
            "train_gate_open_ratio_epoch",
            "train_active_dims_epoch",
            "train_loss_epoch",
        } <= columns


@pytest.fixture(scope="module")
def bayesncl_checkpoint(image_folder, tmp_path_factory) -> Path:
    """One CPU epoch of ``python main_pretrain.py --config-name bayesncl.yaml`` in a subprocess."""
    if not solo_learn_available():
        pytest.skip("needs upstream solo-learn installed")
    out = tmp_path_factory.mktemp("pretrain")
    overrides = tiny_pretrain_overrides(image_folder, out) + ["interpretability.enabled=True"]
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "main_pretrain.py"),
            "--config-name",
            "bayesncl.yaml",
            *overrides,
        ],
        capture_output=True,
        text=True,
        cwd=out,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (out / "pretrain.stdout").write_text(proc.stdout)
    (out / "pretrain.stderr").write_text(proc.stderr)
    (ckpt,) = list((out / "bayesncl").glob("*/*.ckpt"))
    rows = _read_csv(ckpt.parent / "metrics.csv")
    assert any(r.get("interp/semantic_consistency") for r in rows)
    return ckpt


@solo
@pytest.mark.slow
def test_pretraining_starts_quietly_and_ends_with_a_summary(bayesncl_checkpoint):
    out = bayesncl_checkpoint.parents[2]
    stdout, stderr = (out / "pretrain.stdout").read_text(), (out / "pretrain.stderr").read_text()
    for noise in (
        "pkg_resources is deprecated",
        "Importing from timm",
        "Overwriting",
        "precision=",
    ):
        assert noise not in stderr, f"{noise!r} in the terminal:\n{stderr[-2000:]}"
    assert bayesncl_checkpoint.name.startswith("bayesncl-custom-")  # trained on data.dataset=custom
    summary = stdout[stdout.index("== pretraining bayesncl-custom finished") :].splitlines()
    acc = float(summary[1].removeprefix("last validation top-1: ").removesuffix("%"))
    last = [r["val_acc1"] for r in _read_csv(bayesncl_checkpoint.parent / "metrics.csv")]
    assert acc == pytest.approx(float([v for v in last if v][-1]), abs=0.005)  # printed to 0.01
    assert summary[2] == f"checkpoint:  {bayesncl_checkpoint}"
    assert summary[3] == f"metrics.csv: {bayesncl_checkpoint.parent / 'metrics.csv'}"


@solo
@pytest.mark.slow
def test_main_linear_takes_the_data_from_the_checkpoint(bayesncl_checkpoint, tmp_path):
    # as the README's evaluate block: no data.* given, the linear config says cifar100
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "main_linear.py"),
            f"pretrained_feature_extractor='{bayesncl_checkpoint}'",
            "max_epochs=1",
            "data.num_workers=0",
            "optimizer.batch_size=8",
            f"checkpoint.dir={tmp_path}",
            "accelerator=cpu",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (metrics,) = list((tmp_path / "linear").glob("*/metrics.csv"))
    assert any(r.get("val_acc1") for r in _read_csv(metrics))
    assert "== linear evaluation linear-custom finished" in proc.stdout
    assert f"metrics.csv: {metrics}" in proc.stdout
    (args,) = list((tmp_path / "linear").glob("*/args.json"))
    trained = json.loads((bayesncl_checkpoint.parent / "args.json").read_text())
    used = json.loads(args.read_text())
    assert used["data"]["train_path"] == trained["data"]["train_path"]
    assert used["data"]["augmentations"]["crop_size"] == trained["augmentations"][0]["crop_size"]


def test_linear_config_inherits_only_what_is_not_given():
    from omegaconf import OmegaConf

    from solo_bayesncl.config.linear import inherit_from_checkpoint
    from solo_bayesncl.config.settings import saved_run_spec

    trained = saved_run_spec(
        {
            "data": {
                "dataset": "custom",
                "offline_dataset": "fashion-mnist",
                "train_path": "/data/fm",
                "val_path": "/data/fm",
                "fraction": 0.05,
                "val_fraction": 0.1,
            },
            "augmentations": [{"crop_size": 28, "mean": [0.3] * 3, "std": [0.35] * 3}],
        }
    ).data

    def linear_cfg():
        return OmegaConf.create(
            {
                "data": {
                    "dataset": "cifar100",
                    "train_path": "./datasets",
                    "val_path": "./datasets",
                    "fraction": -1,
                    "val_fraction": -1,
                    "augmentations": {"crop_size": 32},
                }
            }
        )

    cfg = inherit_from_checkpoint(linear_cfg(), trained)
    assert cfg.data.dataset == "fashion-mnist" and cfg.data.train_path == "/data/fm"
    assert (cfg.data.fraction, cfg.data.val_fraction) == (0.05, 0.1)
    assert cfg.data.augmentations.crop_size == 28 and list(cfg.data.augmentations.mean) == [0.3] * 3
    cfg = inherit_from_checkpoint(linear_cfg(), trained, ["data.fraction=-1", "++max_epochs=3"])
    assert cfg.data.fraction == -1 and cfg.data.val_fraction == 0.1
    # another dataset keeps its own paths, fraction and normalisation; the crop size follows
    cfg = inherit_from_checkpoint(linear_cfg(), trained, ["data.dataset=cifar100"])
    assert cfg.data.dataset == "cifar100" and cfg.data.train_path == "./datasets"
    assert cfg.data.fraction == -1 and "mean" not in cfg.data.augmentations
    assert cfg.data.augmentations.crop_size == 28
    cfg = inherit_from_checkpoint(linear_cfg(), trained, ["data.augmentations.crop_size=32"])
    assert cfg.data.augmentations.crop_size == 32


@solo
@pytest.mark.slow
def test_main_linear_runs_on_a_bayesncl_checkpoint(bayesncl_checkpoint, image_folder, tmp_path):
    from solo_bayesncl.training.linear import linear_eval

    cfg = compose(
        "scripts/linear/cifar",
        "linear.yaml",
        [
            f"pretrained_feature_extractor='{bayesncl_checkpoint}'",
            *image_folder_overrides(image_folder),
            "data.num_workers=0",
            "optimizer.batch_size=8",
            "max_epochs=1",
            f"checkpoint.dir={tmp_path}",
            "accelerator=cpu",
        ],
    )
    linear_eval(cfg)
    (metrics,) = list((tmp_path / "linear").glob("*/metrics.csv"))
    assert any(r.get("val_acc1") for r in _read_csv(metrics))


@solo
@pytest.mark.slow
def test_knn_runs_on_a_bayesncl_checkpoint(bayesncl_checkpoint, tmp_path):
    from solo_bayesncl.cli.knn import main

    out = tmp_path / "knn.json"
    assert (
        main(
            [str(bayesncl_checkpoint), "--k", "1", "3", "--num-workers", "0", "--output", str(out)]
        )
        == 0
    )
    results = json.loads(out.read_text())
    assert set(results) == {"knn_top1_k1", "knn_top5_k1", "knn_top1_k3", "knn_top5_k3"}
    assert all(0.0 <= v <= 100.0 for v in results.values())


def test_fashion_mnist_loads_offline():
    from solo_bayesncl.data.fashion_mnist import FashionMNIST, fashion_mnist_root

    if not (fashion_mnist_root() / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip("Debian's dataset-fashion-mnist is not installed")
    train, val = FashionMNIST("train"), FashionMNIST("val")
    assert (len(train), len(val)) == (60000, 10000)
    image, label = val[0]
    assert image.size == (28, 28) and image.mode == "RGB" and label == 9  # an ankle boot


@solo
def test_fashion_mnist_switch_resolves_before_parse_cfg():
    from solo_bayesncl.data.fashion_mnist import fashion_mnist_root
    from solo_bayesncl.training.pretrain import prepare_pretrain

    if not (fashion_mnist_root() / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip("Debian's dataset-fashion-mnist is not installed")
    cfg = prepare_pretrain(
        compose(
            "scripts/pretrain/cifar", "ncl.yaml", ["data.dataset=fashion-mnist", "accelerator=cpu"]
        )
    ).solo
    assert cfg.data.dataset == "custom" and cfg.data.offline_dataset == "fashion-mnist"
    assert cfg.data.num_classes == 10 and list(cfg.augmentations[0].mean) == pytest.approx(
        [0.286] * 3
    )


def test_missing_fashion_mnist_names_the_file(tmp_path, monkeypatch):
    from solo_bayesncl.data.fashion_mnist import FashionMNIST

    monkeypatch.setenv("SOLO_BAYESNCL_FASHION_MNIST", str(tmp_path))
    with pytest.raises(
        FileNotFoundError, match="train-images-idx3-ubyte.*apt-get install dataset-fashion-mnist"
    ):
        FashionMNIST("train")


@solo
def test_missing_cifar_points_at_the_offline_option(tmp_path, monkeypatch):
    from urllib.error import URLError

    import torchvision

    from solo_bayesncl.data.resolve import DatasetUnavailableError
    from solo_bayesncl.training.pretrain import prepare_pretrain

    def no_network(*args, **kwargs):
        raise URLError("no network")

    monkeypatch.setattr(torchvision.datasets.CIFAR100, "download", no_network)
    cfg = compose(
        "scripts/pretrain/cifar",
        "bayesncl.yaml",
        [f"data.train_path={tmp_path}", f"data.val_path={tmp_path}"],
    )
    with pytest.raises(
        DatasetUnavailableError,
        match="CIFAR100 is not in data.train_path=.*data.dataset=fashion-mnist",
    ):
        prepare_pretrain(cfg)


def test_entry_points_without_solo_learn_give_the_install_command(tmp_path):
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(
        "import sys\nclass _Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'solo' or name.startswith('solo.'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, _Block())\n"
    )
    env = {**__import__("os").environ, "PYTHONPATH": f"{tmp_path}:{REPO}"}
    for script in ("main_pretrain.py", "main_linear.py", "main_knn.py"):
        proc = subprocess.run(
            [sys.executable, str(REPO / script)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert proc.returncode == 2, proc.stderr
        assert "needs upstream solo-learn 1.0.6" in proc.stderr
        assert "pip install --no-build-isolation" in proc.stderr
    code = "import solo_bayesncl as s, solo_bayesncl.core.losses, solo_bayesncl.core.gates; print(s.SOLO_LEARN_AVAILABLE)"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stderr
