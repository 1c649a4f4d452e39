"""Every config value is read as written, or refused with one line naming the key, the value and
what is allowed, before a model is built."""

from __future__ import annotations

import pytest

pytest.importorskip("solo", reason="needs upstream solo-learn installed")

import solo.methods  # noqa: E402,F401  (solo-learn first, then the plugin's methods)
from helpers import compose, image_folder_overrides  # noqa: E402

from solo_bayesncl.core.validation import ConfigError  # noqa: E402
from solo_bayesncl.training.pretrain import prepare_pretrain  # noqa: E402


def _prepare(config: str, extra: list[str], image_folder, edit=None):
    cfg = compose(
        "scripts/pretrain/cifar",
        config,
        [
            *image_folder_overrides(image_folder),
            "method_kwargs.proj_hidden_dim=16",
            "method_kwargs.proj_output_dim=16",
            "optimizer.batch_size=8",
            "accelerator=cpu",
            *extra,
        ],
    )
    if edit is not None:
        edit(cfg)
    return prepare_pretrain(cfg, check_data=False).solo


def _refused(config: str, extra: list[str], image_folder, edit=None) -> str:
    with pytest.raises(ConfigError) as err:
        _prepare(config, extra, image_folder, edit)
    message = str(err.value)
    assert "\n" not in message
    return message


def test_misspelt_method_kwarg_is_refused_with_the_known_keys(image_folder):
    message = _refused("bayesncl.yaml", ["+method_kwargs.bayesian_prior_probb=0.3"], image_folder)
    assert message.startswith("method_kwargs has unknown key(s) bayesian_prior_probb; known keys:")
    assert "bayesian_prior_prob," in message and "gating_head_hidden_dim" in message


def test_gate_keys_are_unknown_to_ncl(image_folder):
    message = _refused("ncl.yaml", ["+method_kwargs.gate_threshold=0.3"], image_folder)
    assert message == (
        "method_kwargs has unknown key(s) gate_threshold; known keys: dimension_dropout, "
        "dimension_dropout_epochs, non_neg, proj_hidden_dim, proj_output_dim, temperature, "
        "topk_k, use_topk"
    )


def test_dimension_dropout_is_an_ncl_key_only(image_folder):
    message = _refused("bayesncl.yaml", ["+method_kwargs.dimension_dropout=0.1"], image_folder)
    assert message.startswith("method_kwargs has unknown key(s) dimension_dropout; known keys:")
    cfg = _prepare("ncl.yaml", ["+method_kwargs.dimension_dropout=0.11"], image_folder)
    assert cfg.method_kwargs.dimension_dropout == 0.11
    assert _prepare("ncl.yaml", [], image_folder).method_kwargs.dimension_dropout == 0.0
    assert "dimension_dropout" not in _prepare("bayesncl.yaml", [], image_folder).method_kwargs


@pytest.mark.parametrize(("value", "shown"), [("1.0", "1.0"), ("-0.1", "-0.1"), ("half", "'half'")])
def test_dimension_dropout_outside_zero_one_is_refused_in_one_line(image_folder, value, shown):
    message = _refused("ncl.yaml", [f"+method_kwargs.dimension_dropout={value}"], image_folder)
    assert message == (
        f"method_kwargs.dimension_dropout={shown} is out of range; allowed: a number in [0, 1)"
    )


def test_dimension_dropout_epochs_is_an_ncl_key_only(image_folder):
    message = _refused(
        "bayesncl.yaml", ["+method_kwargs.dimension_dropout_epochs=30"], image_folder
    )
    assert message.startswith(
        "method_kwargs has unknown key(s) dimension_dropout_epochs; known keys:"
    )
    extra = ["+method_kwargs.dimension_dropout=0.5", "+method_kwargs.dimension_dropout_epochs=30"]
    assert _prepare("ncl.yaml", extra, image_folder).method_kwargs.dimension_dropout_epochs == 30
    assert _prepare("ncl.yaml", [], image_folder).method_kwargs.dimension_dropout_epochs == 0


