"""The one feature-extraction pass (no solo-learn needed): what it reads, in which mode."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from solo_bayesncl.core.representations import extract_representations


class Toy(nn.Module):
    """SimCLR-shaped outputs: backbone ``feats`` (through BatchNorm) and projection ``z``."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.bn = nn.BatchNorm1d(4)
        self.bn.running_mean.fill_(3.0)
        self.proj = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        feats = self.bn(x)
        return {"feats": feats, "z": self.proj(feats)}


def _loader():
    torch.manual_seed(1)
    x = torch.randn(10, 4)
    y = torch.arange(10) % 3
    return [(x[:6], y[:6]), (x[6:], y[6:])], x, y


def test_representation_backbone_and_labels_in_one_pass():
    model, (loader, x, y) = Toy(), _loader()
    model.train()
    batches = list(extract_representations(model, loader, with_backbone=True, keep_images=True))
    assert model.training  # mode restored
    model.eval()
    with torch.no_grad():
        feats = torch.cat([model(xb)["feats"] for xb, _ in loader])
        z = torch.cat([model(xb)["z"] for xb, _ in loader])
    got = torch.cat([b.features for b in batches])
    torch.testing.assert_close(got, F.normalize(z, dim=-1))
    torch.testing.assert_close(torch.cat([b.backbone_features for b in batches]), feats)
    assert torch.equal(torch.cat([b.labels for b in batches]), y)
    assert torch.equal(torch.cat([b.images for b in batches]), x)
    assert all(b.soft_features is None and b.gate_open is None for b in batches)
    only_backbone = list(extract_representations(model, loader, feature="backbone"))
    torch.testing.assert_close(torch.cat([b.features for b in only_backbone]), feats)


def test_train_mode_uses_batch_statistics_and_a_custom_representation():
    model, (loader, _, _) = Toy(), _loader()
    model.eval()

    def doubled(m, out):
        return 2 * out["feats"]

    batches = list(extract_representations(model, loader, represent=doubled, train_mode=True))
    assert not model.training
    expected = torch.cat([2 * F.batch_norm(xb, None, None, training=True) for xb, _ in loader])
    torch.testing.assert_close(torch.cat([b.features for b in batches]), expected)


def test_unknown_feature_is_named():
    with pytest.raises(ValueError, match="feature='logits' is not supported"):
        list(extract_representations(Toy(), _loader()[0], feature="logits"))
