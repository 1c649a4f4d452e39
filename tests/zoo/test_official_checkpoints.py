"""The official NCL checkpoints (docs/zoo.md) become verified zoo artifacts, end to end.

The official NCL code is a fork of solo-learn whose ``simclr`` gains ``method_kwargs.non_neg``
(``rep_relu`` on CIFAR, ``relu`` on ImageNet-100; ``None`` for its SimCLR runs) and a few keys
of its own. Its Checkpointer leaves, per run, ``trained_models/simclr/<run id>/`` holding
``<name>-<run id>-ep=<epoch>.ckpt`` (a Lightning checkpoint whose ``state_dict`` is solo-learn's
SimCLR's) beside ``args.json`` (the run's parsed config). Such a folder is built here with
upstream solo-learn's SimCLR, exported with the command line, verified, loaded back from the
artifact, and its weights compared with the ones saved.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("solo", reason="needs upstream solo-learn")

from omegaconf import OmegaConf  # noqa: E402

from solo_bayesncl.cli.zoo import main  # noqa: E402
from solo_bayesncl.zoo import load_artifact, open_artifact  # noqa: E402

pytestmark = pytest.mark.solo

RUN_ID = "offline-k3x9q2w7"
OFFICIAL_ONLY_KWARGS = ("drop", "non_neg", "loss_type", "tau", "gsize", "learnable_temp")
OFFICIAL_ONLY_KWARGS += ("normalize", "power_iter")


def official_args(dataset: str, non_neg: str) -> dict:
    """An ``args.json`` as the official code writes it for its pretraining config on
    ``dataset`` (its keys and defaults; a small projector keeps the test light)."""
    cifar = dataset.startswith("cifar")
    return {
        "name": f"simclr-resnet18-{dataset}" + ("" if non_neg == "None" else "-ncl"),
        "method": "simclr",
        "backbone": {"name": "resnet18", "kwargs": {}},
        "method_kwargs": {
            "proj_hidden_dim": 64,
            "proj_output_dim": 32,
            "temperature": 0.2 if cifar else 0.1,
            "drop": 0,
            "non_neg": non_neg,
            "loss_type": "xent",
            "tau": 1,
            "gsize": 256,
            "learnable_temp": 0,
            "normalize": "dim",
            "power_iter": 1,
        },
        "data": {
            "dataset": dataset,
            "train_path": "./data" if cifar else "./datasets/imagenet-100/train",
            "val_path": "./data" if cifar else "./datasets/imagenet-100/val",
            "format": "image_folder" if cifar else "dali",
            "num_workers": 4,
            "extra_data": "None",
            "dup": 1,
            "no_labels": False,
            "fraction": -1,
            "num_classes": 10 if dataset == "cifar10" else 100,
            "num_large_crops": 2,
            "num_small_crops": 0,
        },
        "augmentations": [
            {
                "rrc": {"enabled": True, "crop_min_scale": 0.08, "crop_max_scale": 1.0},
                "horizontal_flip": {"prob": 0.5},
                "crop_size": 32 if cifar else 224,
                "num_crops": 2,
            }
        ],
        "optimizer": {
            "name": "lars",
            "batch_size": 256,
            "lr": 0.4,
            "classifier_lr": 0.1,
            "weight_decay": 1e-4,
            "kwargs": {"clip_lr": True, "eta": 0.02, "exclude_bias_n_norm": True, "momentum": 0.9},
        },
        "scheduler": {"name": "warmup_cosine"},
        "checkpoint": {"enabled": True, "dir": "trained_models", "frequency": 1},
        "auto_resume": {"enabled": True},
        "max_epochs": 200 if cifar else 400,
        "devices": [0],
        "num_nodes": 1,
        "sync_batchnorm": True,
        "accelerator": "gpu",
        "strategy": "ddp",
        "precision": 16,
        "seed": 10,
        "wandb": {"enabled": False, "entity": None, "project": "solo-learn", "offline": False},
        "wandb_run_id": None,
    }


def official_run(root: Path, dataset: str, non_neg: str) -> tuple[Path, dict[str, torch.Tensor]]:
    """The run folder the official code leaves, and the weights it saved."""
    from solo.methods import METHODS

    args = official_args(dataset, non_neg)
    upstream = copy.deepcopy(args)  # the fork's model is solo-learn's SimCLR
    for key in OFFICIAL_ONLY_KWARGS:
        upstream["method_kwargs"].pop(key)
    torch.manual_seed(0)
    model = METHODS["simclr"](
        METHODS["simclr"].add_and_assert_specific_cfg(OmegaConf.create(upstream))
    )
    with torch.no_grad():  # non-trivial BatchNorm statistics, so that they are compared too
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 1.5)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    folder = root / "trained_models" / "simclr" / RUN_ID
    folder.mkdir(parents=True)
    ckpt = folder / f"{args['name']}-{RUN_ID}-ep={args['max_epochs'] - 1}.ckpt"
    torch.save(
        {
            "epoch": args["max_epochs"] - 1,
            "global_step": 39_000,
            "pytorch-lightning_version": "1.7.7",
            "state_dict": state,
            "loops": {},
            "callbacks": {},
            "optimizer_states": [{"state": {}, "param_groups": []}],
            "lr_schedulers": [{"last_epoch": 39_000}],
        },
        ckpt,
    )
    (folder / "args.json").write_text(json.dumps(args))
    return ckpt, state


@pytest.mark.parametrize(
    ("dataset", "non_neg", "method"),
    [
        ("cifar100", "rep_relu", "ncl"),
        ("cifar10", "None", "simclr"),
        ("imagenet100", "relu", "ncl"),
    ],
)
def test_official_checkpoint_exports_to_a_verified_artifact(
    dataset, non_neg, method, tmp_path, capsys
):
    ckpt, saved = official_run(tmp_path, dataset, non_neg)
    name = f"{method}-resnet18-{dataset}-official"
    out = tmp_path / "zoo"
    assert main(["export", str(ckpt), "--name", name, "--out", str(out)]) == 0
    printed = capsys.readouterr()
    entry = json.loads((out / f"{name}.entry.json").read_text())
    assert entry["method"] == method and entry["dataset"] == dataset
    assert entry["backbone"] == "resnet18" and entry["sha256"] in printed.out
    assert entry["config"]["method_kwargs"]["non_neg"] == non_neg  # the run's own setting

    artifact = out / f"{name}.pt"
    assert main(["verify", str(artifact), "--sha256", entry["sha256"]]) == 0
    assert "OK: sha256 matches" in capsys.readouterr().out
    stored = open_artifact(artifact, restore=False)
    assert stored.method == method and stored.dtype == "float32"

    model = load_artifact(artifact)
    loaded = model.state_dict()
    assert set(loaded) == set(saved)
    for key, tensor in saved.items():
        assert torch.equal(loaded[key], tensor), key
    backbone = load_artifact(artifact, as_="backbone")
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(backbone(x), model(x)["feats"], rtol=1e-4, atol=1e-5)


def test_an_args_json_written_from_the_official_yaml_needs_the_keys_parse_cfg_adds(
    tmp_path, capsys
):
    """A run folder holding only the ``.ckpt``: docs/zoo.md has the user write ``args.json``
    from the official pretraining YAML. Without the keys solo-learn's ``parse_cfg`` adds, the
    export is refused in one line naming the file and the key (it was a traceback); with
    ``data.num_classes``, ``data.num_large_crops`` and ``data.num_small_crops`` it exports."""
    ckpt, saved = official_run(tmp_path, "cifar100", "rep_relu")
    by_hand = official_args("cifar100", "rep_relu")  # what the YAML composes to, no more
    for key in ("num_classes", "num_large_crops", "num_small_crops", "no_labels", "fraction"):
        by_hand["data"].pop(key)
    for key in ("seed", "num_nodes", "wandb", "wandb_run_id"):
        by_hand.pop(key)
    args = ckpt.parent / "args.json"
    args.write_text(json.dumps(by_hand))
    argv = ["export", str(ckpt), "--name", "ncl-by-hand", "--out", str(tmp_path / "zoo")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {args}: the config has no data.num_classes")
    assert "\n" not in err and not (tmp_path / "zoo" / "ncl-by-hand.pt").exists()

    by_hand["data"].update(num_classes=100, num_large_crops=2, num_small_crops=0)
    args.write_text(json.dumps(by_hand))
    assert main(argv) == 0
    loaded = load_artifact(tmp_path / "zoo" / "ncl-by-hand.pt").state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in saved.items())
