"""The loss API refuses what the config refuses, with the same message: one declaration of each
hyperparameter's range (core.hyperparameters), read by the losses, the gates and the settings."""

from __future__ import annotations

import math
import re

import pytest
import torch

from solo_bayesncl.core.gates import (
    BernoulliGate,
    bernoulli_kl,
    binary_concrete_sample,
    gate_probabilities,
    gumbel_sample,
    hard_threshold_ste,
)
from solo_bayesncl.core.losses import BayesNCLLoss, NCLLoss, info_nce_loss, keep_top_k
from solo_bayesncl.core.validation import ConfigError
from solo_bayesncl.methods.keys import BayesNCLSettings, NCLSettings

GOOD = dict(
    bayesian_prior_prob=0.8,
    bayesian_kl_lambda=3e-5,
    use_kl=True,
    gate_type="ste",
    gate_threshold=0.5,
    sigmoid_temperature=1.0,
    kl_eps=0.01,
    gather_distributed=False,
)
REQUIRED = {"proj_hidden_dim": 8, "proj_output_dim": 8}


def _config_message(settings, key: str, value) -> str:
    """The message the config check gives for ``method_kwargs.<key>=value``, without the section."""
    with pytest.raises(ConfigError) as err:
        settings.from_kwargs({**REQUIRED, key: value})
    message = str(err.value)
    assert message.startswith(f"method_kwargs.{key}=")
    return message.removeprefix("method_kwargs.")


def _refused(call, message: str) -> None:
    with pytest.raises(ConfigError, match="^" + re.escape(message) + "$"):
        call()


def test_the_issue_s_bayesncl_loss_with_prior_above_one_is_refused() -> None:
    expected = _config_message(BayesNCLSettings, "bayesian_prior_prob", 1.5)
    assert expected == "bayesian_prior_prob=1.5 is out of range; allowed: a number in (0, 1)"
    _refused(
        lambda: BayesNCLLoss(0.2, "relu", None, **{**GOOD, "bayesian_prior_prob": 1.5}), expected
    )


@pytest.mark.parametrize("prior", [1.5, 0.0])
def test_bernoulli_kl_refuses_a_prior_it_used_to_clamp(prior: float) -> None:
    expected = _config_message(BayesNCLSettings, "bayesian_prior_prob", prior)
    _refused(lambda: bernoulli_kl(torch.rand(4, 3), prior, 0.01), expected)


def test_bayesncl_loss_with_a_negative_temperature_is_refused() -> None:
    expected = _config_message(BayesNCLSettings, "temperature", -1.0)
    _refused(lambda: BayesNCLLoss(-1.0, "relu", None, **GOOD), expected)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("bayesian_kl_lambda", -1e-3),
        ("kl_eps", 0.5),
        ("kl_eps", 0.0),
        ("gate_threshold", 1.0),
        ("sigmoid_temperature", 0.0),
        ("use_kl", "no"),
        ("bayesian_prior_prob", math.nan),
    ],
)
def test_bayesncl_loss_checks_each_hyperparameter_as_the_config(key: str, value) -> None:
    expected = _config_message(BayesNCLSettings, key, value)
    _refused(lambda: BayesNCLLoss(0.2, "relu", None, **{**GOOD, key: value}), expected)


@pytest.mark.parametrize(
    ("key", "value", "call"),
    [
        ("temperature", 0.0, lambda: NCLLoss(0.0, "relu", None, 0.0)),
        ("dimension_dropout", 1.0, lambda: NCLLoss(0.2, "relu", None, 1.0)),
        ("temperature", -0.2, lambda: info_nce_loss(torch.eye(2), torch.zeros(2), -0.2)),
    ],
)
def test_ncl_loss_and_info_nce_check_as_the_config(key: str, value, call) -> None:
    _refused(call, _config_message(NCLSettings, key, value))


@pytest.mark.parametrize(
    ("key", "value", "call"),
    [
        ("gate_threshold", 1.5, lambda: BernoulliGate("ste", 1.5, 1.0)),
        ("sigmoid_temperature", -1.0, lambda: BernoulliGate("ste", 0.5, -1.0)),
        ("sigmoid_temperature", 0.0, lambda: gate_probabilities(torch.zeros(2), 0.0)),
        ("gate_threshold", -0.1, lambda: hard_threshold_ste(torch.zeros(2), -0.1)),
        ("sigmoid_temperature", 0.0, lambda: binary_concrete_sample(torch.zeros(2), 0.0)),
        ("sigmoid_temperature", 0.0, lambda: gumbel_sample(torch.zeros(2), 0.0)),
        ("kl_eps", 0.6, lambda: bernoulli_kl(torch.rand(2, 2), 0.8, 0.6)),
    ],
)
def test_the_gate_functions_check_as_the_config(key: str, value, call) -> None:
    _refused(call, _config_message(BayesNCLSettings, key, value))


def test_top_k_is_checked_in_the_loss_and_in_keep_top_k() -> None:
    _refused(
        lambda: NCLLoss(0.2, "relu", 0, 0.0),
        "top_k=0 is out of range; allowed: an integer >= 1",
    )
    _refused(
        lambda: keep_top_k(torch.ones(2, 4), 0), "k=0 is out of range; allowed: an integer >= 1"
    )


def test_good_values_still_build_the_losses() -> None:
    loss = BayesNCLLoss(0.2, "relu", None, **GOOD)
    z, logits = torch.randn(8, 6), torch.randn(8, 6)
    value = loss(z, logits, torch.arange(4).repeat(2))
    assert torch.isfinite(value)
    assert NCLLoss(0.2, "relu", 3, 0.5).top_k == 3