@pytest.mark.parametrize(("value", "shown"), [("-1", "-1"), ("2.5", "2.5"), ("soon", "'soon'")])
def test_dimension_dropout_epochs_not_a_count_is_refused_in_one_line(image_folder, value, shown):
    extra = [
        "+method_kwargs.dimension_dropout=0.5",
        f"+method_kwargs.dimension_dropout_epochs={value}",
    ]
    message = _refused("ncl.yaml", extra, image_folder)
    assert message == (
        f"method_kwargs.dimension_dropout_epochs={shown} is out of range; allowed: an integer >= 0"
    )


def test_dimension_dropout_epochs_without_a_share_to_fall_from_is_refused(image_folder):
    message = _refused("ncl.yaml", ["+method_kwargs.dimension_dropout_epochs=30"], image_folder)
    assert message == (
        "method_kwargs.dimension_dropout_epochs=30 needs method_kwargs.dimension_dropout > 0 "
        "(the share it falls from)"
    )


@pytest.mark.parametrize(
    ("config", "override", "known"),
    [
        (
            "simclr.yaml",
            "+method_kwargs.non_neg=relu",
            "proj_hidden_dim, proj_output_dim, temperature",
        ),
        (
            "mocov2plus.yaml",
            "+method_kwargs.queue_sise=4096",
            "proj_hidden_dim, proj_output_dim, queue_size, temperature",
        ),
    ],
)
def test_solo_learn_methods_refuse_keys_they_ignore(image_folder, config, override, known):
    key = override.split("=")[0].removeprefix("+method_kwargs.")
    message = _refused(config, [override], image_folder)
    assert message == f"method_kwargs has unknown key(s) {key}; known keys: {known}"


@pytest.mark.parametrize(
    ("config", "override", "message"),
    [
        (
            "bayesncl.yaml",
            "method_kwargs.use_bayes=no",
            "method_kwargs.use_bayes='no' is not a boolean; allowed: true, false (or 1, 0)",
        ),
        (
            "ncl.yaml",
            "++method_kwargs.use_topk=no",
            "method_kwargs.use_topk='no' is not a boolean; allowed: true, false (or 1, 0)",
        ),
        (
            "bayesncl.yaml",
            "++method_kwargs.use_kl=yes",
            "method_kwargs.use_kl='yes' is not a boolean; allowed: true, false (or 1, 0)",
        ),
        (
            "ncl.yaml",
            "wandb.enabled=off",
            "wandb.enabled='off' is not a boolean; allowed: true, false (or 1, 0)",
        ),
        (
            "bayesncl.yaml",
            "++method_kwargs.gating_head_hidden_dim=0",
            "method_kwargs.gating_head_hidden_dim=0 is out of range; allowed: an integer >= 1",
        ),
        (
            "bayesncl.yaml",
            "++method_kwargs.gating_head_hidden_dim=-1",
            "method_kwargs.gating_head_hidden_dim=-1 is out of range; allowed: an integer >= 1",
        ),
        (
            "ncl.yaml",
            "++data.fraction=0",
            "data.fraction=0 is out of range; allowed: a number in (0, 1], or -1 for all the data",
        ),
        (
            "ncl.yaml",
            "++data.fraction=1.5",
            "data.fraction=1.5 is out of range; allowed: a number in (0, 1], or -1 for all the data",
        ),
        (
            "ncl.yaml",
            "++data.val_fraction=0",
            "data.val_fraction=0 is out of range; allowed: a number in (0, 1], or -1 for all the "
            "data",
        ),
        ("simclr.yaml", "max_epochs=0", "max_epochs=0 is out of range; allowed: an integer >= 1"),
        (
            "ncl.yaml",
            "optimizer.batch_size=0",
            "optimizer.batch_size=0 is out of range; allowed: an integer >= 1",
        ),
        (
            "ncl.yaml",
            "optimizer.lr=-0.1",
            "optimizer.lr=-0.1 is out of range; allowed: a number in (0, inf)",
        ),
        (
            "mocov2plus.yaml",
            "method_kwargs.queue_size=0",
            "method_kwargs.queue_size=0 is out of range; allowed: an integer >= 1",
        ),
    ],
)
def test_bad_values_are_refused_naming_key_value_and_range(image_folder, config, override, message):
    assert _refused(config, [override], image_folder) == message


