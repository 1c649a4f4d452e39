"""solo-bayesncl: Bayesian Gated Non-Negative Contrastive Learning for solo-learn.

Importing the package registers the ``bayesncl`` and ``ncl`` methods into solo-learn's
``solo.methods.METHODS`` (:mod:`solo_bayesncl.host.registration`). Without solo-learn, ``core``,
``metrics``, ``zoo`` and ``dashboard`` import and work in any training loop.

The package holds only sub-packages. :data:`LAYERS` lists them, lowest first; a module imports
only from its own sub-package and from those listed before it (``tests/test_layering.py`` reads
every import with ``ast``). ``docs/architecture.md`` says what each holds.

Imports sit at the top of each module, except inside functions: solo-learn and what it brings
or an optional extra (DALI, selenium, wandb); ``matplotlib.pyplot``, ``kornia`` and
``torch.distributed.nn``, whose import changes global state; and the commands' library imports,
so that ``--help`` answers before torch loads. Importing the package changes no environment
variable and no torch setting (:mod:`solo_bayesncl.core.threads`).
"""

from __future__ import annotations

from solo_bayesncl.host.registration import install_registration_hook, register

__version__ = "0.1.0"

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core", ("core", "metrics")),
    ("methods", ("methods",)),
    ("library", ("data", "host", "config", "io", "training")),
    ("tools", ("dashboard", "zoo", "evaluation", "benchmark")),
    ("commands", ("cli",)),
)
"""The sub-packages by layer, lowest first; inside a layer, too, a sub-package imports only
those listed before it. A ``__main__`` module is a command (``python -m``) and belongs to ``cli``."""

SOLO_LEARN_AVAILABLE: bool = install_registration_hook()

__all__ = ["LAYERS", "SOLO_LEARN_AVAILABLE", "__version__", "register"]
