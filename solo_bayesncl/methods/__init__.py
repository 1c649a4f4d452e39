"""solo-learn method classes (need upstream solo-learn installed)."""

from solo_bayesncl.methods.bayesncl import BayesNCL
from solo_bayesncl.methods.ncl import NCL

__all__ = ["NCL", "BayesNCL"]
