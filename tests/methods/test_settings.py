"""The hyperparameter declarations of NCL and BayesNCL: one place gives the refusal message, the
docstring table, the defaults written into the config, and the check of every shipped yaml."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from solo_bayesncl.core.validation import ConfigError
from solo_bayesncl.methods.keys import (
    METHOD_SETTINGS,
    BayesNCLSettings,
    NCLSettings,
    check_method_kwargs,
    settings_table,
)

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "scripts" / "pretrain").rglob("*.yaml"))


def _shipped_method_kwargs():
    for path in SHIPPED:
        cfg = OmegaConf.load(path)
        method = cfg.get("method", None) if OmegaConf.is_dict(cfg) else None
        if method in METHOD_SETTINGS:
            yield pytest.param(path, method, cfg.method_kwargs, id=str(path.relative_to(REPO)))


def test_some_shipped_yaml_trains_each_method():
    methods = {p.values[1] for p in _shipped_method_kwargs()}
    assert methods == set(METHOD_SETTINGS)


@pytest.mark.parametrize(("path", "method", "kwargs"), list(_shipped_method_kwargs()))
def test_shipped_yaml_method_kwargs_are_declared_and_in_range(path, method, kwargs):
    check_method_kwargs(method, kwargs)  # every key a declared field
    values = METHOD_SETTINGS[method].check_kwargs(kwargs)  # every value within its range
    for key, written in kwargs.items():
        assert values[key] == written or str(values[key]) == str(written).lower(), key


@pytest.mark.parametrize("settings", [NCLSettings, BayesNCLSettings])
def test_docstring_table_is_the_declaration(settings):
    pytest.importorskip("solo", reason="the method classes subclass solo-learn's BaseMethod")
    from solo_bayesncl.methods import NCL, BayesNCL

    doc = {NCLSettings: NCL, BayesNCLSettings: BayesNCL}[settings].__doc__
    for line in settings_table(settings).splitlines():
        assert line.strip() in doc
    for f in dataclasses.fields(settings):
        section = "" if f.metadata["section"] == "method_kwargs" else f"{f.metadata['section']}."
        assert f"    {section}{f.name} (" in doc


def test_refusal_names_key_value_and_range():
    with pytest.raises(ConfigError) as err:
        BayesNCLSettings.from_kwargs(
            {"proj_hidden_dim": 8, "proj_output_dim": 4, "bayesian_prior_prob": 1.5}
        )
    assert str(err.value) == (
        "method_kwargs.bayesian_prior_prob=1.5 is out of range; allowed: a number in (0, 1)"
    )
    table = settings_table(BayesNCLSettings)
    assert "bayesian_prior_prob (default 0.8; a number in (0, 1)): rho" in table


def test_missing_required_key_names_its_meaning():
    with pytest.raises(ConfigError, match=r"^method_kwargs.proj_output_dim is missing: number"):
        NCLSettings.from_kwargs({"proj_hidden_dim": 8})


def test_defaults():
    s = BayesNCLSettings.from_kwargs({"proj_hidden_dim": 8, "proj_output_dim": 4, "use_kl": "0"})
    assert (s.bayesian_prior_prob, s.gate_threshold, s.sigmoid_temperature) == (0.8, 0.5, 1.0)
    assert (s.bayesian_kl_lambda, s.kl_eps, s.temperature, s.non_neg) == (
        3e-5,
        0.01,
        0.2,
        "rep_relu",
    )
    assert s.gating_head_hidden_dim == 8 and s.use_kl is False and s.top_k is None


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    ("key", "values", "allowed"),
    [
        ("bayesian_prior_prob", [1.5, 1.0, 0.0, -3.0, NAN], "a number in (0, 1)"),
        ("kl_eps", [0.7, 0.5, 0.0, -0.01, NAN], "a number in (0, 0.5)"),
        ("gate_threshold", [0.0, 1.0, -0.1, 1.5, NAN], "a number in (0, 1)"),
        ("sigmoid_temperature", [0.0, -1.0, NAN, INF, -INF], "a number in ["),
        ("bayesian_kl_lambda", [-1.0, NAN, INF], "a number in [0, inf)"),
        ("temperature", [0.0, NAN], "a number in ["),
    ],
)
def test_each_bayesncl_hyperparameter_has_its_one_range_check(key, values, allowed):
    """The one range check of each hyperparameter is its declaration's: the loss modules and the
    gate of ``core`` take the values as given (they have no default or check of their own)."""
    for value in values:
        with pytest.raises(ConfigError) as err:
            BayesNCLSettings.from_kwargs({"proj_hidden_dim": 8, "proj_output_dim": 4, key: value})
        assert str(err.value).startswith(f"method_kwargs.{key}={value} is out of range"), value
        assert f"allowed: {allowed}" in str(err.value), value


@pytest.mark.parametrize(
    ("settings", "key", "value", "message"),
    [
        (NCLSettings, "dimension_dropout", 1.0, "dimension_dropout=1.0 is out of range"),
        (NCLSettings, "non_neg", "square", "method_kwargs.non_neg='square' is not supported"),
        (NCLSettings, "topk_k", 0, "topk_k=0 is out of range"),
        (BayesNCLSettings, "gate_type", "hard", "method_kwargs.gate_type='hard' is not supported"),
    ],
)
def test_the_other_hyperparameters_are_refused_naming_them(settings, key, value, message):
    kwargs = {"proj_hidden_dim": 8, "proj_output_dim": 4, "use_topk": True, key: value}
    with pytest.raises(ValueError, match=message):
        settings.from_kwargs(kwargs)


def test_the_objective_is_built_from_the_declared_values():
    s = BayesNCLSettings.from_kwargs(
        {"proj_hidden_dim": 8, "proj_output_dim": 4, "bayesian_prior_prob": 0.3, "use_kl": False}
    )
    loss = s.objective(check_inputs=False)
    assert (loss.bayesian_prior_prob, loss.bayesian_kl_lambda, loss.use_kl) == (0.3, 3e-5, False)
    assert (loss.gate.gate_threshold, loss.gate.sigmoid_temperature, loss.kl_eps) == (
        0.5,
        1.0,
        0.01,
    )
    assert (loss.temperature, loss.non_neg, loss.top_k, loss.check_inputs) == (
        0.2,
        "rep_relu",
        None,
        False,
    )
    ncl = NCLSettings.from_kwargs({"proj_hidden_dim": 8, "proj_output_dim": 64, "use_topk": True})
    assert (ncl.objective().top_k, ncl.objective().dimension_dropout) == (32, 0.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.bayesian_prior_prob = 0.3  # type: ignore[misc]


def test_use_bayes_false_stops_after_the_shared_keys():
    values = BayesNCLSettings.check_kwargs(
        {"proj_hidden_dim": 8, "proj_output_dim": 4, "use_bayes": False, "kl_eps": 9}
    )
    assert values["use_bayes"] is False and "kl_eps" not in values
