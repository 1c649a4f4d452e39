"""The hyperparameters of each method, declared once: one frozen dataclass per method
(:class:`NCLSettings`, :class:`BayesNCLSettings`) whose fields carry their default, meaning and
allowed values (:data:`solo_bayesncl.core.hyperparameters.RANGES`). From it come the refusal of a
bad value, the method's docstring table (:func:`settings_table`), the defaults written into the
config and the loss module (``settings.objective()``). Needs no solo-learn."""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from solo_bayesncl.core.gates import GATE_MODES, GATE_TYPES, resolve_gate_type
from solo_bayesncl.core.hyperparameters import FLAG, RANGES, Rule, integer, number
from solo_bayesncl.core.losses import BayesNCLLoss, NCLLoss
from solo_bayesncl.core.nonneg import NON_NEGATIVITY_MAPS, resolve_non_neg
from solo_bayesncl.core.validation import (
    ConfigError,
    require_choice,
    require_int,
    require_known_keys,
)

__all__ = [
    "METHOD_SETTINGS",
    "BayesNCLSettings",
    "ContrastiveSettings",
    "NCLSettings",
    "Rule",
    "check_method_kwargs",
    "check_owned_keys",
    "checked_method",
    "owned_keys",
    "settings_table",
]

SECTION = "method_kwargs"


NON_NEG = Rule(
    lambda key, value: resolve_non_neg(value, key=key),
    "one of " + ", ".join(sorted(NON_NEGATIVITY_MAPS)) + " (official leakyrelu, null accepted)",
)
GATE_TYPE = Rule(
    lambda key, value: resolve_gate_type(value, key=key),
    "one of " + ", ".join(GATE_TYPES) + " (official STE, gumbel_sigmoid accepted)",
)
GATE_MODE = Rule(
    lambda key, value: require_choice(key, str(value).lower(), GATE_MODES),
    "one of " + ", ".join(GATE_MODES),
)


