"""Each rule of the settings computed in one place and each default written once: the job's
process count, the small-image stem, the decoding of the dataset and its defaults."""

from __future__ import annotations

import ast
import dataclasses

import pytest
from helpers import REPO
from omegaconf import OmegaConf

from solo_bayesncl.data import names, resolve


def _string_uses(text: str) -> list[str]:
    """The functions (by name) of the package whose code holds the string constant ``text``."""
    found = []
    for path in sorted((REPO / "solo_bayesncl").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for func in ast.walk(tree):
            if isinstance(func, ast.FunctionDef):
                for node in ast.walk(func):
                    if isinstance(node, ast.Constant) and node.value == text:
                        found.append(f"{path.relative_to(REPO).as_posix()}:{func.name}")
    return found


def test_the_job_process_count_is_computed_in_one_function():
    from solo_bayesncl.config.runtime import job_processes

    assert _string_uses("num_nodes") == ["solo_bayesncl/config/runtime.py:job_processes"]
    cfg = OmegaConf.create({"devices": [0, 1], "num_nodes": 3})
    assert job_processes(cfg) == 6
    assert job_processes(OmegaConf.create({"devices": "1"})) == 1


def _cifar(tmp_path, **backbone):
    return OmegaConf.create(
        {
            "data": {"dataset": "cifar10", "train_path": str(tmp_path)},
            "backbone": {"name": "resnet18", **backbone},
        }
    )


def test_resolution_leaves_the_small_stem_to_the_one_rule(tmp_path):
    """The resolution writes no ``backbone.small_stem``: the spec's rule
    (:func:`~solo_bayesncl.data.names.small_stem`) decides it, from what the user gave."""
    from solo_bayesncl.config.settings import run_spec

    cfg = _cifar(tmp_path)
    resolve.resolve_dataset_cfg(cfg)
    assert OmegaConf.select(cfg, "backbone.small_stem", default=None) is None
    assert run_spec(cfg).method.small_stem is True
    other = OmegaConf.create(
        {"data": {"dataset": "stl10"}, "backbone": {"name": "resnet18", "small_stem": True}}
    )
    assert run_spec(other).method.small_stem is True
    assert run_spec(OmegaConf.create({"data": {"dataset": "stl10"}})).method.small_stem is False


@pytest.mark.parametrize("dataset", ["cifar10", "fashion-mnist"])
def test_the_dataset_is_decoded_once_while_resolving(dataset, tmp_path, monkeypatch):
    if dataset == "fashion-mnist":
        pytest.importorskip("solo_bayesncl.data.fashion_mnist").fashion_mnist_root()
    calls = []

    def counted(cfg):
        calls.append(1)
        return names.dataset_spec(cfg)

    monkeypatch.setattr(resolve, "dataset_spec", counted)
    cfg = OmegaConf.create({"data": {"dataset": dataset, "train_path": str(tmp_path)}})
    spec = resolve.resolve_dataset_cfg(cfg)
    assert len(calls) == 1
    assert spec.name == dataset


def test_the_dataset_defaults_are_the_dataclass_fields(monkeypatch):
    """Every default of :class:`DatasetSpec` is its field's: changed there, the decoder follows."""

    @dataclasses.dataclass(frozen=True)
    class Other(names.DatasetSpec):
        format: str = "dali"
        num_workers: int = 7
        fraction: float = 0.5
        crop_size: int = 99
        augment_on: str = "batch"
        dali_device: str = "gpu"

    monkeypatch.setattr(names, "DatasetSpec", Other)
    spec = names.dataset_spec(OmegaConf.create({"data": {"dataset": "cifar10"}}))
    assert (spec.format, spec.num_workers, spec.fraction) == ("dali", 7, 0.5)
    assert (spec.crop_size, spec.augment_on, spec.dali_device) == (99, "batch", "gpu")
    given = names.dataset_spec({"data": {"dataset": "cifar10", "num_workers": 0}})
    assert given.num_workers == 0
