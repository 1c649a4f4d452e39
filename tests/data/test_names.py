"""The dataset vocabulary: the real name of a resolved config's dataset, aliases, and run names
that say the dataset trained on."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from solo_bayesncl.data.names import (
    ALIASES,
    OFFLINE_DATASETS,
    SOLO_DATASETS,
    canonical_name,
    dataset_run_name,
    dataset_spec,
)


@pytest.mark.parametrize(
    ("name", "dataset", "expected"),
    [
        ("bayesncl-cifar100", "fashion-mnist", "bayesncl-fashion-mnist"),
        ("bayesncl-cifar100", "cifar100", "bayesncl-cifar100"),
        ("linear-cifar100", "cifar10", "linear-cifar10"),
        ("ncl-imagenet100", "custom", "ncl-custom"),
        ("simclr-cifar10-long", "cifar100", "simclr-cifar100-long"),
        ("bayesncl-fashion-mnist", "fashion-mnist", "bayesncl-fashion-mnist"),
        ("my-run", "stl10", "my-run-stl10"),
        # the plugin's longer names are one token, not a shorter name plus a suffix
        ("bayesncl-fashion-mnist-scenes", "fashion-mnist-scenes", "bayesncl-fashion-mnist-scenes"),
        ("bayesncl-fashion-mnist", "fashion-mnist-scenes", "bayesncl-fashion-mnist-scenes"),
        ("bayesncl-fashion-mnist-scenes", "cifar10", "bayesncl-cifar10"),
        ("ncl-fmnist-long", "fashion-mnist", "ncl-fashion-mnist-long"),
    ],
)
def test_run_name_says_the_dataset(name, dataset, expected):
    assert dataset_run_name(name, dataset) == expected


def test_a_resolved_config_names_the_plugin_dataset_solo_learn_sees_as_custom():
    resolved = OmegaConf.create(
        {"data": {"dataset": "custom", "offline_dataset": "fashion-mnist-scenes"}}
    )
    assert dataset_spec(resolved).name == "fashion-mnist-scenes"
    assert dataset_spec(OmegaConf.create({"data": {"dataset": "cifar100"}})).name == "cifar100"


def test_every_alias_means_a_plugin_dataset_and_no_name_is_both():
    assert {canonical_name(a) for a in ALIASES} <= set(OFFLINE_DATASETS)
    assert canonical_name("FMNIST") == "fashion-mnist" and canonical_name("cifar10") == "cifar10"
    assert not set(SOLO_DATASETS) & set(OFFLINE_DATASETS)


def test_one_decoder_reads_the_dataset_of_a_config_or_a_checkpoints_plain_config():

    spec = dataset_spec(
        OmegaConf.create(
            {
                "data": {"dataset": "fashion_mnist_scenes", "num_backgrounds": 6, "fraction": 0.5},
                "augmentations": [{"crop_size": 32, "mean": [0.5], "std": [0.25]}],
            }
        )
    )
    assert (spec.name, spec.loader, spec.is_offline, spec.classes) == (
        "fashion-mnist-scenes",
        "fashion_mnist_scenes",
        True,
        10,
    )
    assert (spec.num_backgrounds, spec.fraction, spec.val_fraction) == (6, 0.5, -1.0)
    assert (spec.crop_size, spec.mean, spec.std) == (32, (0.5,), (0.25,))
    plain = {"data": {"dataset": "custom", "val_path": "/x", "augmentations": {"crop_size": 64}}}
    spec = dataset_spec(plain)  # a linear config's data.augmentations, as a plain mapping
    assert (spec.name, spec.label, spec.crop_size, spec.mean) == ("custom", "custom (/x)", 64, None)
    with pytest.raises(AttributeError):
        spec.name = "cifar10"  # frozen
