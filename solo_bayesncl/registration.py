"""Registration of ``bayesncl`` and ``ncl`` into solo-learn's method registry.

solo-learn's pipelines look methods up in the dict ``solo.methods.METHODS``. Importing
``solo_bayesncl`` adds our classes to it whichever package is imported first:

- if ``solo.methods`` is already imported, the methods are registered at once;
- otherwise a one-shot import hook registers them right after ``solo.methods`` is first
  imported, so ``import solo_bayesncl`` stays fast (no solo-learn, Lightning or timm import) for
  the parts that do not need the host (losses, metrics, zoo downloads, dashboard).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

__all__ = [
    "INSTALL_SOLO_LEARN",
    "PLUGIN_METHODS",
    "SUPPORTED_METHODS",
    "install_registration_hook",
    "register_methods",
    "require_solo_learn",
    "solo_learn_available",
]

PLUGIN_METHODS: tuple[str, ...] = ("bayesncl", "ncl")
"""The methods this plugin adds to solo-learn."""

SUPPORTED_METHODS: tuple[str, ...] = (*PLUGIN_METHODS, "simclr", "mocov2plus")
"""Every method the project evaluates, loads from checkpoints and publishes: the plugin's two and
solo-learn's two baselines of the benchmark."""

INSTALL_SOLO_LEARN = (
    'pip install "setuptools<81" && pip install --no-build-isolation '
    '"solo-learn @ git+https://github.com/vturrisi/solo-learn@9187ea39c2c3f43c455ab06664d2b019a9802954"'
)


def solo_learn_available() -> bool:
    """True when upstream solo-learn (package ``solo``) can be imported."""
    try:
        return importlib.util.find_spec("solo") is not None
    except (ImportError, ValueError):
        return False


def require_solo_learn(entry_point: str) -> None:
    """Exits with status 2 and the install command when ``import solo`` would fail: the one
    message every entry point gives when upstream solo-learn is missing."""
    if not solo_learn_available():
        sys.stderr.write(
            f"{entry_point} needs upstream solo-learn 1.0.6, which is not installed.\n"
            f"Install it with:\n  {INSTALL_SOLO_LEARN}\n"
        )
        raise SystemExit(2)


def register_methods() -> bool:
    """Adds ``bayesncl`` and ``ncl`` to ``solo.methods.METHODS`` (imports solo-learn).

    Idempotent. Returns False, registering nothing, when solo-learn is not installed.
    """
    if not solo_learn_available():
        return False
    if "solo.methods" not in sys.modules:
        importlib.import_module("solo.methods")
    # read from sys.modules: during the hook, ``solo`` itself may still be initialising
    registry = sys.modules["solo.methods"]

    from solo_bayesncl.methods import NCL, BayesNCL

    registry.METHODS.setdefault("bayesncl", BayesNCL)
    registry.METHODS.setdefault("ncl", NCL)
    for cls in (BayesNCL, NCL):
        if cls.__name__ not in registry.__all__:
            registry.__all__.append(cls.__name__)
        setattr(registry, cls.__name__, cls)
    return True


class _RegisteringLoader(importlib.abc.Loader):
    """Runs the real loader of ``solo.methods``, then registers the plugin's methods."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        register_methods()


class _SoloMethodsFinder(importlib.abc.MetaPathFinder):
    """Finds ``solo.methods`` through the other finders and wraps its loader once."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "solo.methods":
            return None
        sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _RegisteringLoader(spec.loader)
        return spec


def install_registration_hook() -> bool:
    """Registers now if ``solo.methods`` is loaded, else on its first import.

    Returns whether solo-learn is installed.
    """
    if not solo_learn_available():
        return False
    if "solo.methods" in sys.modules:
        return register_methods()
    if not any(isinstance(f, _SoloMethodsFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SoloMethodsFinder())
    return True
