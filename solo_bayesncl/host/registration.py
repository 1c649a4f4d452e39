"""Registration of ``bayesncl`` and ``ncl`` into solo-learn's method registry.

solo-learn's pipelines look methods up in the dict ``solo.methods.METHODS``. Two ways in:

- :func:`register` (``solo_bayesncl.register()``) imports ``solo.methods`` and registers the
  methods; idempotent.
- ``import solo_bayesncl`` registers them at once if ``solo.methods`` is imported, else through
  an import hook run right after it is (so the import stays fast: no solo-learn, Lightning or
  timm). The hook stays in ``sys.meta_path`` until registration succeeds; when
  ``solo_bayesncl.methods`` itself imports ``solo.methods``, it registers once that has loaded.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
import warnings
from types import ModuleType

from solo_bayesncl.host.availability import solo_learn_available

__all__ = [
    "SUPPORTED_METHODS",
    "install_registration_hook",
    "register",
]

SUPPORTED_METHODS: tuple[str, ...] = ("simclr", "mocov2plus", "ncl", "bayesncl")
"""Every method the project compares, evaluates, loads from checkpoints and publishes: solo-learn's
two baselines, then the plugin's two (the benchmark table's row order)."""


def _register_into(registry: ModuleType) -> None:
    """Adds the plugin's classes to a loaded ``solo.methods`` module, then drops the hook."""
    from solo_bayesncl.methods import NCL, BayesNCL

    registry.METHODS.setdefault("bayesncl", BayesNCL)
    registry.METHODS.setdefault("ncl", NCL)
    for cls in (BayesNCL, NCL):
        if cls.__name__ not in registry.__all__:
            registry.__all__.append(cls.__name__)
        setattr(registry, cls.__name__, cls)
    _remove_hook()


def register() -> bool:
    """Imports ``solo.methods`` and adds ``bayesncl`` and ``ncl`` to its ``METHODS``; idempotent.
    False, registering nothing, without solo-learn."""
    if not solo_learn_available():
        return False
    if "solo.methods" not in sys.modules:
        importlib.import_module("solo.methods")  # the hook, when installed, registers here
    # read from sys.modules: during the hook, ``solo`` itself may still be initialising
    _register_into(sys.modules["solo.methods"])
    return True


_HOOKED_MODULES = ("solo.methods", "solo_bayesncl.methods")
"""The modules whose loading the hook watches: solo-learn's registry and the plugin's classes."""


def _plugin_methods_loading() -> bool:
    """Whether ``solo_bayesncl.methods`` is part-way through its own import (its module exists,
    its classes do not yet), as when it is the import that loads ``solo.methods``."""
    module = sys.modules.get("solo_bayesncl.methods")
    return module is not None and not all(hasattr(module, name) for name in ("BayesNCL", "NCL"))


class _RegisteringLoader(importlib.abc.Loader):
    """Runs the real loader of a watched module, then registers the plugin's methods once both
    ``solo.methods`` and ``solo_bayesncl.methods`` are loaded (the second to finish does it)."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)  # a failure here leaves the hook for the next import
        registry = sys.modules.get("solo.methods")
        if registry is None or _plugin_methods_loading():
            return  # the other watched module registers when it has loaded
        try:
            _register_into(registry)
        except Exception as err:  # noqa: BLE001  (reported, and register() raises it again)
            warnings.warn(
                f"solo_bayesncl could not register bayesncl and ncl into solo.methods "
                f"({type(err).__name__}: {err}); call solo_bayesncl.register() to see why",
                RuntimeWarning,
                stacklevel=2,
            )


class _SoloMethodsFinder(importlib.abc.MetaPathFinder):
    """Finds the watched modules (:data:`_HOOKED_MODULES`) and wraps their loaders; stays
    installed until :func:`_register_into` has run."""

    def __init__(self) -> None:
        self._busy = threading.local()

    def find_spec(self, fullname, path, target=None):
        if fullname not in _HOOKED_MODULES or getattr(self._busy, "active", False):
            return None
        self._busy.active = True  # the lookup below must not find this finder again
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy.active = False
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _RegisteringLoader(spec.loader)
        return spec


def _remove_hook() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _SoloMethodsFinder)]


def install_registration_hook() -> bool:
    """Registers now if ``solo.methods`` is loaded, else on its import; True with solo-learn."""
    if not solo_learn_available():
        return False
    if "solo.methods" in sys.modules:
        return register()
    if not any(isinstance(f, _SoloMethodsFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SoloMethodsFinder())
    return True
