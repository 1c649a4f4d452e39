"""``data.augment_on``: which pretraining data pipeline a config gets, the in-memory dataset and
loader of the batched path, and a real training run through it."""

from __future__ import annotations

import pytest
import torch
from helpers import compose
from omegaconf import OmegaConf
from torch.utils.data import DataLoader, Subset

from solo_bayesncl.data.fashion_mnist import fashion_mnist_root
from solo_bayesncl.data.names import dataset_spec
from solo_bayesncl.data.pipelines import InMemoryImages, collate_batch
from solo_bayesncl.data.resolve import resolve_augment_on as _resolve

AUG = OmegaConf.to_container(
    compose("scripts/pretrain/cifar", "bayesncl.yaml").augmentations, resolve=True
)


def resolve_augment_on(cfg):
    return _resolve(cfg, dataset_spec(cfg))


def _cfg(dataset: str, augment_on: str | None = None, fmt: str = "image_folder", **changes):
    """A resolved-looking config; ``changes`` set keys of the first augmentation pipeline."""
    data = {"dataset": dataset, "format": fmt}
    if dataset.startswith("fashion-mnist"):
        data.update(dataset="custom", offline_dataset=dataset)
    if augment_on is not None:
        data["augment_on"] = augment_on
    cfg = OmegaConf.create({"data": data, "augmentations": AUG})
    for key, value in changes.items():
        OmegaConf.update(cfg.augmentations[0], key.replace("__", "."), value)
    return cfg


@pytest.mark.parametrize(
    ("dataset", "fmt", "expected"),
    [
        ("fashion-mnist", "image_folder", "batch"),
        ("fashion-mnist-scenes", "image_folder", "batch"),
        ("cifar10", "image_folder", "batch"),
        ("cifar100", "image_folder", "batch"),
        ("imagenet100", "dali", "per_image"),
        ("imagenet100", "image_folder", "per_image"),
        ("custom", "image_folder", "per_image"),
    ],
)
def test_default_is_batch_only_for_in_memory_datasets(dataset, fmt, expected):
    assert resolve_augment_on(_cfg(dataset, fmt=fmt)).data.augment_on == expected


def test_default_falls_back_where_equivalence_is_not_shown():
    assert (
        resolve_augment_on(_cfg("cifar10", equalization__prob=0.2)).data.augment_on == "per_image"
    )
    assert resolve_augment_on(_cfg("cifar10", crop_size=16)).data.augment_on == "per_image"


def test_explicit_choice_is_kept_or_refused_with_the_reason():
    assert resolve_augment_on(_cfg("cifar10", "per_image")).data.augment_on == "per_image"
    with pytest.raises(
        ValueError,
        match=r"data.augment_on='gpu' is not supported; allowed values: batch, per_image",
    ):
        resolve_augment_on(_cfg("cifar10", "gpu"))
    with pytest.raises(
        ValueError, match=r"data.augment_on=batch is not available: data.dataset=imagenet100"
    ):
        resolve_augment_on(_cfg("imagenet100", "batch"))
    with pytest.raises(ValueError, match=r"augmentations\[0\]: equalization.prob > 0"):
        resolve_augment_on(_cfg("cifar100", "batch", equalization__prob=0.2))


def _pretraining_pipeline(config_dir: str, method: str, overrides: list[str]) -> str:
    from solo_bayesncl.training.pretrain import prepare_pretrain

    cfg = compose(config_dir, f"{method}.yaml", [*overrides, "accelerator=cpu"])
    return prepare_pretrain(cfg, check_data=False).data.augment_on


@pytest.mark.solo
@pytest.mark.parametrize("method", ["simclr", "mocov2plus", "ncl", "bayesncl"])
@pytest.mark.parametrize(
    ("config_dir", "dataset"),
    [
        ("scripts/pretrain/cifar", "cifar100"),
        ("scripts/pretrain/cifar", "cifar10"),
        ("scripts/pretrain/cifar", "fashion-mnist"),
        ("scripts/pretrain/imagenet-100", "imagenet100"),
    ],
)
def test_shipped_paper_configs_augment_per_image(config_dir, dataset, method):
    """The paper's configs run solo-learn's per-image pipeline, as the official code does."""
    assert _pretraining_pipeline(config_dir, method, [f"data.dataset={dataset}"]) == "per_image"


