"""The ``method_kwargs`` keys each method reads, and the check that refuses any other key (a
misspelt key would otherwise be ignored and its default used).

Importing this module needs no solo-learn: the pretraining entry point checks the keys before
the method class is built.
"""

from __future__ import annotations

import omegaconf
from omegaconf import OmegaConf

from solo_bayesncl.core.validation import require_int, require_known_keys, require_temperature

__all__ = ["UPSTREAM_METHOD_KWARGS", "check_method_kwargs", "check_upstream_method_kwargs"]

UPSTREAM_METHOD_KWARGS: dict[str, tuple[str, ...]] = {
    "simclr": ("proj_hidden_dim", "proj_output_dim", "temperature"),
    "mocov2plus": ("proj_hidden_dim", "proj_output_dim", "temperature", "queue_size"),
}
"""The ``method_kwargs`` keys solo-learn's own methods read (solo-learn 1.0.6)."""


def check_method_kwargs(cfg: omegaconf.DictConfig, method_class: type) -> None:
    """Refuses ``method_kwargs`` keys the method does not read: the class's ``METHOD_KWARGS``
    (NCL, BayesNCL) or :data:`UPSTREAM_METHOD_KWARGS`. Called by the pretraining entry point
    only, so that checkpoints of the official codes (with their extra keys) still load."""
    method = OmegaConf.select(cfg, "method", default=None)
    known = getattr(method_class, "METHOD_KWARGS", None) or UPSTREAM_METHOD_KWARGS.get(method)
    if known is not None:
        require_known_keys(cfg, "method_kwargs", known)


def check_upstream_method_kwargs(cfg: omegaconf.DictConfig) -> None:
    """The ranges of the ``method_kwargs`` solo-learn's ``simclr`` and ``mocov2plus`` read
    (NCL and BayesNCL check their own)."""
    if OmegaConf.select(cfg, "method", default=None) not in UPSTREAM_METHOD_KWARGS:
        return
    for key in ("proj_hidden_dim", "proj_output_dim", "queue_size"):
        value = OmegaConf.select(cfg, f"method_kwargs.{key}", default=None)
        if value is not None:
            require_int(f"method_kwargs.{key}", value, low=1)
    temperature = OmegaConf.select(cfg, "method_kwargs.temperature", default=None)
    if temperature is not None:
        require_temperature("method_kwargs.temperature", temperature)
