"""CIFAR that cannot be downloaded: the error states the folder layout the CIFAR configs read, and
the check leaves behind no empty folder it created (issue 25, part 6).

The network is cut at ``urllib.request.urlopen``, which torchvision's download calls, so the real
torchvision code runs up to the request (creating the root folder first, as it does offline).
"""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from omegaconf import OmegaConf

from solo_bayesncl.data.names import dataset_spec
from solo_bayesncl.data.resolve import DatasetUnavailableError, check_dataset_available

LAYOUT = {
    "cifar10": (
        "cifar-10-batches-py",
        "data_batch_1, data_batch_2, data_batch_3, data_batch_4, data_batch_5, test_batch, "
        "batches.meta",
        "cifar-10-python.tar.gz",
    ),
    "cifar100": ("cifar-100-python", "train, test, meta", "cifar-100-python.tar.gz"),
}


@pytest.fixture
def offline(monkeypatch):
    """Every URL torchvision opens fails as it does without a network; counts the attempts."""
    calls = []

    def unreachable(*args, **kwargs):
        calls.append(args)
        raise urllib.error.URLError("[Errno 101] Network is unreachable")

    monkeypatch.setattr(urllib.request, "urlopen", unreachable)
    return calls


def _cfg(dataset: str, train_path: str, val_path: str | None = None):
    data = {"dataset": dataset, "train_path": train_path}
    if val_path is not None:
        data["val_path"] = val_path
    return dataset_spec(OmegaConf.create({"data": data}))


@pytest.mark.parametrize("dataset", ["cifar10", "cifar100"])
def test_the_default_datasets_folder_is_not_left_behind(dataset, offline, tmp_path, monkeypatch):
    """The shipped CIFAR configs read ``./datasets``: a failed check removes the folder it made
    and says what torchvision looks for in it."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DatasetUnavailableError) as info:
        check_dataset_available(_cfg(dataset, "./datasets", "./datasets"))
    assert offline, "the download was not attempted"
    message = str(info.value)
    folder, files, archive = LAYOUT[dataset]
    assert message.startswith(
        f"{dataset.upper()} is not in data.train_path='./datasets' and could not be downloaded "
        "(URLError: <urlopen error [Errno 101] Network is unreachable>)."
    )
    assert f"torchvision reads it from datasets/{folder}/ holding {files} " in message
    assert f"https://www.cs.toronto.edu/~kriz/{archive} unpacks into" in message
    assert message.endswith("or train offline with data.dataset=fashion-mnist.")
    assert "\n" not in message
    assert list(tmp_path.iterdir()) == []  # no empty ./datasets/


def test_only_the_empty_folders_the_check_created_are_removed(offline, tmp_path):
    made_by_user = tmp_path / "mine"
    made_by_user.mkdir()  # empty, but the user's: kept
    with pytest.raises(DatasetUnavailableError, match=r"data\.train_path="):
        check_dataset_available(_cfg("cifar10", str(made_by_user)))
    assert made_by_user.is_dir()

    nested = tmp_path / "new" / "deeper" / "cifar"  # three folders the check creates
    with pytest.raises(DatasetUnavailableError):
        check_dataset_available(_cfg("cifar10", str(nested)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def test_a_failing_validation_folder_is_named_and_removed(offline, tmp_path):
    """Evaluation reads only the test split, from ``data.val_path``: that is the key named."""
    train, val = tmp_path / "train", tmp_path / "val"
    train.mkdir()
    with pytest.raises(DatasetUnavailableError) as info:
        check_dataset_available(_cfg("cifar100", str(train), str(val)), train=False)
    assert str(info.value).startswith(f"CIFAR100 is not in data.val_path={str(val)!r}")
    assert f"reads it from {val}/cifar-100-python/ holding train, test, meta" in str(info.value)
    assert not val.exists() and train.is_dir()
