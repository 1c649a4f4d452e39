"""Which normalisation the backbone receives, command by command and dataset by dataset.

The data are fakes in the on-disk layouts the real loaders read (torchvision's pickled CIFAR
batches, Fashion-MNIST's IDX files) holding one constant grey image: every crop, resize, flip and
blur keeps it constant (colour jitter is switched off in pretraining), so the tensor the backbone
receives is ``(grey - mean) / std`` per channel and says which ``mean``/``std`` was applied. A
forward pre-hook on the backbone captures that tensor in the real entry code paths: pretraining
(its views, its online validation and the interpretability callback), the linear probe (training
and validation), kNN and the evaluation report.

Standard protocol: one normalisation everywhere, the pretraining views' own (CIFAR-100's for
CIFAR-100: solo-learn's table). Official probe and paper protocols: the official code's
(solo-learn's classification transforms: CIFAR-10's for CIFAR-100 as well).
"""

from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("solo", reason="needs upstream solo-learn installed")
pytest.importorskip("matplotlib", reason="the report pictures need matplotlib")

from helpers import compose  # noqa: E402
from lightning.pytorch import Callback  # noqa: E402

GREY = 140
"""The value of every pixel of the fake datasets."""
STATS = {  # written out here, not read from the code under test
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    "fashion-mnist": ((0.2860, 0.2860, 0.2860), (0.3530, 0.3530, 0.3530)),
    # solo-learn's classification transforms (the official probe and evaluation), any CIFAR
    "official-cifar": ((0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261)),
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    "custom": ((0.3, 0.4, 0.5), (0.2, 0.25, 0.3)),  # an image folder's own, in its config
}
DATASETS = ("cifar100", "cifar10", "fashion-mnist")
N_TRAIN, N_VAL = 10, 12


def expected(stats: str) -> torch.Tensor:
    mean, std = (torch.tensor(v) for v in STATS[stats])
    return (GREY / 255 - mean) / std


def fed(inputs: list[torch.Tensor]) -> set[tuple[float, ...]]:
    """The distinct per-channel values of the captured inputs (each must be constant)."""
    values = set()
    for x in inputs:
        lo, hi = x.amin(dim=(0, 2, 3)), x.amax(dim=(0, 2, 3))
        assert torch.allclose(lo, hi, atol=1e-4), "the fake image did not stay constant"
        values.add(tuple(round(float(v), 4) for v in lo))
    return values


def assert_fed(inputs: list[torch.Tensor], stats: str) -> None:
    assert inputs, "the backbone received nothing"
    want = tuple(round(float(v), 4) for v in expected(stats))
    names = {tuple(round(float(v), 4) for v in expected(s)): s for s in STATS}
    got = fed(inputs)
    assert got == {want}, f"fed {[names.get(g, g) for g in got]}, expected {stats}"


def capture(module: torch.nn.Module, into: list) -> None:
    module.register_forward_pre_hook(lambda _m, args: into.append(args[0].detach().float()))


def _grey(n: int, shape: tuple[int, ...]) -> np.ndarray:
    return np.full((n, *shape), GREY, dtype=np.uint8)


