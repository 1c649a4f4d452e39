"""The one message every entry point gives when upstream solo-learn is missing."""

from __future__ import annotations

import sys

from solo_bayesncl.registration import solo_learn_available

__all__ = ["INSTALL_SOLO_LEARN", "require_solo_learn"]

INSTALL_SOLO_LEARN = (
    'pip install "setuptools<81" && pip install --no-build-isolation '
    '"solo-learn @ git+https://github.com/vturrisi/solo-learn@9187ea39c2c3f43c455ab06664d2b019a9802954"'
)


def require_solo_learn(entry_point: str) -> None:
    """Exits with status 2 and the install command when ``import solo`` would fail."""
    if not solo_learn_available():
        sys.stderr.write(
            f"{entry_point} needs upstream solo-learn 1.0.6, which is not installed.\n"
            f"Install it with:\n  {INSTALL_SOLO_LEARN}\n"
        )
        raise SystemExit(2)
