"""Loading pretrained models into ready solo-learn methods or bare backbones, from:

- a Lightning ``.ckpt`` of solo-learn (or this plugin) with the run's config in the ``args.json``
  beside it, including the official NCL code's (``method: simclr`` with
  ``method_kwargs.non_neg``, read as ``ncl``) and the official BayesNCL code's (``simclr`` with
  ``use_bayes: True`` or a ``gating_head``, read as ``bayesncl``);
- zoo artifacts (:mod:`solo_bayesncl.io.artifact`), which carry their config.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import omegaconf
import torch
from torch import nn

from solo_bayesncl.config.saved import SavedConfigError, checkpoint_spec
from solo_bayesncl.config.settings import RunSpec
from solo_bayesncl.core.validation import ConfigError, first_line
from solo_bayesncl.host import registration
from solo_bayesncl.host.models import build_backbone, build_method, without_resume_warning
from solo_bayesncl.io.artifact import is_artifact, read_artifact

__all__ = [
    "CheckpointError",
    "LoadedCheckpoint",
    "check_finite_weights",
    "load_backbone",
    "load_checkpoint",
    "load_method",
]


class CheckpointError(ValueError):
    """A checkpoint file is missing, unreadable or of an unknown method."""


@dataclass
class LoadedCheckpoint:
    """A checkpoint: its config read once into ``spec``, its weights and the method it builds."""

    spec: RunSpec
    state_dict: dict[str, torch.Tensor]
    method: str
    path: Path
    metrics: dict[str, float] | None = None

    @property
    def cfg(self) -> omegaconf.DictConfig:
        """The checkpoint's config as solo-learn takes it (``spec.solo``)."""
        return self.spec.solo


