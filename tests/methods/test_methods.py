"""The bayesncl and ncl solo-learn methods: registration, config checks, training step, gradients."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("solo", reason="needs upstream solo-learn installed")

from helpers import compose  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

import solo_bayesncl  # noqa: E402,F401
from solo_bayesncl.training.pretrain import prepare_pretrain  # noqa: E402


def _cfg(name: str = "bayesncl.yaml", extra: list[str] | None = None, image_folder=None):
    overrides = [
        "data.dataset=custom",
        "method_kwargs.proj_hidden_dim=64",
        "method_kwargs.proj_output_dim=32",
        "optimizer.batch_size=4",
        "accelerator=cpu",
    ]
    if image_folder is not None:
        overrides += [
            f"data.train_path={image_folder / 'train'}",
            f"data.val_path={image_folder / 'val'}",
        ]
    return prepare_pretrain(
        compose("scripts/pretrain/cifar", name, overrides + (extra or [])), check_data=False
    ).solo


@pytest.fixture
def batch(image_folder):
    from PIL import Image
    from torchvision import transforms

    to_tensor = transforms.Compose(
        [transforms.ToTensor(), transforms.Normalize([0.5] * 3, [0.5] * 3)]
    )
    files = sorted((image_folder / "train").rglob("*.png"))[::6][:4]
    x1 = torch.stack([to_tensor(Image.open(f)) for f in files])
    x2 = torch.flip(x1, dims=[3])
    return torch.arange(4), [x1, x2], torch.tensor([0, 1, 2, 3])


def test_registered_in_solo_registry():
    from solo.methods import METHODS

    from solo_bayesncl.methods import NCL, BayesNCL

    assert METHODS["bayesncl"] is BayesNCL
    assert METHODS["ncl"] is NCL


def test_registered_when_solo_imported_first():
    import subprocess
    import sys

    code = "import solo.methods as m; import solo_bayesncl; print(sorted(k for k in m.METHODS if k in ('bayesncl','ncl')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("['bayesncl', 'ncl']")


def test_defaults_are_the_official_cifar100_values(image_folder):
    cfg = _cfg(image_folder=image_folder)
    kw = cfg.method_kwargs
    assert (
        kw.bayesian_prior_prob,
        kw.gate_threshold,
        kw.bayesian_kl_lambda,
        kw.sigmoid_temperature,
    ) == (0.8, 0.5, 3e-5, 1.0)
    assert (
        kw.gate_type == "ste" and kw.non_neg == "rep_relu" and cfg.optimizer.gating_head_lr == 0.1
    )


def test_training_step_on_real_images(image_folder, batch):
    from solo.methods import METHODS

    for name in ("bayesncl.yaml", "ncl.yaml"):
        cfg = _cfg(name, image_folder=image_folder)
        model = METHODS[cfg.method](cfg)
        model.log_dict = lambda *a, **k: None
        loss = model.training_step(batch, 0)
        assert torch.isfinite(loss)
        loss.backward()
        assert model.backbone.conv1.weight.grad.abs().sum() > 0
        assert model.projector[0].weight.grad.abs().sum() > 0
        if cfg.method == "bayesncl":
            assert model.gating_head[0].weight.grad.abs().sum() > 0


def test_state_names_follow_the_paper(image_folder):
    from solo.methods import METHODS

    model = METHODS["bayesncl"](_cfg(image_folder=image_folder))
    prefixes = {k.split(".")[0] for k in model.state_dict()}
    assert {"backbone", "projector", "gating_head", "classifier"} <= prefixes


def test_gate_and_kl_give_no_gradient_to_backbone(image_folder, batch):
    from solo.methods import METHODS

    from solo_bayesncl.core.gates import bernoulli_kl

    model = METHODS["bayesncl"](_cfg(image_folder=image_folder))
    out = model(batch[1][0])
    gate = model.gate_output(out["gate_logits"])
    (bernoulli_kl(gate.probs, 0.8, 0.01) + gate.mask.sum()).backward()
    assert model.gating_head[0].weight.grad.abs().sum() > 0
    assert all(p.grad is None or p.grad.abs().sum() == 0 for p in model.backbone.parameters())


def test_gating_head_has_its_own_learning_rate(image_folder):
    from solo.methods import METHODS

    cfg = _cfg(extra=["optimizer.gating_head_lr=0.037"], image_folder=image_folder)
    model = METHODS["bayesncl"](cfg)
    groups = {g["name"]: g for g in model.learnable_params}
    assert groups["gating_head"]["lr"] == pytest.approx(0.037)
    head_ids = {id(p) for p in model.gating_head.parameters()}
    assert head_ids == {id(p) for p in groups["gating_head"]["params"]}


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "method_kwargs.gate_type=foo",
            "method_kwargs.gate_type='foo' is not supported; allowed values: ste, binary_concrete, gumbel",
        ),
        (
            "method_kwargs.non_neg=tanh",
            "method_kwargs.non_neg='tanh' is not supported; allowed values: exp, gelu",
        ),
        (
            "method_kwargs.bayesian_prior_prob=1.0",
            "method_kwargs.bayesian_prior_prob=1.0 is out of range; allowed: a number in (0, 1)",
        ),
        (
            "method_kwargs.bayesian_prior_prob=0",
            "method_kwargs.bayesian_prior_prob=0 is out of range",
        ),
        (
            "method_kwargs.gate_threshold=1.5",
            "method_kwargs.gate_threshold=1.5 is out of range; allowed: a number in (0, 1)",
        ),
        (
            "method_kwargs.sigmoid_temperature=0",
            "method_kwargs.sigmoid_temperature=0 is out of range; allowed: a number in [0.0001, inf)",
        ),
        (
            "method_kwargs.bayesian_kl_lambda=-1",
            "method_kwargs.bayesian_kl_lambda=-1 is out of range; allowed: a number in [0, inf)",
        ),
        ("method_kwargs.temperature=0", "method_kwargs.temperature=0 is out of range"),
        ("~method_kwargs.proj_output_dim", "method_kwargs.proj_output_dim is missing"),
        ("optimizer.gating_head_lr=-0.1", "optimizer.gating_head_lr=-0.1 is out of range"),
    ],
)
def test_bad_method_keys_are_named(image_folder, override, message):
    with pytest.raises(ValueError) as err:  # ConfigError is a ValueError
        _cfg(extra=[override], image_folder=image_folder)
    assert message in str(err.value)


def test_unknown_method_lists_the_allowed_ones(image_folder):
    with pytest.raises(
        ValueError, match="method='bayes' is not a solo-learn method; allowed values: .*bayesncl"
    ):
        _cfg(extra=["method=bayes"], image_folder=image_folder)


def test_official_config_spellings(image_folder, batch):
    from solo.methods import METHODS

    cfg = _cfg(
        extra=[
            "method_kwargs.gate_type=STE",
            "method_kwargs.non_neg=leakyrelu",
            "method_kwargs.use_kl=False",
            "+method_kwargs.use_topk=True",
            "+method_kwargs.topk_k=4",
        ],
        image_folder=image_folder,
    )
    assert cfg.method_kwargs.gate_type == "ste" and cfg.method_kwargs.non_neg == "leaky_relu"
    model = METHODS["bayesncl"](cfg)
    assert model.objective.use_kl is False
    ncl = METHODS["ncl"](
        _cfg(
            "ncl.yaml",
            [
                "+method_kwargs.use_topk=True",
                "+method_kwargs.topk_k=4",
                "method_kwargs.non_neg=relu",
            ],
            image_folder,
        )
    )
    v = ncl.representation(ncl(batch[1][0]))
    assert int((v > 0).sum(dim=1).max()) <= 4


def test_gumbel_sigmoid_gate_trains(image_folder, batch):
    from solo.methods import METHODS

    model = METHODS["bayesncl"](
        _cfg(extra=["method_kwargs.gate_type=gumbel_sigmoid"], image_folder=image_folder)
    )
    model.log_dict = lambda *a, **k: None
    loss = model.training_step(batch, 0)
    assert torch.isfinite(loss)


def test_ncl_dimension_dropout_masks_training_only(image_folder, batch):
    """NCL's ``dimension_dropout`` zeroes entries of what InfoNCE compares in training (logged as
    the kept share); evaluation reads the unmasked representation."""
    from solo.methods import METHODS

    model = METHODS["ncl"](
        _cfg("ncl.yaml", extra=["+method_kwargs.dimension_dropout=0.5"], image_folder=image_folder)
    )
    logged = {}
    model.log_dict = lambda stats, **k: logged.update(stats)
    loss = model.training_step(batch, 0)
    loss.backward()
    assert torch.isfinite(loss) and model.projector[0].weight.grad.abs().sum() > 0
    assert 0.3 < logged["train_dimension_kept_ratio"].item() < 0.7  # 8 x 32 draws at 0.5
    model.eval()
    with torch.no_grad():
        out = model(batch[1][0])
        u = model.objective.representation(out["z"])
        assert torch.equal(model.representation(out), u)
        assert torch.equal(model.contrastive_terms({"z": [out["z"]]}, batch[0]).representation, u)
    model.train()
    with torch.no_grad():
        masked = model.contrastive_terms({"z": [out["z"]]}, batch[0]).representation
    assert ((masked == 0) & (u > 0)).any()


def test_scheduled_dimension_dropout_falls_linearly_to_zero():
    from solo_bayesncl.methods.ncl import scheduled_dimension_dropout

    assert scheduled_dimension_dropout(0.5, 30, 0.0) == 0.5
    assert scheduled_dimension_dropout(0.5, 30, 15.0) == pytest.approx(0.25)
    assert scheduled_dimension_dropout(0.5, 30, 27.0) == pytest.approx(0.05)
    assert scheduled_dimension_dropout(0.5, 30, 30.0) == 0.0
    assert scheduled_dimension_dropout(0.5, 30, 45.0) == 0.0
    assert scheduled_dimension_dropout(0.11, 0, 150.0) == 0.11  # no schedule: constant


def test_ncl_dimension_dropout_follows_its_schedule_over_training(image_folder, batch):
    """With ``dimension_dropout_epochs`` the step's dropout share comes from the epochs trained
    (the trainer's epoch plus the share of its batches done: a resumed run continues where it
    stopped), is logged, and is 0 (InfoNCE compares ``u`` itself) once the schedule ends."""
    from types import SimpleNamespace

    from solo.methods import METHODS

    extra = ["+method_kwargs.dimension_dropout=0.5", "+method_kwargs.dimension_dropout_epochs=30"]
    model = METHODS["ncl"](_cfg("ncl.yaml", extra=extra, image_folder=image_folder))
    logged = {}
    model.log_dict = lambda stats, **k: logged.update(stats)
    model.trainer = SimpleNamespace(current_epoch=15, num_training_batches=10)
    model.training_step(batch, 5)
    assert logged["train_dimension_dropout"] == pytest.approx(0.5 * (1 - 15.5 / 30))
    assert model.objective.dimension_dropout == pytest.approx(0.5 * (1 - 15.5 / 30))
    assert 0.5 < logged["train_dimension_kept_ratio"].item() < 0.95  # 8 x 32 draws at 0.24

    model.trainer = SimpleNamespace(current_epoch=30, num_training_batches=10)
    logged.clear()
    model.training_step(batch, 0)
    assert logged["train_dimension_dropout"] == 0.0
    assert "train_dimension_kept_ratio" not in logged  # nothing masked
    with torch.no_grad():
        z = model(batch[1][0])["z"]
        u = model.objective.representation(z)
        assert torch.equal(model.contrastive_terms({"z": [z]}, batch[0]).representation, u)


def test_soft_gate_zeroes_nothing(image_folder, batch):
    from solo.methods import METHODS

    model = METHODS["bayesncl"](
        _cfg(extra=["method_kwargs.non_neg=softplus"], image_folder=image_folder)
    ).eval()
    with torch.no_grad():
        out = model(batch[1][0])
        soft = model.representation(out, gate="soft")
        hard = model.representation(out, gate="hard")
    assert (soft > 0).all()
    assert OmegaConf.select(model.cfg, "method_kwargs.eval_gate") == "hard"
    assert torch.allclose(hard.norm(dim=1)[hard.norm(dim=1) > 0], torch.ones(1))


def test_import_is_lazy_and_registers_on_first_solo_import():
    import subprocess
    import sys

    code = (
        "import sys, solo_bayesncl; assert 'solo' not in sys.modules, 'solo imported eagerly'; "
        "from solo.methods import METHODS; print('bayesncl' in METHODS and 'ncl' in METHODS)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("True")


def test_methods_compute_their_representation_with_the_loss_helpers(
    image_folder, batch, monkeypatch
):
    """NCL and BayesNCL train and evaluate through the host-independent losses
    (``NCLLoss``/``BayesNCLLoss``), which run the definitions ``non_negative_representation`` /
    ``gated_representation`` (no copy of the exp shift or the top-k filter), so the loss tests
    cover the training path."""
    from solo.methods import METHODS

    from solo_bayesncl.core import losses

    calls: list[str] = []

    def spy(name):
        real = getattr(losses, name)

        def wrapped(*args, **kwargs):
            calls.append(name)
            return real(*args, **kwargs)

        return wrapped

    extra = ["method_kwargs.non_neg=exp", "+method_kwargs.use_topk=True", "+method_kwargs.topk_k=4"]
    for name, helper in (
        ("ncl.yaml", "non_negative_representation"),
        ("bayesncl.yaml", "gated_representation"),
    ):
        model = METHODS[name.removesuffix(".yaml")](_cfg(name, extra, image_folder))
        model.log_dict = lambda *a, **k: None
        with monkeypatch.context() as patch:
            patch.setattr(losses, helper, spy(helper))
            calls.clear()
            with torch.no_grad():
                out = model(batch[1][0])
                out["z"] = out["z"] * 1e4  # exp(z) overflows float32 without the helper's shift
                v = model.representation(out)
            assert calls == [helper]
            assert torch.isfinite(v).all()
            assert int((v > 0).sum(dim=1).max()) <= 4
            calls.clear()
            assert torch.isfinite(model.training_step(batch, 0))
            assert calls == [helper]


def test_official_use_bayes_false_means_no_gate(image_folder):
    """Official ``use_bayes: False`` builds no gating head: the run trains plain NCL."""
    from solo.methods import METHODS

    with pytest.warns(UserWarning, match=r"use_bayes=False means no gate at all.*method=ncl"):
        cfg = _cfg(extra=["method_kwargs.use_bayes=False"], image_folder=image_folder)
    assert cfg.method == "ncl"
    model = METHODS[cfg.method](cfg)
    assert not hasattr(model, "gating_head")


def test_use_kl_false_keeps_the_gate_and_drops_the_kl(image_folder):
    from solo.methods import METHODS

    cfg = _cfg(extra=["method_kwargs.use_kl=False"], image_folder=image_folder)
    model = METHODS[cfg.method](cfg)
    assert (
        cfg.method == "bayesncl"
        and hasattr(model, "gating_head")
        and model.objective.use_kl is False
    )


@pytest.mark.parametrize(
    ("kwargs", "gating_head", "expected"),
    [
        # the official BayesNCL repository's scripts/pretrain/cifar/{simclr,ncl}.yaml
        ({"non_neg": "None", "use_bayes": False, "gate_type": "STE"}, False, "simclr"),
        ({"non_neg": "rep_relu", "use_bayes": False, "gate_type": "STE"}, False, "ncl"),
        ({"non_neg": "rep_relu", "use_bayes": True, "gate_type": "STE"}, True, "bayesncl"),
        # the official NCL repository's (no gate keys)
        ({"non_neg": "rep_relu"}, False, "ncl"),
    ],
)
def test_official_checkpoint_method_names(kwargs, gating_head, expected):
    from solo_bayesncl.config.saved import official_method_name

    weights = {"gating_head.0.weight": torch.zeros(1)} if gating_head else {}
    cfg = {"method": "simclr", "method_kwargs": kwargs}
    assert official_method_name(cfg, weights) == expected


def test_gated_checkpoint_reads_use_bayes_false_as_use_kl_false():
    """A gating head in the weights means a gate exists (official ``use_bayes: True``); this
    plugin's former ``use_bayes: False`` (KL off) beside it becomes ``use_kl: False``."""
    from solo_bayesncl.config.saved import _gate_flags

    weights = {"gating_head.0.weight": torch.zeros(1)}
    old = {"method_kwargs": {"use_bayes": False}}
    _gate_flags(old, weights)
    assert old["method_kwargs"] == {"use_bayes": True, "use_kl": False}
    official = {"method_kwargs": {"use_bayes": True}}
    _gate_flags(official, weights)
    assert official["method_kwargs"] == {"use_bayes": True, "use_kl": True}
