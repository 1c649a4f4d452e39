"""Giving a model's layers of one exact class a subclass that computes the same thing another way
(only ``forward`` changes: parameters, ``state_dict`` keys and checkpoints stay)."""

from __future__ import annotations

from torch import nn

__all__ = ["swap_exact_class"]


def swap_exact_class(model: nn.Module, original: type[nn.Module], subclass: type[nn.Module]) -> int:
    """Turns every module of ``model`` whose class is exactly ``original`` (not a subclass of it,
    which may compute something else) into ``subclass``, in place; returns how many."""
    if not issubclass(subclass, original):
        raise TypeError(f"{subclass.__name__} is not a subclass of {original.__name__}")
    count = 0
    for module in model.modules():
        if type(module) is original:
            module.__class__ = subclass
            count += 1
    return count
