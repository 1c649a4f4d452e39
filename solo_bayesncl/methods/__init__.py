"""The plugin's solo-learn methods, ``NCL`` and ``BayesNCL``, their heads and their config keys;
the method classes subclass solo-learn's ``BaseMethod`` and need it installed (the rest does not).
"""

import importlib.util

from solo_bayesncl.core.gates import GatingHead
from solo_bayesncl.methods.heads import projector

__all__ = ["NCL", "BayesNCL", "GatingHead", "projector"]

if importlib.util.find_spec("solo") is not None:
    from solo_bayesncl.methods.bayesncl import BayesNCL
    from solo_bayesncl.methods.ncl import NCL


def __getattr__(name: str):
    if name in ("NCL", "BayesNCL"):
        raise ImportError(
            f"solo_bayesncl.methods.{name} subclasses solo-learn's BaseMethod and needs upstream "
            "solo-learn installed (see the README, Install)"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
