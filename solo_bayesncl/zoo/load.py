"""Load zoo weights as a ready solo-learn method or as a bare backbone.

The model is built by :func:`solo_bayesncl.io.checkpoints.load_method` /
:func:`~solo_bayesncl.io.checkpoints.load_backbone` from the artifact's config, exactly like a
checkpoint of the same run.
"""

from __future__ import annotations

import os
from typing import Any, Literal

import torch

from solo_bayesncl.io.checkpoints import load_backbone, load_checkpoint, load_method

from .fetch import DEFAULT_TIMEOUT, download
from .hub import HUB_WEIGHTS
from .manifest import ZooEntry

LoadAs = Literal["method", "backbone"]
_LOAD_AS = ("method", "backbone")


def load_artifact(
    path: str | os.PathLike[str],
    device: str | torch.device = "cpu",
    as_: LoadAs = "method",
) -> torch.nn.Module:
    """Build the model stored in a local zoo artifact, a Hub folder or a checkpoint, in eval mode
    on ``device``: ``as_="method"`` the solo-learn LightningModule (weights loaded strictly),
    ``as_="backbone"`` the bare backbone (no fc), with the stem the config implies."""
    if as_ not in _LOAD_AS:
        raise ValueError(f"as_ must be one of {_LOAD_AS}, got {as_!r}")
    if os.path.isdir(path) and os.path.isfile(os.path.join(path, HUB_WEIGHTS)):
        path = os.path.join(path, HUB_WEIGHTS)
    loaded = load_checkpoint(path)  # reads zoo artifacts through .artifact.read_artifact
    build = load_method if as_ == "method" else load_backbone
    return build(loaded, device=device)


def load_model(
    name: str | ZooEntry,
    device: str | torch.device = "cpu",
    as_: LoadAs = "method",
    cache: str | os.PathLike[str] | None = None,
    progress: bool = True,
    timeout: float = DEFAULT_TIMEOUT,
    hub_cache: str | os.PathLike[str] | None = None,
) -> Any:
    """Download (or take from a cache) the zoo entry ``name`` and build it; its sources may be
    on the Hugging Face Hub (``hf://``) or plain URLs (see :func:`~.fetch.download`).

    Example::

        from solo_bayesncl.zoo import load_model
        backbone = load_model("bayesncl-resnet18-cifar100", device="cuda", as_="backbone")
        feats = backbone(images)  # (B, 512)
    """
    path = download(name, cache=cache, progress=progress, timeout=timeout, hub_cache=hub_cache)
    return load_artifact(path, device=device, as_=as_)
