"""The objectives as modules (``NCLLoss``, ``BayesNCLLoss``): each equals the functions it wraps,
term by term. (Their hyperparameters are checked where they are declared, by the settings of
``methods/keys.py``: tests/methods/test_settings.py.)"""

from __future__ import annotations

import pytest
import torch

from solo_bayesncl.core.gates import BernoulliGate, bernoulli_kl
from solo_bayesncl.core.losses import (
    BayesNCLLoss,
    NCLLoss,
    gated_representation,
    info_nce_loss,
    non_negative_representation,
)
from solo_bayesncl.methods.keys import BayesNCLSettings


def _bayes(**changes) -> BayesNCLLoss:
    """BayesNCL's loss at the declared defaults, with ``changes`` (config names)."""
    dims = {"proj_hidden_dim": 8, "proj_output_dim": 16}
    return BayesNCLSettings.from_kwargs({**dims, **changes}).objective()


def _views(n_images: int = 6, k: int = 16, seed: int = 3):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(2 * n_images, k, generator=g)
    logits = torch.randn(2 * n_images, k, generator=g) * 2
    return z, logits, torch.arange(n_images).repeat(2)


@pytest.mark.parametrize(("non_neg", "top_k"), [("rep_relu", None), ("exp", 4), ("relu", 8)])
def test_ncl_loss_is_info_nce_of_the_non_negative_representation(non_neg, top_k):
    z, _, indexes = _views()
    expected = info_nce_loss(non_negative_representation(z, non_neg, top_k), indexes, 0.3)
    criterion = NCLLoss(0.3, non_neg, top_k, 0.0)
    assert torch.allclose(criterion(z, indexes), expected)
    terms = criterion.terms(z, indexes)
    assert torch.equal(terms.representation, non_negative_representation(z, non_neg, top_k))


@pytest.mark.parametrize("gate_type", ["ste", "gumbel"])
def test_bayesncl_loss_is_info_nce_of_the_gated_representation_plus_lambda_kl(gate_type):
    z, logits, indexes = _views()
    criterion = _bayes(
        bayesian_prior_prob=0.3,
        bayesian_kl_lambda=0.5,
        gate_type=gate_type,
        gate_threshold=0.4,
        kl_eps=0.02,
    ).eval()  # evaluation mode: the gate thresholds alpha itself, no noise
    gate = BernoulliGate(gate_type, 0.4, 1.0).eval()(logits)
    v = gated_representation(z, gate.mask, "rep_relu", None)
    nce = info_nce_loss(v, indexes, 0.2)
    kl = bernoulli_kl(gate.probs, 0.3, 0.02)
    terms = criterion.terms(z, logits, indexes)
    assert torch.allclose(terms.nce, nce) and torch.allclose(terms.logged["train_kl_loss"], kl)
    assert torch.allclose(criterion(z, logits, indexes), nce + 0.5 * kl)
    assert torch.allclose(terms.logged["train_gate_open_ratio"], (gate.mask > 0.5).float().mean())


def test_bayesncl_loss_without_kl_weight_is_the_gated_info_nce_and_trains_the_gate():
    z, logits, indexes = _views()
    logits.requires_grad_(True)
    for criterion in (_bayes(bayesian_kl_lambda=0.0), _bayes(use_kl=False)):
        loss = criterion(z, logits, indexes)
        assert torch.allclose(loss, criterion.terms(z, logits, indexes).nce)
    criterion = _bayes(bayesian_kl_lambda=0.5, use_kl=False)
    loss = criterion(z, logits, indexes)
    assert torch.allclose(loss, criterion.terms(z, logits, indexes).nce)
    loss.backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0  # straight-through


def test_dimension_dropout_compares_u_masked_at_random_in_training_only():
    z, _, indexes = _views(n_images=64, k=32)
    criterion = NCLLoss(0.3, "rep_relu", None, dimension_dropout=0.25)
    torch.manual_seed(11)
    terms = criterion.terms(z, indexes)
    torch.manual_seed(11)  # the same draw, made here: each entry kept with probability 0.75
    keep = torch.rand(z.shape) >= 0.25
    v = non_negative_representation(z, "rep_relu", None) * keep
    v = v / v.norm(dim=1, keepdim=True)
    assert torch.allclose(terms.representation, v, atol=1e-6)
    assert torch.allclose(terms.loss, info_nce_loss(v, indexes, 0.3), atol=1e-6)
    assert torch.equal(terms.logged["train_dimension_kept_ratio"], keep.float().mean())
    assert abs(keep.float().mean().item() - 0.75) < 0.03  # 4,096 draws: std 0.007
    dropped = non_negative_representation(z, "rep_relu", None).abs() > 0
    assert (terms.representation[dropped & ~keep] == 0).all()
    u = non_negative_representation(z, "rep_relu", None)
    criterion.eval()
    assert torch.equal(criterion.terms(z, indexes).representation, u)
    assert torch.allclose(criterion(z, indexes), NCLLoss(0.3, "rep_relu", None, 0.0)(z, indexes))


def test_dimension_dropout_passes_no_gradient_through_a_dropped_entry():
    z, _, indexes = _views(n_images=8, k=16)
    z = z.abs().requires_grad_(True)  # every entry active under rep_relu
    torch.manual_seed(5)
    NCLLoss(0.2, "relu", None, dimension_dropout=0.5)(z, indexes).backward()
    torch.manual_seed(5)
    keep = torch.rand(z.shape) >= 0.5
    # v = normalize(phi(z) * m) does not depend on a dropped entry: zero up to rounding
    assert z.grad[~keep].abs().max() < 1e-6 * z.grad[keep].abs().max()


def test_the_readme_any_training_loop_block_runs_and_trains_every_part():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Use the pieces in any training loop", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    assert torch.isfinite(scope["loss"])
    for part in ("backbone", "proj", "gating_head"):
        grads = [p.grad for p in scope[part].parameters()]
        assert all(g is not None for g in grads), part
