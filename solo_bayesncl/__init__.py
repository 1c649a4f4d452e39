"""solo-bayesncl: Bayesian Gated Non-Negative Contrastive Learning for solo-learn.

Importing the package registers the ``bayesncl`` and ``ncl`` methods into solo-learn's
``solo.methods.METHODS`` (at once if solo-learn's methods are loaded, else when they are
imported; see :mod:`solo_bayesncl.registration`); ``solo_bayesncl.register()`` does it
explicitly. Without solo-learn, the host-independent parts
(``nonneg``, ``gates``, ``losses``, ``metrics``, ``zoo``, ``dashboard``) import and work in any
training loop.

Layout, lowest layer first; a module imports only from its own layer or below (a test reads
every import with ``ast``):

1. core, host-independent: ``nonneg``, ``gates``, ``losses``, ``distributed``, ``metrics``;
2. ``methods``: the solo-learn methods ``bayesncl`` and ``ncl``;
3. the plugin's library: ``registration``, ``models`` (building methods and backbones),
   ``checkpoints`` and ``artifact`` (loading), ``representations`` (the one feature-extraction
   pass), ``data``, ``config``, ``runtime``, ``trainer``;
4. commands and tools: ``cli`` (pretrain, linear, kNN), ``evaluation`` (report and training
   callback), ``benchmark`` (the side-by-side comparison), ``zoo``, ``dashboard``.

Imports sit at the top of each module, with two kinds of exception, both inside functions:
solo-learn, Lightning and the modules that need them, which are optional for the core and loaded
only when used; and the heavy imports of command entry points (``cli``, ``evaluation.command``,
the ``__main__`` modules), so that ``--help`` and input errors answer before torch and solo-learn
load.
"""

from solo_bayesncl.registration import install_registration_hook, register, register_methods

__version__ = "0.1.0"

SOLO_LEARN_AVAILABLE: bool = install_registration_hook()

__all__ = ["SOLO_LEARN_AVAILABLE", "__version__", "register", "register_methods"]