@pytest.mark.solo
def test_per_image_views_normalize_with_tuples_not_the_configs_lists():
    """torch probes a ListConfig through Python code at every image, where a Ctrl-C is lost."""
    from solo.data.pretrain_dataloader import build_transform_pipeline
    from torchvision.transforms import Normalize

    from solo_bayesncl.data.pipelines import augmentations, per_image_transform
    from solo_bayesncl.training.pretrain import prepare_pretrain

    overrides = ["data.dataset=fashion-mnist", "data.augment_on=per_image", "accelerator=cpu"]
    cfg = compose("scripts/pretrain/cifar", "bayesncl.yaml", overrides)
    spec = prepare_pretrain(cfg, check_data=False)
    solo_steps = build_transform_pipeline(spec.data.loader, augmentations(spec.solo)[0]).transforms
    (solo_normalize,) = (s for s in solo_steps if isinstance(s, Normalize))
    assert type(solo_normalize.std).__name__ == "ListConfig"  # what would reach torch per image

    views = per_image_transform(spec.data, spec.solo)
    steps = [s for view in views.transforms for s in view.transform.transforms]
    normalizes = [s for s in steps if isinstance(s, Normalize)]
    assert len(normalizes) == len(views.transforms) > 0
    for step in normalizes:
        assert type(step.mean) is tuple and type(step.std) is tuple
        assert step.mean == tuple(solo_normalize.mean) and step.std == tuple(solo_normalize.std)


@pytest.mark.solo
def test_cpu_preset_chooses_the_batched_pipeline():
    from solo_bayesncl.benchmark.presets import load_preset

    preset = load_preset("cpu")
    for method in preset.methods:
        pipeline = _pretraining_pipeline(
            str(preset.config_dir), preset.base_method(method), preset.run_overrides(method)
        )
        assert pipeline == "batch", method


def test_in_memory_loader_serves_whole_batches_through_a_subset():
    images = torch.arange(40 * 3 * 4 * 4, dtype=torch.int64).remainder(256).byte().view(40, 3, 4, 4)
    dataset = Subset(InMemoryImages(images, torch.arange(40) % 7), list(range(5, 40, 2)))
    loader = DataLoader(
        dataset, batch_size=6, shuffle=True, drop_last=True, collate_fn=collate_batch
    )
    seen = []
    for indexes, batch, targets in loader:
        assert batch.dtype == torch.uint8 and batch.shape == (6, 3, 4, 4)
        assert torch.equal(batch, images[indexes]) and torch.equal(targets, indexes % 7)
        seen.extend(indexes.tolist())
    assert len(seen) == 18 and set(seen) <= set(range(5, 40, 2))
    with pytest.raises(ValueError, match="images must be uint8"):
        InMemoryImages(images.float(), torch.arange(40))