def setting(
    meaning: str,
    rule: Rule,
    default: Any = dataclasses.MISSING,
    *,
    when: str | None = None,
    default_from: str | None = None,
    section: str = SECTION,
) -> Any:
    """One hyperparameter: its ``meaning`` (the docstring table's words, and the hint of a missing
    required key), the ``rule`` a value must follow and its ``default`` (none: required); the rule
    applies only when the flag field ``when`` is true; ``default_from`` names the field whose value
    is the default; ``section`` the config section (not ``method_kwargs``: a key this method
    alone reads, :func:`check_owned_keys`)."""
    metadata = {
        "meaning": meaning,
        "rule": rule,
        "when": when,
        "default_from": default_from,
        "section": section,
    }
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class ContrastiveSettings:
    """The hyperparameters NCL and BayesNCL share (Wang et al., arXiv 2403.12459)."""

    STOP_WHEN_FALSE: ClassVar[str | None] = None
    """A flag field after which nothing more is read when it is false (BayesNCL's ``use_bayes``)."""

    proj_hidden_dim: int = setting("hidden width of the projector, e.g. 2048", integer(1))
    proj_output_dim: int = setting("number of features k, e.g. 256", integer(1))
    temperature: float = setting("InfoNCE temperature T", RANGES["temperature"], 0.2)
    non_neg: str = setting("non-negativity map phi", NON_NEG, "rep_relu")
    use_topk: bool = setting(
        "keep only the topk_k largest activations per sample (the NCL+TopK baseline)", FLAG, False
    )
    topk_k: int = setting(
        "activations kept per sample when use_topk", RANGES["topk_k"], 32, when="use_topk"
    )

    @classmethod
    def check_kwargs(
        cls, kwargs: Mapping[str, Any], optimizer: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Every field's value from ``kwargs`` (other keys are ignored here) or, for an
        ``optimizer`` field, from ``optimizer``, defaults filled in, each checked by its rule in
        declaration order; stops after :attr:`STOP_WHEN_FALSE` when it is false."""
        values: dict[str, Any] = {}
        sections = {SECTION: kwargs, "optimizer": optimizer or {}}
        for f in dataclasses.fields(cls):
            meta = f.metadata
            key, given = f"{meta['section']}.{f.name}", sections[meta["section"]]
            value = given.get(f.name, None) if f.name in given else _default(f, values)
            value = None if value == "None" else value
            if value is None and f.default is dataclasses.MISSING and not meta["default_from"]:
                raise ConfigError(f"{key} is missing: {meta['meaning']}")
            if meta["when"] is None or values[meta["when"]]:
                value = meta["rule"].check(key, value)
            values[f.name] = value
            if f.name == cls.STOP_WHEN_FALSE and not value:
                ContrastiveSettings.check_together(values)  # the shared fields' rules
                return values
        cls.check_together(values)
        return values

    @classmethod
    def check_together(cls, values: Mapping[str, Any]) -> None:
        """The rules between fields: ``topk_k`` at most ``proj_output_dim``."""
        if values["use_topk"] and values["topk_k"] > values["proj_output_dim"]:
            raise ConfigError(
                f"{SECTION}.topk_k={values['topk_k']} must be at most "
                f"{SECTION}.proj_output_dim={values['proj_output_dim']}"
            )

    @classmethod
    def from_kwargs(
        cls, kwargs: Mapping[str, Any], optimizer: Mapping[str, Any] | None = None
    ) -> ContrastiveSettings:
        """The settings of ``kwargs`` (and ``optimizer``), checked (:meth:`check_kwargs`)."""
        return cls(**cls.check_kwargs(kwargs, optimizer))

    @property
    def top_k(self) -> int | None:
        """How many activations are kept per sample (``topk_k`` when ``use_topk``, else None)."""
        return self.topk_k if self.use_topk else None

    def written(self) -> dict[str, Any]:
        """Each setting under its config key (``method_kwargs.temperature``), as a run's config
        records it: nothing after :attr:`STOP_WHEN_FALSE` when it is false."""
        keys = {}
        for f in dataclasses.fields(self):
            keys[f"{f.metadata['section']}.{f.name}"] = getattr(self, f.name)
            if f.name == self.STOP_WHEN_FALSE and not getattr(self, f.name):
                break
        return keys

    def trains(self, method: str) -> tuple[str, ContrastiveSettings]:
        """The method a run of ``method`` with these settings trains, and its settings."""
        return method, self

    def objective(self, gather_distributed: bool = True, check_inputs: bool = True) -> NCLLoss:
        """The method's loss module with these hyperparameters."""
        raise NotImplementedError


def _default(f: dataclasses.Field, values: Mapping[str, Any]) -> Any:
    source = f.metadata["default_from"]
    if source is not None:
        return values[source]
    return None if f.default is dataclasses.MISSING else f.default


@dataclass(frozen=True)
class NCLSettings(ContrastiveSettings):
    """NCL's hyperparameters: the shared ones and the dimension-dropout control."""

    dimension_dropout: float = setting(
        "share of the representation's entries zeroed at random in training before InfoNCE "
        "(a random gate without a gating head or prior; the representation evaluated is "
        "unchanged)",
        RANGES["dimension_dropout"],
        0.0,
    )
    dimension_dropout_epochs: int = setting(
        "when > 0, dimension_dropout falls linearly to 0 at this epoch; 0 keeps it constant",
        integer(0),
        0,
    )

    def objective(self, gather_distributed: bool = True, check_inputs: bool = True) -> NCLLoss:
        """:class:`~solo_bayesncl.core.losses.NCLLoss` with these hyperparameters."""
        return NCLLoss(
            self.temperature,
            self.non_neg,
            self.top_k,
            self.dimension_dropout,
            gather_distributed=gather_distributed,
            check_inputs=check_inputs,
        )

    @classmethod
    def check_together(cls, values: Mapping[str, Any]) -> None:
        """The shared rules, and ``dimension_dropout_epochs`` needs a share to fall from."""
        super().check_together(values)
        epochs = values["dimension_dropout_epochs"]
        if epochs > 0 and values["dimension_dropout"] == 0.0:
            raise ConfigError(
                f"{SECTION}.dimension_dropout_epochs={epochs} needs "
                f"{SECTION}.dimension_dropout > 0 (the share it falls from)"
            )


@dataclass(frozen=True)
class BayesNCLSettings(ContrastiveSettings):
    """BayesNCL's hyperparameters (arXiv 2605.28441), defaults from the official CIFAR-100 run."""

    STOP_WHEN_FALSE: ClassVar[str | None] = "use_bayes"

    use_bayes: bool = setting(
        "the official flag: false means no gate at all, so the run trains plain ncl", FLAG, True
    )
    gate_type: str = setting(
        "how the hard gate is drawn in training (ste: the paper's main variant)", GATE_TYPE, "ste"
    )
    bayesian_prior_prob: float = setting(
        "rho, the prior open probability of every gate", RANGES["bayesian_prior_prob"], 0.8
    )
    gate_threshold: float = setting("t, the threshold of alpha", RANGES["gate_threshold"], 0.5)
    sigmoid_temperature: float = setting(
        "tau_g, the gate's temperature", RANGES["sigmoid_temperature"], 1.0
    )
    bayesian_kl_lambda: float = setting(
        "lambda, the weight of the KL term", RANGES["bayesian_kl_lambda"], 3e-5
    )
    kl_eps: float = setting("clamp of alpha and rho in the KL", RANGES["kl_eps"], 0.01)
    use_kl: bool = setting(
        "add the KL term (false: the gate trains by InfoNCE only)", RANGES["use_kl"], True
    )
    gating_head_hidden_dim: int = setting(
        "hidden width of the gating head (default: proj_hidden_dim)",
        integer(1),
        None,
        default_from="proj_hidden_dim",
    )
    eval_gate: str = setting(
        "representation read at evaluation: hard (v) or soft (normalize(u * alpha), zeroes "
        "nothing, so threshold metrics equal no gate)",
        GATE_MODE,
        "hard",
    )
    gating_head_lr: float = setting(
        "the gating head's learning rate (its own parameter group, not rescaled by batch size)",
        number(0.0, math.inf),
        0.1,
        section="optimizer",
    )

    def trains(self, method: str) -> tuple[str, ContrastiveSettings]:
        """``use_bayes: False`` has the official meaning: no gate at all, so the run trains
        ``ncl`` with the shared settings (said in a warning)."""
        if self.use_bayes:
            return method, self
        warnings.warn(
            "method_kwargs.use_bayes=False means no gate at all (the official meaning): "
            "training method=ncl; to keep the gate and drop only the KL, set "
            "method_kwargs.use_kl=False",
            stacklevel=2,
        )
        shared = dataclasses.fields(ContrastiveSettings)
        return "ncl", NCLSettings(**{f.name: getattr(self, f.name) for f in shared})

    def objective(self, gather_distributed: bool = True, check_inputs: bool = True) -> BayesNCLLoss:
        """:class:`~solo_bayesncl.core.losses.BayesNCLLoss` with these hyperparameters."""
        return BayesNCLLoss(
            self.temperature,
            self.non_neg,
            self.top_k,
            bayesian_prior_prob=self.bayesian_prior_prob,
            bayesian_kl_lambda=self.bayesian_kl_lambda,
            use_kl=self.use_kl,
            gate_type=self.gate_type,
            gate_threshold=self.gate_threshold,
            sigmoid_temperature=self.sigmoid_temperature,
            kl_eps=self.kl_eps,
            gather_distributed=gather_distributed,
            check_inputs=check_inputs,
        )


METHOD_SETTINGS: dict[str, type[ContrastiveSettings]] = {
    "ncl": NCLSettings,
    "bayesncl": BayesNCLSettings,
}
"""The hyperparameter declaration of each plugin method."""

UPSTREAM_METHOD_KWARGS: dict[str, tuple[str, ...]] = {
    "simclr": ("proj_hidden_dim", "proj_output_dim", "temperature"),
    "mocov2plus": ("proj_hidden_dim", "proj_output_dim", "temperature", "queue_size"),
}
"""The ``method_kwargs`` keys solo-learn's own methods read (solo-learn 1.0.6)."""


def settings_table(settings: type[ContrastiveSettings]) -> str:
    """The docstring table of a method's hyperparameters, one line per field."""
    lines = [f"Hyperparameters (``{SECTION}``), from :class:`{settings.__name__}`:", ""]
    for f in dataclasses.fields(settings):
        meta = f.metadata
        if meta["default_from"]:
            default = f"default: {meta['default_from']}"
        elif f.default is dataclasses.MISSING:
            default = "required"
        else:
            default = f"default {f.default!r}"
        name = f.name if meta["section"] == SECTION else f"{meta['section']}.{f.name}"
        lines.append(f"    {name} ({default}; {meta['rule'].allowed}): {meta['meaning']}.")
    return "\n".join(lines)


def checked_method(cfg: Mapping[str, Any], known: Iterable[str]) -> str:
    """The method a raw pretraining config names, one of ``known`` (solo-learn's registry), its
    ``method_kwargs`` keys checked (:func:`check_method_kwargs`) before anything is resolved."""
    method = cfg.get("method", None)
    if method not in known:
        raise ValueError(
            f"method={method!r} is not a solo-learn method; allowed values: {', '.join(sorted(known))}"
        )
    check_method_kwargs(method, cfg.get(SECTION, None))
    return method


def check_method_kwargs(method: str | None, kwargs: Mapping[str, Any] | None) -> None:
    """Refuses ``method_kwargs`` keys the method does not read and, for solo-learn's ``simclr`` and
    ``mocov2plus``, values out of range; called by the pretraining entry point only, so that
    checkpoints of the official codes (with their extra keys) still load."""
    settings = METHOD_SETTINGS.get(str(method))
    if settings is not None:
        known = tuple(
            f.name for f in dataclasses.fields(settings) if f.metadata["section"] == SECTION
        )
    else:
        known = UPSTREAM_METHOD_KWARGS.get(str(method))
    if known is not None:
        require_known_keys(SECTION, kwargs, known)
    if settings is None and known is not None and kwargs is not None:  # solo-learn's ranges
        for key in ("proj_hidden_dim", "proj_output_dim", "queue_size"):
            if kwargs.get(key, None) is not None:
                require_int(f"{SECTION}.{key}", kwargs[key], low=1)
        if kwargs.get("temperature", None) is not None:
            RANGES["temperature"].check(f"{SECTION}.temperature", kwargs["temperature"])


def owned_keys() -> dict[str, str]:
    """The keys outside ``method_kwargs`` that one method alone reads, with that method
    (``optimizer.gating_head_lr``: ``bayesncl``), from the declarations."""
    return {
        f"{f.metadata['section']}.{f.name}": method
        for method, settings in METHOD_SETTINGS.items()
        for f in dataclasses.fields(settings)
        if f.metadata["section"] != SECTION
    }


def check_owned_keys(cfg: Mapping[str, Any]) -> None:
    """Refuses a key of :func:`owned_keys` in a config whose method would ignore it."""
    method = cfg.get("method", None)
    for key, owner in owned_keys().items():
        section, _, name = key.partition(".")
        if method != owner and (cfg.get(section, None) or {}).get(name, None) is not None:
            raise ConfigError(
                f"{key} is read by method={owner} only; method={method} would ignore it: remove it"
            )
