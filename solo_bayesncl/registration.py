"""Registration of ``bayesncl`` and ``ncl`` into solo-learn's method registry.

solo-learn's pipelines look methods up in the dict ``solo.methods.METHODS``; adding our classes
to it lets ``main_pretrain.py``, kNN and UMAP evaluation find them by name.
"""

from __future__ import annotations

import importlib.util

__all__ = ["PLUGIN_METHODS", "register_methods", "solo_learn_available"]

PLUGIN_METHODS: tuple[str, ...] = ("bayesncl", "ncl")


def solo_learn_available() -> bool:
    """True when upstream solo-learn (package ``solo``) can be imported."""
    try:
        return importlib.util.find_spec("solo") is not None
    except (ImportError, ValueError):
        return False


def register_methods() -> bool:
    """Adds ``bayesncl`` and ``ncl`` to ``solo.methods.METHODS``.

    Idempotent. Returns False, registering nothing, when solo-learn is not installed.
    """
    if not solo_learn_available():
        return False
    import solo.methods

    from solo_bayesncl.methods import NCL, BayesNCL

    solo.methods.METHODS.setdefault("bayesncl", BayesNCL)
    solo.methods.METHODS.setdefault("ncl", NCL)
    for cls in (BayesNCL, NCL):
        if cls.__name__ not in solo.methods.__all__:
            solo.methods.__all__.append(cls.__name__)
        setattr(solo.methods, cls.__name__, cls)
    return True