def write_fake_cifar(root: Path) -> None:
    """CIFAR-10 and CIFAR-100 as torchvision stores them, ``N_TRAIN``/``N_VAL`` grey images."""

    def dump(obj, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(pickle.dumps(obj))

    ten = root / "cifar-10-batches-py"
    per_batch = N_TRAIN // 5
    for i in range(1, 6):
        labels = [(j + i) % 10 for j in range(per_batch)]
        dump({"data": _grey(per_batch, (3072,)), "labels": labels}, ten / f"data_batch_{i}")
    dump(
        {"data": _grey(N_VAL, (3072,)), "labels": [j % 10 for j in range(N_VAL)]},
        ten / "test_batch",
    )
    dump({"label_names": [f"class{i}" for i in range(10)]}, ten / "batches.meta")
    hundred = root / "cifar-100-python"
    for split, n in (("train", N_TRAIN), ("test", N_VAL)):
        dump({"data": _grey(n, (3072,)), "fine_labels": [j % 5 for j in range(n)]}, hundred / split)
    dump({"fine_label_names": [f"class{i}" for i in range(100)]}, hundred / "meta")


def write_fake_fashion_mnist(root: Path) -> None:
    """The four gzipped IDX files of Fashion-MNIST, grey images."""
    root.mkdir(parents=True, exist_ok=True)
    for prefix, n in (("train", N_TRAIN), ("t10k", N_VAL)):
        images = struct.pack(">IIII", 0x803, n, 28, 28) + _grey(n, (28, 28)).tobytes()
        labels = struct.pack(">II", 0x801, n) + bytes(j % 10 for j in range(n))
        (root / f"{prefix}-images-idx3-ubyte.gz").write_bytes(gzip.compress(images))
        (root / f"{prefix}-labels-idx1-ubyte.gz").write_bytes(gzip.compress(labels))


@pytest.fixture(scope="module")
def fake_data(tmp_path_factory):
    """The fake datasets, torchvision's checksums (which a fake cannot match) switched off."""
    import torchvision.datasets.cifar as cifar

    root = tmp_path_factory.mktemp("fake_data")
    write_fake_cifar(root / "cifar")
    write_fake_fashion_mnist(root / "fashion-mnist")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cifar.CIFAR10, "_check_integrity", lambda self: True)
        patch.setattr(cifar, "check_integrity", lambda *args, **kwargs: True)
        patch.setenv("SOLO_BAYESNCL_FASHION_MNIST", str(root / "fashion-mnist"))
        yield root


def pretrain_cfg(fake_data: Path, dataset: str, out: Path, *extra: str):
    from solo_bayesncl.training.pretrain import prepare_pretrain

    cfg = compose(
        "scripts/pretrain/cifar",
        "bayesncl.yaml",
        [
            f"data.dataset={dataset}",
            f"data.train_path={fake_data / 'cifar'}",
            f"data.val_path={fake_data / 'cifar'}",
            "data.num_workers=0",
            "optimizer.batch_size=4",
            "method_kwargs.proj_hidden_dim=32",
            "method_kwargs.proj_output_dim=16",
            "max_epochs=1",
            f"checkpoint.dir={out}",
            "auto_resume.enabled=False",
            "accelerator=cpu",
            "devices=1",
            "++interpretability.enabled=True",
            *extra,
        ],
    )
    for aug in cfg.augmentations:  # brightness would change the grey value
        aug.color_jitter.prob = 0.0
    return prepare_pretrain(cfg).solo


@pytest.fixture(scope="module")
def pretrained(fake_data, tmp_path_factory):
    """``{dataset: (checkpoint, inputs the backbone received during pretraining)}``: one
    epoch of BayesNCL on each fake dataset, interpretability callback on."""
    from solo_bayesncl.training.pretrain import pretrain

    runs = {}
    for dataset in DATASETS:
        out = tmp_path_factory.mktemp(f"pretrain_{dataset}")
        probe = PhaseCapture()
        trainer = pretrain(pretrain_cfg(fake_data, dataset, out), extra_callbacks=[probe])
        assert "interp/semantic_consistency" in trainer.callback_metrics  # the callback ran
        (ckpt,) = sorted(out.rglob("*.ckpt"))[-1:]
        runs[dataset] = (ckpt, probe.inputs["train"] + probe.inputs["val"])
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("dataset", DATASETS)
def test_pretraining_views_validation_and_callback_get_the_views_stats(pretrained, dataset):
    """The views (batched path), solo-learn's online validation and the interpretability
    callback: CIFAR-100's statistics on CIFAR-100 (the callback got CIFAR-10's before)."""
    _, inputs = pretrained[dataset]
    assert_fed(inputs, dataset)


@pytest.mark.parametrize("dataset", DATASETS)
@pytest.mark.parametrize("augment_on", ["per_image", "batch"])
def test_pretraining_view_pipelines_use_solo_learns_table(fake_data, tmp_path, dataset, augment_on):
    from solo_bayesncl.config.settings import run_spec
    from solo_bayesncl.data.pipelines import pretrain_fit_data

    cfg = pretrain_cfg(fake_data, dataset, tmp_path, f"++data.augment_on={augment_on}")
    spec = run_spec(cfg)
    module = pretrain_fit_data(  # both paths: a data module
        spec.data, cfg, spec.trainer.seed or 0, spec.optimizer.batch_size, None
    )["datamodule"]
    batch = next(iter(module.train_dataloader()))
    views = module.on_after_batch_transfer(batch, 0)[1]  # the per-image path's: the batch itself
    assert len(views) == 2
    assert_fed(list(views), dataset)


