"""solo-bayesncl: Bayesian Gated Non-Negative Contrastive Learning for solo-learn.

Importing the package registers the ``bayesncl`` and ``ncl`` methods into solo-learn's
``solo.methods.METHODS`` (at once if solo-learn's methods are loaded, else when they are first
imported; see :mod:`solo_bayesncl.registration`). Without solo-learn, the host-independent parts
(``nonneg``, ``gates``, ``losses``, ``metrics``, ``zoo``, ``dashboard``) import and work in any
training loop.
"""

from solo_bayesncl.registration import install_registration_hook, register_methods

__version__ = "0.1.0"

SOLO_LEARN_AVAILABLE: bool = install_registration_hook()

__all__ = ["SOLO_LEARN_AVAILABLE", "__version__", "register_methods"]
