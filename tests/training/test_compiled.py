"""``performance.compile``: when a pretraining compiles the backbone's training forward, what the
compiled module still is (its parameters, its ``state_dict``, its eager evaluation forward), and
that a few training steps give the numbers of the eager ones to float tolerance."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from solo_bayesncl.config import runtime
from solo_bayesncl.config.checks import check_run_cfg
from solo_bayesncl.config.runtime import performance_settings
from solo_bayesncl.core.validation import ConfigError
from solo_bayesncl.training.compiled import compile_training_forward, is_compiled


def _cfg(**values):
    cfg = OmegaConf.create({"accelerator": "cpu", "performance": {}})
    for key, value in values.items():
        OmegaConf.update(cfg, key.replace("__", "."), value)
    return cfg


def decide_compile(cfg) -> bool:
    """Whether the pretraining of ``cfg`` compiles, as its settings say."""
    return performance_settings(cfg.performance, str(cfg.accelerator)).compile


def test_off_unless_asked(monkeypatch) -> None:
    monkeypatch.setattr(runtime, "cpp_compiler", lambda: "/usr/bin/g++")
    assert decide_compile(_cfg()) is False
    assert decide_compile(_cfg(performance__compile=False)) is False
    assert decide_compile(_cfg(performance__compile=True)) is True
    assert decide_compile(_cfg(performance__compile="true")) is True


@pytest.mark.solo  # needs Lightning, installed with solo-learn
def test_other_settings_are_refused_in_one_line_naming_the_key() -> None:
    cfg = OmegaConf.create({"performance": {"compile": "auto"}})
    with pytest.raises(ConfigError) as err:
        check_run_cfg(cfg)
    assert str(err.value) == (
        "performance.compile='auto' is not a boolean; allowed: true, false (or 1, 0)"
    )
    assert (
        check_run_cfg(OmegaConf.create({"performance": {"compile": "False"}})).performance[
            "compile"
        ]
        is False
    )


def test_without_a_cpp_compiler_compiling_on_the_cpu_is_refused(monkeypatch) -> None:
    monkeypatch.setattr(runtime, "cpp_compiler", lambda: None)
    assert decide_compile(_cfg()) is False
    with pytest.raises(
        ConfigError, match=r"^performance.compile=True: torch.compile needs a C\+\+"
    ):
        decide_compile(_cfg(performance__compile=True))
    # on a GPU inductor needs no C++ compiler
    assert decide_compile(_cfg(performance__compile=True, accelerator="gpu")) is True


def test_the_compiler_is_found_from_cxx_first(monkeypatch, tmp_path) -> None:
    tool = tmp_path / "my-c++"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("CXX", str(tool))
    assert runtime.cpp_compiler() == str(tool)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CXX", "not-a-compiler")
    assert runtime.cpp_compiler() is None


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1, bias=False)  # as in ResNets, before BatchNorm
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3))


def test_only_the_training_forward_with_gradients_goes_through_the_compiled_one(
    monkeypatch,
) -> None:
    calls: list[str] = []

    def fake_compile(fn, dynamic=None):
        assert dynamic is False

        def run(*args, **kwargs):
            calls.append("compiled")
            return fn(*args, **kwargs)

        return run

    monkeypatch.setattr(torch, "compile", fake_compile)
    net = _Net()
    keys = list(net.state_dict())
    assert not is_compiled(net)
    assert compile_training_forward(net) is net and is_compiled(net)
    assert compile_training_forward(net) is net  # a second call changes nothing
    x = torch.randn(2, 3, 8, 8)
    net.train()
    net(x)
    assert calls == ["compiled"]
    with torch.no_grad():
        net(x)
    net.eval()
    net(x)
    assert calls == ["compiled"]  # validation and feature extraction: the eager forward
    assert list(net.state_dict()) == keys  # checkpoints keep their keys
    assert [name for name, _ in net.named_parameters()] == ["conv.weight", "bn.weight", "bn.bias"]


@pytest.mark.slow
def test_the_compiled_training_forward_computes_the_eager_one() -> None:
    torch.manual_seed(0)
    eager, fast = _Net(), _Net()
    fast.load_state_dict(eager.state_dict())
    compile_training_forward(fast)
    x = torch.randn(4, 3, 8, 8)
    out_eager, out_fast = eager(x), fast(x)
    torch.testing.assert_close(out_fast, out_eager, rtol=1e-5, atol=1e-6)
    out_eager.square().sum().backward()
    out_fast.square().sum().backward()
    for (name, a), (_, b) in zip(eager.named_parameters(), fast.named_parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-6, msg=name)
    # the running statistics BatchNorm keeps are updated by the compiled forward too
    torch.testing.assert_close(fast.bn.running_mean, eager.bn.running_mean)


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.solo
def test_a_compiled_pretraining_trains_as_the_eager_one(image_folder, tmp_path, capsys):
    """NCL, 3 steps on the same images and seed, compiled and eager: the same checkpoint keys,
    the same losses and the same weights to float tolerance, far closer than training moved
    them. (A few steps: on batches of 8, BatchNorm over a 1 x 1 map and the ReLUs amplify
    rounding differences from step to step, as any change of kernels would; BayesNCL's hard
    gates flip on them.)"""
    from helpers import compose, method_of, tiny_pretrain_overrides
    from lightning.pytorch import Callback

    from solo_bayesncl.training.fit import seed_and_layout
    from solo_bayesncl.training.pretrain import prepare_pretrain, pretrain

    class Losses(Callback):
        def __init__(self) -> None:
            self.losses: list[float] = []

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            self.losses.append(float(outputs["loss"]))

    def cfg(setting: str):
        overrides = [
            *tiny_pretrain_overrides(image_folder, tmp_path / setting),
            "++limit_train_batches=3",
            "++limit_val_batches=1",
            "++num_sanity_val_steps=0",
            "wandb.enabled=False",
            "++enable_progress_bar=False",
            f"++performance.compile={setting}",
        ]
        return compose("scripts/pretrain/cifar", "ncl.yaml", overrides)

    def run(setting: str):
        losses = Losses()
        trainer = pretrain(cfg(setting), extra_callbacks=[losses])
        model = trainer.lightning_module
        return model, {k: v.detach().clone() for k, v in model.state_dict().items()}, losses

    start = prepare_pretrain(cfg("false"))
    untrained = seed_and_layout(
        start.trainer.seed, start.trainer.performance, lambda: method_of(start.solo)
    ).state_dict()
    _, eager, eager_losses = run("false")
    assert "performance.compile:" not in capsys.readouterr().out
    model, fast, fast_losses = run("true")
    assert "the backbone's training forward is compiled" in capsys.readouterr().out
    assert is_compiled(model.backbone)
    assert list(fast) == list(eager)  # the same checkpoint keys
    assert len(fast_losses.losses) == 3
    # the losses agree to 1e-4 relative (the third step was 1.1e-5 apart on an AMD EPYC), far
    # closer than the 1.5% by which three steps lower them
    assert fast_losses.losses == pytest.approx(eager_losses.losses, rel=1e-4)
    assert eager_losses.losses[-1] < eager_losses.losses[0] * (1 - 1e-3)
    moved_all = apart_all = 0.0
    for name, value in eager.items():
        if not value.is_floating_point():
            assert torch.equal(fast[name], value), name  # e.g. BatchNorm's batch counts
            continue
        moved = float((value - untrained[name]).norm())
        apart = float((fast[name] - value).norm())
        moved_all, apart_all = moved_all + moved**2, apart_all + apart**2
        # each tensor within 5% of how far it moved (the first BatchNorm's bias, which the next
        # BatchNorm nearly cancels, moves least and is the worst conditioned), the model within 1%
        assert apart <= 0.05 * moved + 1e-6 * float(value.norm()), (name, apart, moved)
    assert apart_all**0.5 <= 0.01 * moved_all**0.5, (apart_all**0.5, moved_all**0.5)
