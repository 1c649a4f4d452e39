"""The heads: the projector and the gating head, plain PyTorch, with the official state names."""

from __future__ import annotations

import torch
from torch import nn

from solo_bayesncl.core.gates import GatingHead
from solo_bayesncl.methods.heads import projector


def test_projector_is_linear_relu_linear():
    torch.manual_seed(0)
    head = projector(8, 16, 4)
    x = torch.randn(5, 8)
    expected = head[2](torch.relu(head[0](x)))
    assert torch.equal(head(x), expected)
    assert [type(m) for m in head] == [nn.Linear, nn.ReLU, nn.Linear]


def test_gating_head_is_the_projector_mlp_on_detached_features():
    torch.manual_seed(0)
    head = GatingHead(8, 16, 4)
    reference = projector(8, 16, 4)
    reference.load_state_dict(head.state_dict())  # same names: 0.weight, 0.bias, 2.weight, 2.bias
    feats = torch.randn(5, 8, requires_grad=True)
    logits = head(feats)
    assert torch.equal(logits, reference(feats.detach()))
    logits.sum().backward()
    assert feats.grad is None  # sg(h): no gradient reaches the backbone
    assert all(p.grad is not None for p in head.parameters())


def test_heads_keep_the_official_state_names():
    model = nn.Module()
    model.projector = projector(8, 16, 4)
    model.gating_head = GatingHead(8, 16, 4)
    assert sorted(model.state_dict()) == sorted(
        f"{head}.{i}.{p}"
        for head in ("projector", "gating_head")
        for i in (0, 2)
        for p in ("weight", "bias")
    )
