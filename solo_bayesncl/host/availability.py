"""Whether upstream solo-learn is installed, the one message every command gives when it is not,
and the filter of the known-harmless warnings that importing it prints (the commands call it,
never an import)."""

from __future__ import annotations

import importlib.util
import sys
import warnings

__all__ = [
    "quiet_third_party_warnings",
    "require_solo_learn",
    "solo_learn_available",
]

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


# (category, message regex) of third-party warnings that say nothing about the user's run:
# deprecations inside libraries we pin and timm's registry notices when solo-learn registers its
# own backbones under timm's names.
_HARMLESS: tuple[tuple[type[Warning], str], ...] = (
    (Warning, r"pkg_resources is deprecated"),
    (FutureWarning, r"Importing from timm\.\S+ is deprecated"),
    (UserWarning, r"Overwriting \S+ in registry with solo\.backbones"),
    (FutureWarning, r"`torch\.cuda\.amp\.custom_(fwd|bwd)\(args\.\.\.\)` is deprecated"),
    (Warning, r"`isinstance\(treespec, LeafSpec\)` is deprecated"),
    (UserWarning, r"'pin_memory' argument is set as true but no accelerator is found"),
)


def quiet_third_party_warnings() -> None:
    """Hides the known-harmless warnings above that importing solo-learn prints (entry points only;
    not when the user chose warning filters)."""
    if sys.warnoptions:
        return
    for category, message in _HARMLESS:
        warnings.filterwarnings("ignore", message=message, category=category)