def _read_lightning_checkpoint(path: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    args = path.parent / "args.json"
    if not args.is_file():
        raise CheckpointError(
            f"{path}: no args.json beside it; solo-learn writes the run's config there and it is "
            "needed to rebuild the model"
        )
    try:
        payload = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:
        raise CheckpointError(
            f"{path}: not a readable PyTorch checkpoint ({first_line(err)})"
        ) from None
    state_dict = payload.get("state_dict", payload) if isinstance(payload, dict) else None
    if not isinstance(state_dict, dict) or not any(k.startswith("backbone.") for k in state_dict):
        raise CheckpointError(
            f"{path}: holds no 'backbone.*' weights; is it a solo-learn checkpoint?"
        )
    try:
        cfg = json.loads(args.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{args}: not a readable JSON config ({first_line(err)})") from None
    if not isinstance(cfg, dict):
        raise CheckpointError(f"{args}: must hold a JSON object (the run's config)")
    return cfg, state_dict


def _key_groups(keys: set[str]) -> str:
    """``gating_head.* (4), projector.2.bias``: keys grouped by their top-level module."""
    groups: dict[str, list[str]] = {}
    for key in sorted(keys):
        groups.setdefault(key.split(".", 1)[0], []).append(key)
    return ", ".join(
        names[0] if len(names) == 1 else f"{top}.* ({len(names)})" for top, names in groups.items()
    )


def _load_weights(module: nn.Module, weights: dict[str, torch.Tensor], loaded) -> None:
    """``load_state_dict(strict=True)`` with a one-line error naming what does not match."""
    expected = set(module.state_dict())
    missing, unexpected = expected - set(weights), set(weights) - expected
    if missing or unexpected:
        parts = [f"missing {_key_groups(missing)}"] if missing else []
        parts += [f"unexpected {_key_groups(unexpected)}"] if unexpected else []
        raise CheckpointError(
            f"{loaded.path}: its weights do not match the {loaded.method} model its config "
            f"describes ({'; '.join(parts)}); is the args.json beside it from another run?"
        )
    try:
        module.load_state_dict(weights, strict=True)
    except RuntimeError as err:  # same names, other shapes
        detail = " ".join(line.strip() for line in str(err).splitlines()[1:3])
        raise CheckpointError(
            f"{loaded.path}: its weights do not fit the {loaded.method} model its config "
            f"describes ({detail}); is the args.json beside it from another run?"
        ) from None


def load_checkpoint(path: str | Path) -> LoadedCheckpoint:
    """Reads a checkpoint of any supported layout; :class:`CheckpointError` naming a bad file."""
    path = Path(path)
    if path.is_dir():
        inside = sorted(p.name for p in path.glob("*.ckpt"))[:3]
        hint = f" (it holds {', '.join(inside)})" if inside else ""
        raise CheckpointError(
            f"checkpoint {path} is a folder, not a checkpoint file; give the .ckpt file{hint}"
        )
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    metrics = None
    if is_artifact(path):
        cfg, state_dict, metrics = read_artifact(path)
    else:
        cfg, state_dict = _read_lightning_checkpoint(path)
    try:
        spec = checkpoint_spec(cfg, state_dict)
    except SavedConfigError as err:
        raise CheckpointError(f"{_config_source(path) if err.in_config else path}: {err}") from None
    return LoadedCheckpoint(
        spec=spec, state_dict=state_dict, method=str(spec.method.name), path=path, metrics=metrics
    )


def _strip_stale_keys(
    state_dict: dict[str, torch.Tensor], model: nn.Module
) -> dict[str, torch.Tensor]:
    # knn buffers and similar evaluation state are not part of the model we rebuild
    expected = set(model.state_dict())
    return {k: v for k, v in state_dict.items() if k in expected or not k.startswith("knn.")}


def _config_source(path: Path) -> Path:
    """The file a checkpoint's config is read from: the artifact itself, else its ``args.json``."""
    return path if is_artifact(path) else path.parent / "args.json"


def _check_config_ranges(loaded: LoadedCheckpoint) -> None:
    """The method's own config checks (``add_and_assert_specific_cfg``: ranges, known names) on
    a copy of the checkpoint's config; a value out of range names the file it came from."""
    from solo.methods import METHODS

    try:
        METHODS[loaded.method].add_and_assert_specific_cfg(copy.deepcopy(loaded.cfg))
    except (ValueError, AssertionError, omegaconf.errors.OmegaConfBaseException) as err:
        message = first_line(err).partition("    full_key:")[0].strip()
        raise CheckpointError(
            f"{_config_source(loaded.path)}: {message}; the checkpoint's config is not one its "
            f"{loaded.method} model can be built from"
        ) from None


def check_finite_weights(loaded: LoadedCheckpoint) -> None:
    """Refuses weights holding NaN or Inf (a diverged run); needs no solo-learn."""
    bad = [
        name
        for name, tensor in loaded.state_dict.items()
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())
    ]
    if bad:
        raise CheckpointError(
            f"{loaded.path}: {len(bad)} weight tensor(s) hold NaN or Inf (the first: {bad[0]}): "
            "broken weights, e.g. a diverged run"
        )


def load_method(loaded: LoadedCheckpoint, device: str | torch.device = "cpu") -> nn.Module:
    """The checkpoint's solo-learn method, weights loaded strictly, in eval mode: the check every
    command runs on a checkpoint, else :class:`CheckpointError` naming the file."""
    registration.register()
    _check_config_ranges(loaded)
    method = loaded.spec.method
    try:
        with without_resume_warning():  # read, never resumed
            model = build_method(
                method.name,
                loaded.spec.solo,
                method.small_stem,
                fresh_config=True,
                settings=method.settings,
            )
    except ConfigError as err:  # its method's settings, out of range
        raise CheckpointError(
            f"{_config_source(loaded.path)}: {first_line(err)}; the checkpoint's config is not "
            f"one its {loaded.method} model can be built from"
        ) from None
    except (omegaconf.errors.ConfigAttributeError, omegaconf.errors.ConfigKeyError) as err:
        key = getattr(err, "full_key", None) or first_line(err)
        raise CheckpointError(
            f"{_config_source(loaded.path)}: the config has no {key}, which the config of a "
            "pretraining run holds (solo-learn's parse_cfg adds it to the run's args.json); "
            "add it (docs/zoo.md: an args.json written by hand)"
        ) from None
    _load_weights(model, _strip_stale_keys(loaded.state_dict, model), loaded)
    check_finite_weights(loaded)
    return model.to(device).eval()


def load_backbone(loaded: LoadedCheckpoint, device: str | torch.device = "cpu") -> nn.Module:
    """The bare backbone with the checkpoint's weights, in eval mode."""
    registration.register()
    method = loaded.spec.method
    try:
        backbone = build_backbone(
            method.backbone, method.name, method.backbone_kwargs, method.small_stem
        )
    except ValueError as err:
        raise CheckpointError(f"{loaded.path}: {err}") from err
    weights = {
        k.removeprefix("backbone."): v
        for k, v in loaded.state_dict.items()
        if k.startswith("backbone.")
    }
    _load_weights(backbone, weights, loaded)
    return backbone.to(device).eval()
