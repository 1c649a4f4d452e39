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
        assert f"    {f.name} (" in doc


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


def test_defaults_and_paper_names():
    s = BayesNCLSettings.from_kwargs({"proj_hidden_dim": 8, "proj_output_dim": 4, "use_kl": "0"})
    assert (s.rho, s.gate_threshold, s.sigmoid_temperature) == (0.8, 0.5, 1.0)
    assert s.gating_head_hidden_dim == 8 and s.kl_lambda == 0.0 and s.top_k is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.bayesian_prior_prob = 0.3  # type: ignore[misc]


def test_use_bayes_false_stops_after_the_shared_keys():
    values = BayesNCLSettings.check_kwargs(
        {"proj_hidden_dim": 8, "proj_output_dim": 4, "use_bayes": False, "kl_eps": 9}
    )
    assert values["use_bayes"] is False and "kl_eps" not in values