def linear_cfg(ckpt: Path, out: Path, *extra: str):
    return compose(
        "scripts/linear/cifar",
        "linear.yaml",
        [
            f"pretrained_feature_extractor='{ckpt}'",
            "max_epochs=1",
            "optimizer.batch_size=4",
            "data.num_workers=0",
            f"checkpoint.dir={out}",
            "accelerator=cpu",
            "devices=1",
            *extra,
        ],
    )


class PhaseCapture(Callback):
    """Records the backbone's inputs by phase: fitting (``train``) or validating (``val``)."""

    def __init__(self) -> None:
        self.inputs: dict[str, list[torch.Tensor]] = {"train": [], "val": []}

    def on_fit_start(self, trainer, pl_module) -> None:
        def hook(_module, args):
            phase = "val" if trainer.validating or trainer.sanity_checking else "train"
            self.inputs[phase].append(args[0].detach().float())

        pl_module.backbone.register_forward_pre_hook(hook)


@pytest.mark.slow
@pytest.mark.parametrize("dataset", DATASETS)
@pytest.mark.parametrize("probe", ["standard", "official"])
def test_linear_probe_trains_and_validates_on_one_normalisation(
    pretrained, tmp_path, dataset, probe
):
    """Standard: the pretraining views' stats on both sides (CIFAR-100: it trained on
    ImageNet's and validated on CIFAR-10's before). Official: solo-learn's classification
    transforms on both sides, as the official probe (CIFAR-10's stats); refused where the
    official code has no transforms (Fashion-MNIST)."""
    from solo_bayesncl.training.linear import linear_eval, prepare_linear

    ckpt, _ = pretrained[dataset]
    cfg = linear_cfg(ckpt, tmp_path, f"probe={probe}")
    if probe == "official" and dataset == "fashion-mnist":
        with pytest.raises(ValueError, match=r"^probe=official: .*fashion-mnist.*probe=standard"):
            prepare_linear(cfg)
        return
    capture_cb = PhaseCapture()
    linear_eval(cfg, extra_callbacks=[capture_cb])
    want = dataset if probe == "standard" else "official-cifar"
    assert_fed(capture_cb.inputs["train"], want)
    assert_fed(capture_cb.inputs["val"], want)


def test_linear_probe_refuses_an_unknown_probe(tmp_path):
    from omegaconf import OmegaConf

    from solo_bayesncl.config.linear import check_probe

    cfg = OmegaConf.create({"probe": "offical", "data": {"dataset": "cifar100"}})
    with pytest.raises(
        ValueError, match=r"^probe='offical' is not supported; allowed values: standard, official$"
    ):
        check_probe(cfg)


def _capturing_load_method(monkeypatch, module, into: list) -> None:
    import solo_bayesncl.io.checkpoints as checkpoints

    real = checkpoints.load_method

    def load_method(*args, **kwargs):
        model = real(*args, **kwargs)
        capture(model.backbone, into)
        return model

    monkeypatch.setattr(module, "load_method", load_method)


@pytest.mark.slow
@pytest.mark.parametrize("dataset", DATASETS)
def test_knn_feeds_the_views_stats(pretrained, monkeypatch, dataset):
    """Both sides of kNN (ImageNet's stats on CIFAR before)."""
    import solo_bayesncl.evaluation.knn as knn
    from solo_bayesncl.evaluation.knn import knn_eval

    inputs: list[torch.Tensor] = []
    _capturing_load_method(monkeypatch, knn, inputs)
    results = knn_eval(pretrained[dataset][0], ks=(3,), num_workers=0, device="cpu")
    assert set(results) == {"knn_top1_k3", "knn_top5_k3"}
    assert_fed(inputs, dataset)