def test_crop_size_zero_is_refused(image_folder):
    def zero_crop(cfg):
        cfg.augmentations[0].crop_size = 0

    message = _refused("bayesncl.yaml", [], image_folder, edit=zero_crop)
    assert message == "augmentations[0].crop_size=0 is out of range; allowed: an integer >= 1"


@pytest.mark.parametrize(
    ("written", "read"), [("false", False), ("False", False), ("0", False), ("true", True)]
)
def test_booleans_are_read_as_written(image_folder, written, read):
    cfg = _prepare(
        "ncl.yaml", [f"+method_kwargs.use_topk={written}", "+method_kwargs.topk_k=4"], image_folder
    )
    assert cfg.method_kwargs.use_topk is read


def test_valid_fractions_pass(image_folder):
    for fraction in ("1", "0.5", "-1"):
        cfg = _prepare("ncl.yaml", [f"++data.fraction={fraction}"], image_folder)
        assert cfg.data.fraction == float(fraction)


def test_linear_crop_size_and_epochs_are_checked():
    from solo_bayesncl.config.checks import check_run_cfg

    cfg = compose("scripts/linear/cifar", "linear.yaml", ["data.augmentations.crop_size=0"])
    with pytest.raises(ConfigError, match=r"^data.augmentations.crop_size=0 is out of range"):
        check_run_cfg(cfg)
    cfg = compose("scripts/linear/cifar", "linear.yaml", ["max_epochs=0"])
    with pytest.raises(ConfigError, match=r"^max_epochs=0 is out of range"):
        check_run_cfg(cfg)


def test_knn_refuses_k_zero_in_one_line(tmp_path, capsys):
    from solo_bayesncl.cli.knn import main

    with pytest.raises(SystemExit) as exit_:
        main([str(tmp_path / "none.ckpt"), "--k", "5", "0"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err == "solo-bayesncl-knn: error: k=0 is out of range; allowed: an integer >= 1\n"


@pytest.mark.parametrize(
    ("value", "expected"),
    [(True, True), (False, False), (1, True), (0, False), ("True", True), ("false", False)],
)
def test_parse_bool_accepts_the_documented_spellings(value, expected):
    from solo_bayesncl.core.validation import parse_bool

    assert parse_bool("k", value) is expected


@pytest.mark.parametrize("value", ["no", "yes", "on", "", 2, 0.5, None])
def test_parse_bool_refuses_everything_else(value):
    from solo_bayesncl.core.validation import parse_bool

    with pytest.raises(ConfigError, match=r"^k=.* is not a boolean; allowed: true, false"):
        parse_bool("k", value)


@pytest.mark.parametrize(
    ("written", "read"),
    [(None, 60.0), ("30", 30.0), (0.5, 0.5), (0, 0.0), ("null", 0.0)],
)
def test_checkpoint_interval_defaults_to_a_minute_and_zero_or_null_switch_it_off(
    image_folder, written, read
):
    extra = [] if written is None else [f"++checkpoint.time_interval_s={written}"]
    cfg = _prepare("bayesncl.yaml", extra, image_folder)
    assert cfg.checkpoint.time_interval_s == read


@pytest.mark.parametrize(
    ("written", "shown"), [("-1", "-1"), ("soon", "'soon'"), ("inf", "inf"), ("true", "True")]
)
def test_a_bad_checkpoint_interval_is_refused_in_one_line(image_folder, written, shown):
    message = _refused("bayesncl.yaml", [f"++checkpoint.time_interval_s={written}"], image_folder)
    assert message.startswith(f"checkpoint.time_interval_s={shown} is not allowed; give the ")
    assert message.endswith("a number >= 0 (0 or null: none)")


def test_a_misspelt_checkpoint_key_is_refused(image_folder):
    message = _refused("bayesncl.yaml", ["++checkpoint.time_interval=30"], image_folder)
    assert message == (
        "checkpoint has unknown key(s) time_interval; known keys: dir, enabled, frequency, "
        "keep_prev, time_interval_s"
    )