@pytest.mark.solo
@pytest.mark.slow
def test_fashion_mnist_pretraining_runs_through_the_batched_path(tmp_path):
    """A real (tiny) training run with ``data.augment_on=batch``: the method's training step
    receives float views at the crop size made on the training device from uint8 batches."""
    if not (fashion_mnist_root() / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip("Debian's dataset-fashion-mnist is not installed")
    import lightning.pytorch as pl

    from solo_bayesncl.training.pretrain import pretrain

    class Spy(pl.Callback):
        batches: list = []

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            Spy.batches.append([tuple(v.shape) for v in batch[1]] + [batch[1][0].dtype])

    overrides = [
        "data.dataset=fashion-mnist",
        "data.fraction=0.002",
        "data.val_fraction=0.005",
        "data.augment_on=batch",
        "data.num_workers=0",
        "optimizer.batch_size=16",
        "method_kwargs.proj_hidden_dim=32",
        "method_kwargs.proj_output_dim=16",
        "max_epochs=1",
        f"checkpoint.dir={tmp_path}",
        "auto_resume.enabled=False",
        "accelerator=cpu",
        "devices=1",
        "wandb.enabled=False",
    ]
    cfg = compose("scripts/pretrain/cifar", "bayesncl.yaml", overrides)
    trainer = pretrain(cfg, extra_callbacks=[Spy()])
    assert type(trainer.datamodule).__name__ == "InMemoryPretrainDataModule"
    assert len(Spy.batches) == 120 // 16
    assert all(b == [(16, 3, 32, 32), (16, 3, 32, 32), torch.float32] for b in Spy.batches)
    assert list(tmp_path.glob("bayesncl/*/*.ckpt"))


def test_scenes_in_memory_are_the_composited_images():
    """The batched path serves fashion-mnist-scenes' composited pixels (not the plain items),
    with the same stratified subset as the per-image path."""
    if not (fashion_mnist_root() / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip("Debian's dataset-fashion-mnist is not installed")
    from solo_bayesncl.data.pipelines import load_in_memory
    from solo_bayesncl.data.scenes import FashionMNISTScenes

    cfg = _cfg("fashion-mnist-scenes")
    cfg.data.update(
        num_backgrounds=5, background_seed=2, fraction=0.01, train_path=str(fashion_mnist_root())
    )
    subset = load_in_memory(dataset_spec(cfg))
    scenes = FashionMNISTScenes("train", num_backgrounds=5, seed=2)
    picks = subset.indices[:50]
    images = torch.stack([subset[i][1] for i in range(50)])
    assert torch.equal(images[:, 0], torch.from_numpy(scenes.images[picks]))


@pytest.mark.solo
def test_datamodule_augments_training_batches_only():
    from types import SimpleNamespace

    from solo_bayesncl.data.pipelines import batch_datamodule

    if not (fashion_mnist_root() / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip("Debian's dataset-fashion-mnist is not installed")
    cfg = _cfg("fashion-mnist", "batch")
    cfg.data.update(train_path=str(fashion_mnist_root()), fraction=0.01, num_workers=0)
    cfg.optimizer = {"batch_size": 8}
    dm = batch_datamodule(dataset_spec(cfg), cfg, 0, 8)
    batch = next(iter(dm.train_dataloader()))
    assert batch[1].dtype == torch.uint8 and batch[1].shape == (8, 1, 28, 28)
    dm.trainer = SimpleNamespace(training=False, world_size=1, global_rank=0)
    assert dm.on_after_batch_transfer(batch, 0) is batch  # validation: left alone
    dm.trainer.training = True
    indexes, views, targets = dm.on_after_batch_transfer(batch, 0)
    assert [tuple(v.shape) for v in views] == [(8, 3, 32, 32)] * 2
    assert indexes is batch[0] and targets is batch[2]
    # the ranks' own random streams: tests/integration/test_ddp.py, test_each_rank_gets_random_streams_of_its_own


@pytest.mark.solo
def test_datamodule_splits_the_epoch_once_the_processes_are_known():
    """Counting an epoch's batches before the Trainer exists (the logging interval is set from
    it) must not fix a one-process sampler: each of two processes then trained the whole epoch,
    twice the steps of one process."""
    from types import SimpleNamespace

    from solo_bayesncl.data.pipelines import batch_datamodule

    if not (fashion_mnist_root() / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip("Debian's dataset-fashion-mnist is not installed")
    cfg = _cfg("fashion-mnist", "batch")
    cfg.data.update(train_path=str(fashion_mnist_root()), fraction=0.01, num_workers=0)
    cfg.optimizer = {"batch_size": 8}
    shares = []
    for rank in (0, 1):
        dm = batch_datamodule(dataset_spec(cfg), cfg, 0, 8)
        whole = len(dm.train_dataloader())  # no Trainer yet: one process's view of the epoch
        dm.trainer = SimpleNamespace(training=True, world_size=2, global_rank=rank)
        loader = dm.train_dataloader()
        assert len(loader) == whole // 2
        shares.append(set(loader.sampler))
    assert not shares[0] & shares[1]
    assert len(shares[0]) + len(shares[1]) == 2 * (len(loader.sampler.dataset) // 2)
