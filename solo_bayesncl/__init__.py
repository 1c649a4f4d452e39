"""solo-bayesncl: Bayesian Gated Non-Negative Contrastive Learning for solo-learn.

Importing the package registers the ``bayesncl`` and ``ncl`` methods into solo-learn's
``solo.methods.METHODS`` when solo-learn is installed. Without solo-learn, the host-independent
parts (``nonneg``, ``gates``, ``losses``, ``metrics``) still import and work in any training loop.
"""

from solo_bayesncl.registration import register_methods

__version__ = "0.1.0"

SOLO_LEARN_AVAILABLE: bool = register_methods()

__all__ = ["SOLO_LEARN_AVAILABLE", "__version__", "register_methods"]