@pytest.mark.slow
@pytest.mark.parametrize("dataset", DATASETS)
@pytest.mark.parametrize("protocol", ["standard", "paper", "ncl-paper"])
def test_report_feeds_one_normalisation_per_protocol(
    pretrained, monkeypatch, tmp_path, dataset, protocol
):
    """Standard: the views' stats (ImageNet's on CIFAR before). Paper protocols: the validation
    pass gets solo-learn's classification transform as the official evaluations (CIFAR-10's
    stats on CIFAR); the paper protocol's training batch gets the pretraining views, as the
    official training step that logs it."""
    import solo_bayesncl.evaluation.report as report
    import solo_bayesncl.evaluation.report_data as report_data

    inputs: list[torch.Tensor] = []
    _capturing_load_method(monkeypatch, report_data, inputs)
    report.write_report(
        pretrained[dataset][0],
        tmp_path / "report",
        report.ReportOptions(
            batch_size=N_VAL, num_workers=0, device="cpu", top_dims=4, protocol=protocol
        ),
        progress=False,
    )
    standard, extra = inputs[:1], inputs[1:]  # the standard pass is one batch of N_VAL
    assert_fed(standard, dataset)
    if protocol == "standard":
        assert extra == []
        return
    official = "official-cifar" if dataset.startswith("cifar") else dataset
    val = [x for x in extra if len(x) == N_VAL]
    assert_fed(val, official)
    if protocol == "paper":  # the two views of the singular-value entropy's training batch
        views = [x for x in extra if len(x) != N_VAL]
        assert len(views) == 2 and all(len(x) == N_TRAIN for x in views)
        assert_fed(views, dataset)


def _grey_folder(root: Path, size: int) -> Path:
    """``root/{train,val}/class{0..5}/*.png``: grey RGB images of ``size`` px (six classes:
    solo-learn's probe reports top-5 accuracy)."""
    from PIL import Image

    for split, n in (("train", 3), ("val", 2)):
        for cls in range(6):
            folder = root / split / f"class{cls}"
            folder.mkdir(parents=True)
            for i in range(n):
                Image.fromarray(_grey(1, (size, size, 3))[0]).save(folder / f"{i}.png")
    return root


@pytest.mark.slow
def test_dali_pretraining_and_probe_feed_one_normalisation(tmp_path):
    """solo-learn's DALI pipelines (image folders): pretraining views with the config's own
    mean/std and the validation loader beside them; the DALI probe (ImageNet's mean/std, as
    solo-learn's DALI classification pipeline) and its torchvision validation loader."""
    from solo_bayesncl.data.dali import dali_available

    if not dali_available():
        pytest.skip('needs NVIDIA DALI: pip install "solo-bayesncl[dali]"')
    from helpers import tiny_pretrain_overrides, untrained_checkpoint

    from solo_bayesncl.training.linear import linear_eval
    from solo_bayesncl.training.pretrain import pretrain

    images = _grey_folder(tmp_path / "images", 32)
    cfg = compose(
        "scripts/pretrain/cifar",
        "bayesncl.yaml",
        tiny_pretrain_overrides(images, tmp_path / "pretrain")
        + ["data.format=dali", "++dali.device=cpu", "++interpretability.enabled=True"],
    )
    for aug in cfg.augmentations:
        aug.color_jitter.prob = 0.0
        aug.mean, aug.std = (list(v) for v in STATS["custom"])
    capture_cb = PhaseCapture()
    pretrain(cfg, extra_callbacks=[capture_cb])
    assert_fed(capture_cb.inputs["train"], "custom")  # the DALI views and the callback
    assert_fed(capture_cb.inputs["val"], "custom")
    # a checkpoint without mean/std: its views were normalised with ImageNet's
    ckpt = untrained_checkpoint(tmp_path / "untrained", "bayesncl.yaml", images, 32, 16)
    cfg = linear_cfg(
        ckpt,
        tmp_path / "linear",
        "data.format=dali",
        "++dali.device=cpu",
        "data.num_workers=1",
        "data.augmentations.crop_size=224",
        "optimizer.batch_size=8",
        "+limit_train_batches=1",
    )
    capture_cb = PhaseCapture()
    linear_eval(cfg, explicit=["data.augmentations.crop_size"], extra_callbacks=[capture_cb])
    assert_fed(capture_cb.inputs["train"], "imagenet")
    assert_fed(capture_cb.inputs["val"], "imagenet")
